"""Office documents are zip packages of XML parts (.docx, .odt, .odp): the zip checked, the parts with text read,
every other entry copied as it is.

Before any part is read the zip is checked: a file that is not a zip, an encrypted entry, or more than MAX_UNPACKED
bytes unpacked (a zip bomb: the sizes its directory states, which the reader also holds each entry to) is refused.
The package is written again entry by entry in its order, each with its name, date, attributes and compression (an
OpenDocument's `mimetype` stays first and stored); the parts with text are rendered, the others copied.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable

from nmtcli.documents.formats.core import Block, Document
from nmtcli.errors import NmtError

MAX_UNPACKED = 500_000_000  # bytes a package may unpack to


def read_package(data: bytes, what: str, required: str, text_parts: re.Pattern, read_part: Callable[[bytes], Document]) -> Document:
    """The package `data` (a `what`, holding `required`) with each part whose name `text_parts` matches read by
    `read_part`."""
    try:
        package = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise NmtError(f"the file is not a {what}: it is not a zip package", "check that it is the format its extension says",
                       exit_code=2) from None
    infos = package.infolist()
    if any(info.flag_bits & 0x1 for info in infos):
        raise NmtError(f"the {what} is encrypted", "save it without a password first", exit_code=2)
    if sum(info.file_size for info in infos) > MAX_UNPACKED:
        raise NmtError(f"the {what} unpacks to more than {MAX_UNPACKED:,} bytes: refused (a zip bomb?)", "check the file", exit_code=2)
    if required not in package.namelist():
        raise NmtError(f"the file is not a {what}: it has no {required}", "check that it is the format its extension says", exit_code=2)
    try:
        parts = {info.filename: read_part(package.read(info)) for info in infos if text_parts.fullmatch(info.filename)}
    except (zipfile.BadZipFile, OSError, EOFError) as e:  # a damaged entry (a CRC error, a truncated stream)
        raise NmtError(f"the {what} is damaged: {e}", "check the file", exit_code=2) from None
    return Package(package, parts, [block for part in parts.values() for block in part.blocks])


class Package(Document):
    """The zip written again: the text parts rendered, every other entry as it was."""

    def __init__(self, package: zipfile.ZipFile, parts: dict[str, Document], blocks: list[Block]):
        super().__init__([], blocks)
        self.package, self.text_parts = package, parts

    def render(self) -> bytes:  # type: ignore[override]
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as written:
            for info in self.package.infolist():
                data = self.text_parts[info.filename].render().encode("utf-8") if info.filename in self.text_parts \
                    else self.package.read(info)
                written.writestr(info, data, compress_type=info.compress_type)
        return out.getvalue()
