"""A loopback Hugging Face Hub for the dataset tests: a real HTTP server on 127.0.0.1 that speaks the protocol
`huggingface_hub.hf_hub_download` and `HfApi.list_repo_files` use.

  HEAD/GET /datasets/<repo>/resolve/<revision>/<path>   X-Repo-Commit, ETag (the sha256, as for LFS
                                                        files), Content-Length, Range -> 206
  GET /api/datasets/<repo>/tree/<revision>?recursive=... the file listing (JSON)

Faults for the tests, per file path: `stall_after[path] = n` sends n bytes of the next GET and then
holds the connection open (until the client is killed); `drop_after[path] = n` sends n bytes of the
next GET and closes the connection; `corrupt[path] = k` serves flipped bytes
(same length, same ETag) for the next k GETs. Every request is logged in `requests`.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    def __init__(self, repo: str, files: dict[str, bytes], commit: str = COMMIT):
        self.repo, self.files, self.commit = repo, dict(files), commit
        self.requests: list[tuple[str, str, str | None]] = []  # (method, file path, Range header)
        self.stall_after: dict[str, int] = {}
        self.drop_after: dict[str, int] = {}
        self.stalled = threading.Event()
        self.corrupt: dict[str, int] = {}
        self._release = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, body=False)

            def do_GET(self) -> None:
                hub._serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def gets(self, path: str) -> list[str | None]:
        """The Range headers of the GETs of one file (None: a full request)."""
        return [r for m, p, r in self.requests if m == "GET" and p == path]

    # --- the protocol -------------------------------------------------------------------------------

    def _serve(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        url = urlparse(handler.path)
        tree = f"/api/datasets/{self.repo}/tree/"
        resolve = f"/datasets/{self.repo}/resolve/"
        if url.path.startswith(tree):
            return self._tree(handler, unquote(url.path[len(tree):]).split("/", 1)[0])
        if not url.path.startswith(resolve):
            return self._error(handler, 404, "RepoNotFound")
        revision, _, path = unquote(url.path[len(resolve):]).partition("/")
        if revision not in ("main", self.commit):
            return self._error(handler, 404, "RevisionNotFound")
        if path not in self.files:
            return self._error(handler, 404, "EntryNotFound")
        data = self.files[path]
        byte_range = handler.headers.get("Range")
        self.requests.append((handler.command, path, byte_range))
        start = 0
        if byte_range and byte_range.startswith("bytes="):
            start = int(byte_range[len("bytes="):].split("-")[0])
        status = 206 if start else 200
        handler.send_response(status)
        handler.send_header("X-Repo-Commit", self.commit)
        handler.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        handler.send_header("Accept-Ranges", "bytes")
        handler.send_header("Content-Length", str(len(data) - start))
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.end_headers()
        if not body:
            return
        payload = data[start:]
        if self.corrupt.get(path):
            self.corrupt[path] -= 1
            payload = bytes(b ^ 0x5A for b in payload[:64]) + payload[64:]
        if path in self.drop_after:  # a connection that breaks: part of the body, then a closed socket
            handler.wfile.write(payload[: self.drop_after.pop(path)])
            handler.wfile.flush()
            handler.close_connection = True
            return
        if path in self.stall_after:
            n = self.stall_after.pop(path)
            handler.wfile.write(payload[:n])
            handler.wfile.flush()
            self.stalled.set()
            # Hold the connection until the client is killed (or the server stops).
            while not self._release.wait(0.05):
                try:
                    handler.connection.send(b"")
                except OSError:
                    return
                time.sleep(0.05)
            return
        handler.wfile.write(payload)

    def _tree(self, handler: BaseHTTPRequestHandler, revision: str) -> None:
        if revision not in ("main", self.commit):
            return self._error(handler, 404, "RevisionNotFound")
        listing = [
            {"type": "file", "oid": hashlib.sha1(d).hexdigest(), "size": len(d), "path": p,
             "lfs": {"oid": hashlib.sha256(d).hexdigest(), "size": len(d), "pointerSize": 130}}
            for p, d in sorted(self.files.items())
        ]
        body = json.dumps(listing).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def _error(self, handler: BaseHTTPRequestHandler, status: int, code: str) -> None:
        body = json.dumps({"error": code}).encode()
        handler.send_response(status)
        handler.send_header("X-Error-Code", code)
        handler.send_header("X-Repo-Commit", self.commit)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(body)


def parquet_bytes(pairs: list[tuple[str, str]], src: str = "en", tgt: str = "de", padding: int = 0) -> bytes:
    """A parquet file with the Hub's WMT schema: one column `translation: struct<de: string, en: string>`.

    `padding` adds that many random bytes in a second column that readers of `translation` skip:
    `hf_hub_download` writes to disk in 10 MiB pieces, so only a file larger than that can be
    interrupted with part of it on disk.
    """
    import io
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    langs = sorted((src, tgt))  # the Hub's files list the struct fields alphabetically
    struct = pa.struct([(lang, pa.string()) for lang in langs])
    columns = {"translation": pa.array([{src: s, tgt: t} for s, t in pairs], type=struct)}
    if padding:
        blob = random.Random(0).randbytes(padding)
        columns["padding"] = pa.array([blob] + [b""] * (len(pairs) - 1), type=pa.binary())
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer, compression="none" if padding else "snappy")
    return buffer.getvalue()
