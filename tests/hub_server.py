"""A Hugging Face Hub on 127.0.0.1: the subset of the Hub's HTTP API that huggingface_hub speaks.

Downloads (`snapshot_download`, `hf_hub_download`): repo info by revision, the recursive tree
listing, and HEAD/GET on `/{repo}/resolve/{revision}/{path}` with the X-Repo-Commit / ETag /
Content-Length headers the client caches by. Files the Hub's default .gitattributes puts in Git LFS
(`LFS_PATTERNS`: the weights, sentencepiece models) are listed as the Hub lists them, with an `lfs`
entry holding the sha256 of the content and the git blob id of the LFS pointer, and served with that
sha256 as ETag; every other file has its git blob id as ETag. Uploads (`create_repo`, `create_branch`,
`create_commit`, `upload_folder`): repo and branch creation, YAML validation, `preupload` (which
answers "regular" for every file, so the client sends the bytes base64-encoded in the commit and
never tries LFS or Xet), and the ndjson `commit` endpoint. It never sends Xet headers, so the
client downloads over plain HTTP. Tokens are checked like the Hub does: a bad token is a 401 with
"Invalid credentials in Authorization header"; a private repo is a 404 RepoNotFound to strangers.

Every request is recorded in `requests` so tests can assert what the client did.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Repo:
    private: bool = False
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit sha
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> {path: content}


LFS_PATTERNS = ("*.safetensors", "*.model")


def git_blob_sha1(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def is_lfs(path: str) -> bool:
    return any(fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern) for pattern in LFS_PATTERNS)


def lfs_pointer(content: bytes) -> bytes:
    """What git stores for an LFS file: a pointer naming the content by its sha256."""
    return b"version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n" % (hashlib.sha256(content).hexdigest().encode(), len(content))


def etag(path: str, content: bytes) -> str:
    """The Hub's ETag: the sha256 of the content for an LFS file, the git blob id for any other."""
    return hashlib.sha256(content).hexdigest() if is_lfs(path) else git_blob_sha1(content)


def tree_entry(path: str, content: bytes) -> dict:
    if not is_lfs(path):
        return {"type": "file", "path": path, "size": len(content), "oid": git_blob_sha1(content)}
    pointer = lfs_pointer(content)
    return {"type": "file", "path": path, "size": len(content), "oid": git_blob_sha1(pointer),
            "lfs": {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": len(pointer)}}


class FakeHub:
    def __init__(self, tokens: dict[str, str]):
        self.tokens = tokens  # token -> user name
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def resolve(self, repo: Repo, revision: str) -> str | None:
        if revision in repo.branches:
            return repo.branches[revision]
        return revision if revision in repo.commits else None

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # keep pytest output clean
                pass

            # --- plumbing ---------------------------------------------------------------------

            def _user(self) -> str | None | bool:
                """None: anonymous; False: a token the Hub does not know; else the user name."""
                auth = self.headers.get("Authorization", "")
                if not auth.startswith("Bearer "):
                    return None
                return hub.tokens.get(auth[len("Bearer "):], False)

            def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, head: bool = False):
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _json(self, status: int, value, headers: dict[str, str] | None = None, head: bool = False):
                self._send(status, json.dumps(value).encode(), {"Content-Type": "application/json", **(headers or {})}, head)

            def _error(self, status: int, code: str | None, message: str, head: bool = False):
                headers = {"X-Error-Message": message}
                if code:
                    headers["X-Error-Code"] = code
                self._json(status, {"error": message}, headers, head)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _repo(self, repo_id: str, head: bool = False) -> Repo | None:
                user = self._user()
                if user is False:
                    self._error(401, None, "Invalid credentials in Authorization header", head)
                    return None
                repo = hub.repos.get(repo_id)
                if repo is None or (repo.private and user != repo_id.split("/")[0]):
                    self._error(404, "RepoNotFound", "Repository not found", head)
                    return None
                return repo

            def _writer(self, repo_id: str) -> bool:
                user = self._user()
                if user is None or user is False:
                    self._error(401, None, "Invalid credentials in Authorization header")
                    return False
                if repo_id.split("/")[0] != user:
                    self._error(403, None, "You don't have the rights to write to this repo")
                    return False
                return True

            # --- routes -----------------------------------------------------------------------

            def do_HEAD(self):
                self._route("HEAD")

            def do_GET(self):
                self._route("GET")

            def do_POST(self):
                self._route("POST")

            def _route(self, method: str):
                url = urlparse(self.path)
                path = unquote(url.path)
                query = parse_qs(url.query)
                with hub.lock:
                    hub.requests.append((method, path))
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)(?:/revision/(.+))?", path)
                if m and method == "GET":
                    return self._info(m.group(1), m.group(2) or "main")
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
                if m and method == "GET":
                    return self._tree(m.group(1), m.group(2), m.group(3) or "")
                m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                if m and method in ("GET", "HEAD"):
                    return self._resolve(m.group(1), m.group(2), m.group(3), head=method == "HEAD")
                if path == "/api/repos/create" and method == "POST":
                    return self._create(json.loads(self._body()))
                if path == "/api/validate-yaml" and method == "POST":
                    self._body()
                    return self._json(200, {"errors": [], "warnings": []})
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/preupload/(.+)", path)
                if m and method == "POST":
                    return self._preupload(m.group(1), m.group(2), json.loads(self._body()))
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/commit/(.+)", path)
                if m and method == "POST":
                    return self._commit(m.group(1), m.group(2), self._body(), query)
                m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/branch/(.+)", path)
                if m and method == "POST":
                    return self._branch(m.group(1), m.group(2), self._body())
                self._body()
                self._error(404, None, f"the test Hub does not implement {method} {path}", head=method == "HEAD")

            def _revision(self, repo_id: str, revision: str, head: bool = False) -> tuple[Repo, str] | None:
                """The repo and the commit `revision` names, or None after answering 401/404 as the Hub does."""
                repo = self._repo(repo_id, head)
                if repo is None:
                    return None
                sha = hub.resolve(repo, revision)
                if sha is None:
                    self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
                    return None
                return repo, sha

            def _info(self, repo_id: str, revision: str):
                found = self._revision(repo_id, revision)
                if found is None:
                    return
                repo, sha = found
                files = repo.commits[sha]
                self._json(200, {"id": repo_id, "modelId": repo_id, "sha": sha, "private": repo.private,
                                 "siblings": [{"rfilename": p} for p in sorted(files)], "tags": []})

            def _tree(self, repo_id: str, revision: str, prefix: str):
                found = self._revision(repo_id, revision)
                if found is None:
                    return
                repo, sha = found
                entries = [tree_entry(p, c) for p, c in sorted(repo.commits[sha].items()) if p.startswith(prefix)]
                self._json(200, entries)

            def _resolve(self, repo_id: str, revision: str, file: str, head: bool):
                found = self._revision(repo_id, revision, head)
                if found is None:
                    return
                repo, sha = found
                content = repo.commits[sha].get(file)
                if content is None:
                    return self._error(404, "EntryNotFound", f"{file} does not exist", head)
                headers = {"X-Repo-Commit": sha, "ETag": f'"{etag(file, content)}"', "Content-Type": "application/octet-stream"}
                self._send(200, content, headers, head)

            def _create(self, payload: dict):
                repo_id = f"{payload.get('organization') or hub.tokens.get(self.headers.get('Authorization', '')[7:], '')}/{payload['name']}"
                if not self._writer(repo_id):
                    return
                if repo_id in hub.repos:
                    return self._json(409, {"error": "You already created this model repo", "url": f"{hub.endpoint}/{repo_id}"})
                empty = hashlib.sha1(repo_id.encode()).hexdigest()
                private = payload.get("private") or payload.get("visibility") == "private"
                hub.repos[repo_id] = Repo(private=bool(private), branches={"main": empty}, commits={empty: {}})
                self._json(200, {"url": f"{hub.endpoint}/{repo_id}", "name": repo_id})

            def _preupload(self, repo_id: str, revision: str, payload: dict):
                repo = self._repo(repo_id)
                if repo is None or not self._writer(repo_id):
                    return
                sha = hub.resolve(repo, revision)
                current = repo.commits[sha] if sha else {}
                files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                          "oid": git_blob_sha1(current[f["path"]]) if f["path"] in current else None}
                         for f in payload["files"]]
                self._json(200, {"files": files, "commitOid": sha})

            def _commit(self, repo_id: str, revision: str, body: bytes, query: dict):
                repo = self._repo(repo_id)
                if repo is None or not self._writer(repo_id):
                    return
                if revision not in repo.branches:
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
                files = dict(repo.commits[repo.branches[revision]])
                summary = ""
                for line in body.splitlines():
                    item = json.loads(line)
                    key, value = item["key"], item["value"]
                    if key == "header":
                        summary = value["summary"]
                    elif key == "file":
                        files[value["path"]] = base64.b64decode(value["content"])
                    elif key == "deletedFile":
                        files.pop(value["path"], None)
                    else:  # lfsFile: preupload never asks for LFS, so a client sending one is a bug
                        return self._error(400, None, f"the test Hub does not accept {key}")
                parent = repo.branches[revision]
                sha = hashlib.sha1(json.dumps([parent, summary, sorted((p, git_blob_sha1(c)) for p, c in files.items())]).encode()).hexdigest()
                repo.commits[sha] = files
                repo.branches[revision] = sha
                self._json(200, {"commitUrl": f"{hub.endpoint}/{repo_id}/commit/{sha}", "commitOid": sha, "pullRequestUrl": None})

            def _branch(self, repo_id: str, branch: str, body: bytes):
                repo = self._repo(repo_id)
                if repo is None or not self._writer(repo_id):
                    return
                if branch in repo.branches:
                    return self._error(409, None, f"Branch {branch} already exists")
                start = (json.loads(body) if body else {}).get("startingPoint") or "main"
                sha = hub.resolve(repo, start)
                if sha is None:
                    return self._error(404, "RevisionNotFound", f"Invalid rev id: {start}")
                repo.branches[branch] = sha
                self._json(200, {})

        return Handler
