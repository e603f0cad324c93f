"""Files over HTTP, in LibreTranslate's shapes: POST /translate_file and GET /download_file/NAME.

    POST /translate_file       multipart/form-data: file, source, target (api_key) -> {"translatedFileUrl": ".../download_file/NAME"}
    GET  /download_file/NAME   the translated file, as an attachment named as it was uploaded

A file is read by its extension's format (documents/formats/: .txt, .srt, .vtt, .po, .pot, .xliff, .xlf, .md, .html),
read within `FileLimits.reading()` (documents/formats/limits.py: what reading may cost is counted as it reads, and a
file is refused where it passes a limit: its characters of text, a zip's bytes unpacked and compression ratio, XML's
elements and depth), every entry of a package read through before any translation (a damaged one: 400), one file at
a time on a thread of its own (reading is pure Python, so two at once would not go faster, and one bounds the memory
reads hold to one read's limits), and translated through the model's Python API Translator in a worker thread, each
of its calls on the batcher's translation thread between the batches of /translate (so the event loop and the other
requests go on). A file not of its format or damaged is a 400, one past a limit (or an upload over `FileLimits.bytes`)
a 413, in LibreTranslate's error shape; the server goes on serving. The result is kept under a random name in a directory of the server's own for
`FileLimits.keep` seconds, then deleted; a download name is checked against that shape and resolved inside the
directory, so that no name reaches another file.
"""

from __future__ import annotations

import asyncio
import hmac
import os
import re
import shutil
import tempfile
import time
import uuid
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from nmtcli.documents.formats import EXTENSIONS, read, translate_document, written
from nmtcli.documents.formats.limits import OverLimit, ReadLimits
from nmtcli.errors import NmtError
from nmtcli.serve.requests import ApiError, multipart_form, read_body

SUPPORTED = sorted(EXTENSIONS)  # /frontend/settings' supportedFilesFormat: [".htm", ".html", ".md", ...]
_STORED = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9][A-Za-z0-9._-]{0,200}")


@dataclass(frozen=True)
class FileLimits:
    bytes: int = 10_000_000  # an uploaded file's size at most
    chars: int = 500_000  # characters of text in a file at most
    keep: float = 600.0  # seconds a translated file may be downloaded

    def reading(self) -> ReadLimits:
        """What reading an upload may cost (documents/formats/limits.py): `chars` characters of text, and what a file of
        `bytes` bytes and `chars` characters needs, with room (office XML packs ~10:1; Word's heaviest formatting
        spends ~1 element and ~20 bytes of XML a character), at least 100 MB unpacked, 50 MB of parts with text and
        1,000,000 elements: with the defaults a read holds ~0.3 GB at most (docs/serving.md)."""
        return ReadLimits(chars=self.chars, unpacked=max(100_000_000, 10 * self.bytes), part_bytes=max(50_000_000, 100 * self.chars),
                          elements=max(1_000_000, 2 * self.chars))


class FileService:
    """The two routes, for a Service (serve/app.py): its models, API keys, batcher and metrics."""

    def __init__(self, service, limits: FileLimits):
        self.service, self.limits = service, limits
        self.directory = Path(tempfile.mkdtemp(prefix="nmt-serve-files-"))
        self.reader = ThreadPoolExecutor(1, thread_name_prefix="nmt-read-file")  # one read at a time
        weakref.finalize(self, shutil.rmtree, self.directory, True)
        weakref.finalize(self, self.reader.shutdown, False)

    def routes(self, counted) -> list[Route]:
        return [Route("/translate_file", counted("/translate_file", self.translate_file), methods=["POST"]),
                Route("/download_file/{name}", counted("/download_file", self.download_file), methods=["GET"])]

    async def translate_file(self, request: Request) -> Response:
        fields, upload = await self._form(request)
        self._check_key(fields)
        for name in ("source", "target"):
            if not fields.get(name):
                raise ApiError(400, f"Invalid request: missing {name} parameter")
        if upload is None:
            raise ApiError(400, "Invalid request: missing file parameter")
        if not upload.filename:
            raise ApiError(400, "Invalid request: empty file")
        suffix = Path(upload.filename).suffix.lower()
        if suffix not in EXTENSIONS:
            raise ApiError(400, f"Invalid request: file format not supported ({suffix or 'no extension'}; this server translates "
                                f"{', '.join(SUPPORTED)})")
        model = self.service._model(fields["source"], fields["target"])
        data = await upload.read()
        loop = asyncio.get_running_loop()
        try:
            document = await loop.run_in_executor(self.reader, read, data, EXTENSIONS[suffix], self.limits.reading())
        except OverLimit as e:
            raise ApiError(413, f"Invalid request: {e}") from None
        except NmtError as e:
            raise ApiError(400, f"Invalid request: {upload.filename}: {e}") from None
        translator = _OnTranslationThread(model.translator, self.service.batcher, loop)
        config = self.service.config
        options = dict(beam=config.search.beam, alpha=config.search.alpha, length_penalty=config.search.length_penalty,
                       max_len_a=config.search.max_len_a, max_len_b=config.search.max_len_b, coverage_penalty=config.search.coverage_penalty,
                       brevity_penalty=config.search.brevity_penalty,
                       protect=config.protect,
                       protect_regex=list(config.protect_regex),
                       glossary=self.service.with_glossary(config.search, model, None).glossary)  # the server's for the pair
        try:
            translated = await loop.run_in_executor(None, _translated, translator, document, options)
        except NmtError as e:
            raise ApiError(500, f"Cannot translate file: {e}") from None
        stored = f"{uuid.uuid4().hex}.{_safe_name(upload.filename, suffix)}"
        path = self.directory / stored
        await loop.run_in_executor(None, path.write_bytes, translated)
        loop.call_later(self.limits.keep, _delete, path)
        self.service.metrics.translated(len(document.blocks), 0)
        return JSONResponse({"translatedFileUrl": f"{str(request.base_url).rstrip('/')}/download_file/{stored}"})

    async def download_file(self, request: Request) -> Response:
        name = request.path_params["name"]
        if not _STORED.fullmatch(name):
            raise ApiError(400, "Invalid filename")
        path = (self.directory / name).resolve()
        if path.parent != self.directory.resolve():
            raise ApiError(400, "Invalid filename")
        if not path.is_file() or time.time() - path.stat().st_mtime > self.limits.keep:
            _delete(path)
            raise ApiError(404, f"No such file: it was never made here or was deleted {self.limits.keep:g} s after it was "
                                "translated (translate it again)")
        return FileResponse(path, filename=name.split(".", 1)[1], media_type="application/octet-stream")

    async def _form(self, request: Request) -> tuple[dict[str, Any], Any]:
        """The form's text fields and its file (the only one read), the body refused past the size limit (413)."""
        from starlette.datastructures import UploadFile

        limit = self.limits.bytes + 65_536
        body = await read_body(request.stream(), request.headers.get("content-length"), limit)
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "multipart/form-data":
            raise ApiError(400, "Invalid request: send the file as multipart/form-data (fields file, source, target)")

        form = await multipart_form(body, content_type, limit, max_files=1)
        fields: dict[str, Any] = dict(request.query_params)
        upload = None
        for name, value in form.multi_items():
            if isinstance(value, UploadFile):
                if name == "file":
                    upload = value
            else:
                fields[name] = value
        if upload is not None and upload.size is not None and upload.size > self.limits.bytes:
            raise ApiError(413, f"Invalid request: the file ({upload.size:,} bytes) exceeds the size limit ({self.limits.bytes:,} bytes)")
        return fields, upload

    def _check_key(self, fields: dict[str, Any]) -> None:
        """The API key, as /translate checks it (LibreTranslate's answers)."""
        keys = self.service.config.api_keys
        if not keys:
            return
        key = fields.get("api_key")
        if not key:
            raise ApiError(400, "Please contact the server operator to get an API key (send it as api_key)")
        if not any(hmac.compare_digest(key.encode(), k.encode()) for k in keys):
            raise ApiError(403, "Invalid API key")


class _OnTranslationThread:
    """A Translator whose calls run on the batcher's one translation thread (called from a worker thread): a file's
    chunks take turns with the batches of /translate instead of using the model beside them."""

    def __init__(self, translator, batcher, loop: asyncio.AbstractEventLoop):
        self.translator, self.batcher, self.loop = translator, batcher, loop

    def _run(self, call, *args, **kwargs):
        future = asyncio.run_coroutine_threadsafe(self.batcher.run(call, *args, **kwargs), self.loop)
        return future.result()

    def translate(self, texts, **options):
        return self._run(self.translator.translate, texts, **options)

    def translate_html(self, document, **options):
        return self._run(self.translator.translate_html, document, **options)


def _translated(translator, document, options) -> bytes:
    translate_document(translator, document, options)
    return written(document)


def _safe_name(filename: str, suffix: str) -> str:
    """The uploaded file's name reduced to letters, digits, ".", "_" and "-" (no directory part), its extension kept."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(filename.replace("\\", "/")).stem).strip("._") or "file"
    return f"{stem[:100]}{suffix}"


def _delete(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
