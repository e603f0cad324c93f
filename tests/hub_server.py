"""A Hugging Face Hub on 127.0.0.1: the subset of the Hub's HTTP API that huggingface_hub speaks.

One server for every test that talks to the Hub: model repos (`push`, `pull`, `-m OWNER/NAME`,
`import marian OWNER/NAME`, `info`) live in `repos`, dataset repos (`prepare wmt14-*`) in `datasets`.

Downloads (`snapshot_download`, `hf_hub_download`, `list_repo_files`): repo info by revision, the
recursive tree listing, and HEAD/GET on `/{repo}/resolve/{revision}/{path}` (models) or
`/datasets/{repo}/resolve/{revision}/{path}` with the X-Repo-Commit / ETag / Content-Length headers
the client caches by, and `Range: bytes=N-` answered with 206 so an interrupted download resumes.
Files the Hub's default .gitattributes puts in Git LFS (`LFS_PATTERNS`: weights, sentencepiece
models, parquet) are listed as the Hub lists them, with an `lfs` entry holding the sha256 of the
content and the git blob id of the LFS pointer, and served with that sha256 as ETag; every other file
has its git blob id as ETag. Uploads (`create_repo`, `create_branch`, `create_commit`,
`upload_folder`): repo and branch creation, YAML validation, `preupload` (which answers "regular" for
every file, so the client sends the bytes base64-encoded in the commit and never tries LFS or Xet),
and the ndjson `commit` endpoint. It never sends Xet headers, so the client downloads over plain
HTTP. Tokens are checked like the Hub does: a bad token is a 401 with "Invalid credentials in
Authorization header"; a private repo is a 404 RepoNotFound to strangers.

Faults for the tests, per file path, on the next GET of that file: `stall_after[path] = n` sends n
bytes and then holds the connection open (until the client is killed or the server stops; `stalled`
is set then); `drop_after[path] = n` sends n bytes and closes the connection; `corrupt[path] = k`
serves flipped bytes (same length, same ETag) for the next k GETs.

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
from typing import NamedTuple
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Repo:
    private: bool = False
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit sha
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # sha -> {path: content}

    @classmethod
    def at(cls, commit: str, files: dict[str, bytes]) -> Repo:
        """A repo whose main branch is one commit holding `files`."""
        return cls(branches={"main": commit}, commits={commit: dict(files)})


class Request(NamedTuple):
    method: str
    path: str  # the URL path
    file: str | None  # the repo file of a resolve request
    range: str | None  # its Range header (None: the whole file)


LFS_PATTERNS = ("*.safetensors", "*.model", "*.parquet")


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
    def __init__(self, tokens: dict[str, str] | None = None):
        self.tokens = dict(tokens or {})  # token -> user name
        self.repos: dict[str, Repo] = {}  # model repos
        self.datasets: dict[str, Repo] = {}  # dataset repos
        self.requests: list[Request] = []
        self.stall_after: dict[str, int] = {}
        self.drop_after: dict[str, int] = {}
        self.corrupt: dict[str, int] = {}
        self.stalled = threading.Event()
        self._release = threading.Event()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def resolve(self, repo: Repo, revision: str) -> str | None:
        if revision in repo.branches:
            return repo.branches[revision]
        return revision if revision in repo.commits else None

    def gets(self, file: str) -> list[str | None]:
        """The Range headers of the GETs of one repo file (None: the whole file)."""
        return [r.range for r in self.requests if r.method == "GET" and r.file == file]

    def downloads(self, since: int = 0) -> list[str]:
        """The repo files GET since request number `since` (HEADs and API calls are not downloads)."""
        return [r.file for r in self.requests[since:] if r.method == "GET" and r.file is not None]

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

            def _repo(self, kind: str, repo_id: str, head: bool = False) -> Repo | None:
                user = self._user()
                if user is False:
                    self._error(401, None, "Invalid credentials in Authorization header", head)
                    return None
                repo = (hub.datasets if kind == "datasets" else hub.repos).get(repo_id)
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
                resolve = re.fullmatch(r"/(datasets/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
                with hub.lock:
                    hub.requests.append(Request(method, path, resolve.group(4) if resolve else None, self.headers.get("Range")))
                if resolve and method in ("GET", "HEAD"):
                    kind = "datasets" if resolve.group(1) else "models"
                    return self._resolve(kind, resolve.group(2), resolve.group(3), resolve.group(4), head=method == "HEAD")
                m = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)(?:/revision/(.+))?", path)
                if m and method == "GET":
                    return self._info(m.group(1), m.group(2), m.group(3) or "main")
                m = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)/tree/([^/]+)(?:/(.*))?", path)
                if m and method == "GET":
                    return self._tree(m.group(1), m.group(2), m.group(3), m.group(4) or "")
                if path == "/api/repos/create" and method == "POST":
                    return self._create(json.loads(self._body()))
                if path == "/api/validate-yaml" and method == "POST":
                    self._body()
                    return self._json(200, {"errors": [], "warnings": []})
                m = re.fullmatch(r"/api/(models|datasets)/([^/]+/[^/]+)/(preupload|commit|branch)/(.+)", path)
                if m and method == "POST":
                    kind, repo_id, action, revision = m.groups()
                    body = self._body()
                    if action == "preupload":
                        return self._preupload(kind, repo_id, revision, json.loads(body))
                    if action == "commit":
                        return self._commit(kind, repo_id, revision, body, query)
                    return self._branch(kind, repo_id, revision, body)
                self._body()
                self._error(404, None, f"the test Hub does not implement {method} {path}", head=method == "HEAD")

            def _revision(self, kind: str, repo_id: str, revision: str, head: bool = False) -> tuple[Repo, str] | None:
                """The repo and the commit `revision` names, or None after answering 401/404 as the Hub does."""
                repo = self._repo(kind, repo_id, head)
                if repo is None:
                    return None
                sha = hub.resolve(repo, revision)
                if sha is None:
                    self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
                    return None
                return repo, sha

            def _info(self, kind: str, repo_id: str, revision: str):
                found = self._revision(kind, repo_id, revision)
                if found is None:
                    return
                repo, sha = found
                files = repo.commits[sha]
                self._json(200, {"id": repo_id, "modelId": repo_id, "sha": sha, "private": repo.private,
                                 "siblings": [{"rfilename": p} for p in sorted(files)], "tags": []})

            def _tree(self, kind: str, repo_id: str, revision: str, prefix: str):
                found = self._revision(kind, repo_id, revision)
                if found is None:
                    return
                repo, sha = found
                entries = [tree_entry(p, c) for p, c in sorted(repo.commits[sha].items()) if p.startswith(prefix)]
                self._json(200, entries)

            def _resolve(self, kind: str, repo_id: str, revision: str, file: str, head: bool):
                found = self._revision(kind, repo_id, revision, head)
                if found is None:
                    return
                repo, sha = found
                content = repo.commits[sha].get(file)
                if content is None:
                    return self._error(404, "EntryNotFound", f"{file} does not exist", head)
                headers = {"X-Repo-Commit": sha, "ETag": f'"{etag(file, content)}"', "Content-Type": "application/octet-stream",
                           "Accept-Ranges": "bytes"}
                byte_range = self.headers.get("Range", "")
                start = int(byte_range[len("bytes="):].split("-")[0]) if byte_range.startswith("bytes=") else 0
                if start:
                    headers["Content-Range"] = f"bytes {start}-{len(content) - 1}/{len(content)}"
                body = content[start:]
                if head:
                    return self._send(206 if start else 200, body, headers, head=True)
                if hub.corrupt.get(file):
                    hub.corrupt[file] -= 1
                    body = bytes(b ^ 0x5A for b in body[:64]) + body[64:]
                if file in hub.drop_after or file in hub.stall_after:
                    return self._break(206 if start else 200, body, headers, file)
                self._send(206 if start else 200, body, headers)

            def _break(self, status: int, body: bytes, headers: dict[str, str], file: str):
                """Send the headers and part of the body, then drop the connection or hold it open."""
                self.send_response(status)
                for k, v in {**headers, "Content-Length": str(len(body))}.items():
                    self.send_header(k, v)
                self.end_headers()
                stall = file in hub.stall_after
                self.wfile.write(body[: (hub.stall_after if stall else hub.drop_after).pop(file)])
                self.wfile.flush()
                self.close_connection = True
                if not stall:
                    return
                hub.stalled.set()
                while not hub._release.wait(0.05):  # until the client is killed or the server stops
                    try:
                        self.connection.send(b"")
                    except OSError:
                        return

            def _create(self, payload: dict):
                repo_id = f"{payload.get('organization') or hub.tokens.get(self.headers.get('Authorization', '')[7:], '')}/{payload['name']}"
                if not self._writer(repo_id):
                    return
                store = hub.datasets if payload.get("type") == "dataset" else hub.repos
                if repo_id in store:
                    return self._json(409, {"error": "You already created this repo", "url": f"{hub.endpoint}/{repo_id}"})
                empty = hashlib.sha1(repo_id.encode()).hexdigest()
                private = payload.get("private") or payload.get("visibility") == "private"
                store[repo_id] = Repo(private=bool(private), branches={"main": empty}, commits={empty: {}})
                self._json(200, {"url": f"{hub.endpoint}/{repo_id}", "name": repo_id})

            def _preupload(self, kind: str, repo_id: str, revision: str, payload: dict):
                repo = self._repo(kind, repo_id)
                if repo is None or not self._writer(repo_id):
                    return
                sha = hub.resolve(repo, revision)
                current = repo.commits[sha] if sha else {}
                files = [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                          "oid": git_blob_sha1(current[f["path"]]) if f["path"] in current else None}
                         for f in payload["files"]]
                self._json(200, {"files": files, "commitOid": sha})

            def _commit(self, kind: str, repo_id: str, revision: str, body: bytes, query: dict):
                repo = self._repo(kind, repo_id)
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

            def _branch(self, kind: str, repo_id: str, branch: str, body: bytes):
                repo = self._repo(kind, repo_id)
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
