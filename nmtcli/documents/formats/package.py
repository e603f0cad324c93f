"""Office documents are zip packages of XML parts (.docx, .odt, .odp): the zip checked, every entry read once before
anything is translated (the parts with text parsed as they unpack), every entry but those written again as it was.

Before any entry is read the zip is checked: a file that is not a zip, an encrypted entry, an entry compressed
otherwise than stored or deflated (office documents and books use nothing else; bzip2 and lzma would unpack without
a bound on one step), more than `entries` entries, or more than `unpacked` bytes declared unpacked is refused. Then
every entry is read whole, in order, a chunk at a time (limits.py: the bytes counted as they unpack, each entry's
compression ratio checked against the bytes it was packed in so far, the parts with text counted as they are held),
so that a damaged entry (a CRC error, a broken deflate stream, a truncated one) is found before the translation
starts, an image as well as the XML, and a zip bomb is stopped where it passes a limit, not where it says it ends.
The package is written again entry by entry in its order, each with its name, date, attributes and compression (an
OpenDocument's `mimetype` stays first and stored); the parts with text are rendered, the others copied.
"""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Callable, Iterator

from nmtcli.documents.formats.core import Block, Document
from nmtcli.documents.formats.limits import Budget, OverLimit
from nmtcli.errors import NmtError

CHUNK = 16_384  # bytes unpacked at a time; zipfile reads as many packed bytes ahead, which the ratio check then counts
# What zipfile raises for a damaged entry or directory: a CRC error, a broken or truncated deflate stream, a bad
# header, a seek outside the file (ValueError), a name that is not the UTF-8 it says it is (UnicodeDecodeError).
DAMAGED = (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError)

# read_part(chunks, budget): a part with text as a Document, from its bytes as they unpack.
ReadPart = Callable[[Iterator[bytes], Budget], Document]


def read_package(data: bytes, what: str, required: str, text_parts: re.Pattern, read_part: ReadPart,
                 budget: Budget | None = None) -> Document:
    """The package `data` (a `what`, holding `required`) with each part whose name `text_parts` matches read by
    `read_part`, every other entry read through to check it; NmtError for a damaged one, OverLimit past `budget`."""
    budget = budget or Budget()
    budget.what = what
    source = _Counted(data)
    try:
        package = zipfile.ZipFile(source)
    except DAMAGED:
        raise NmtError(f"the file is not a {what}: it is not a zip package", "check that it is the format its extension says",
                       exit_code=2) from None
    infos = package.infolist()
    if any(info.flag_bits & 0x1 for info in infos):
        raise NmtError(f"the {what} is encrypted", "save it without a password first", exit_code=2)
    if len(infos) > budget.limits.entries:
        raise OverLimit(f"the {what} holds {len(infos):,} entries, more than {budget.limits.entries:,}", "check the file")
    odd = next((info for info in infos if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)), None)
    if odd is not None:
        raise NmtError(f"the {what}'s entry {odd.filename} is compressed with method {odd.compress_type}, which office documents "
                       "and books do not use", "save it again with its own program", exit_code=2)
    if sum(info.file_size for info in infos) > budget.limits.unpacked:  # as it declares: refused before anything is read
        budget.count_unpacked(sum(info.file_size for info in infos))
    if required not in package.namelist():
        raise NmtError(f"the file is not a {what}: it has no {required}", "check that it is the format its extension says", exit_code=2)
    parts: dict[str, Document] = {}
    for info in infos:
        if text_parts.fullmatch(info.filename):
            parts[info.filename] = read_part(_unpacked(package, source, info, budget, held=True), budget)
        else:
            for _ in _unpacked(package, source, info, budget):
                pass
    return Package(package, parts, [block for part in parts.values() for block in part.blocks])


def _unpacked(package: zipfile.ZipFile, source: _Counted, info: zipfile.ZipInfo, budget: Budget, held: bool = False) -> Iterator[bytes]:
    """The entry's bytes a chunk at a time, each counted (`held`: kept in memory as a part with text); zipfile checks
    the CRC when the last chunk is read."""
    try:
        with package.open(info) as stream:
            packed_from, unpacked = source.consumed, 0
            while chunk := stream.read(CHUNK):
                unpacked += len(chunk)
                budget.count_unpacked(len(chunk))
                # zipfile reads the packed bytes a little ahead of what it has unpacked (at most a chunk): the ratio is,
                # if anything, underestimated by that much
                budget.check_ratio(info.filename, unpacked, source.consumed - packed_from)
                if held:
                    budget.count_part_bytes(len(chunk))
                yield chunk
    except DAMAGED as e:
        raise NmtError(f"the {budget.what} is damaged: {info.filename}: {e}", "check the file, or save it again with its own program",
                       exit_code=2) from None


class _Counted(io.BytesIO):
    """The package's bytes, counting those read: what zipfile has read of an entry's packed bytes."""

    consumed = 0

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.consumed += len(data)
        return data


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
