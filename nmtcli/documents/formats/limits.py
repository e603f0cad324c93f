"""What reading a document may cost: limits on the work, counted while the file is read, not on what it declares.

A document may come from anyone (`nmt serve`'s /translate_file; a file someone sent to `nmt translate -i`), and what
it costs to read is not its size: a 0.4 MB .docx can unpack to 360 MB of XML, and each MB of XML elements costs
~290 bytes an element (~50 MB) as a tree. So every read counts what it does against `ReadLimits` and stops as soon
as one is passed (`Budget`): the bytes unpacked, each zip entry's compression ratio, the bytes of the parts kept in
memory, the characters of text, the XML elements and how deep they nest. What it may hold is then bounded by the
limits whatever the input: at most `part_bytes` of parts, `elements` tree nodes, `chars` of text.

`OverLimit` (an NmtError) says which limit; `nmt serve` answers it 413 and every other NmtError of a read 400.
The values, and why each, are in docs/translating.md (Limits) and docs/serving.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from nmtcli.errors import NmtError


@dataclass(frozen=True)
class ReadLimits:
    """The most one read of a document may do; the defaults are `nmt translate`'s (serve/files.py has the server's)."""

    unpacked: int = 500_000_000  # bytes all entries of a zip package unpack to, counted as they are unpacked
    part_bytes: int = 100_000_000  # bytes of a package's parts read for their text, held in memory while it is translated
    # A zip entry that unpacks to more than `ratio` times the bytes it was packed in is a zip bomb: deflate reaches
    # ~1,000:1 on repeated bytes, and real parts (XML, images) stay far under 100:1, the ratio Apache POI refuses
    # beyond (ZipSecureFile's minimum inflate ratio, 0.01), as do the document services built on it. Its first
    # `ratio_from` bytes are exempt (POI exempts entries under 100 KiB): a small part of repeated empty elements (a
    # styles.xml) may pass 100:1 and costs next to nothing.
    ratio: int = 100
    ratio_from: int = 1_000_000
    entries: int = 10_000  # entries of a zip package (a long book's chapters and images: hundreds)
    chars: int = 10_000_000  # characters of text (about 5,000 pages), counted while the XML is parsed
    elements: int = 2_000_000  # XML elements of all the parts read (a 1,500-page Word document: ~1 million)
    # How deep XML elements may nest: libxml2's default (xmlParserMaxDepth), so also lxml's and python-docx's. Word,
    # PowerPoint, LibreOffice and XLIFF editors write documents a few dozen levels deep.
    depth: int = 256


class OverLimit(NmtError):
    """A document past one of its ReadLimits: refused while it was read (413 from `nmt serve`)."""

    def __init__(self, message: str, hint: str = "split it into smaller documents"):
        super().__init__(message, hint, exit_code=2)


class Budget:
    """One read's counts against `limits`, shared by every part of the document: each count raises OverLimit as soon
    as it passes its limit."""

    def __init__(self, limits: ReadLimits | None = None, what: str = "file"):
        self.limits = limits or ReadLimits()
        self.what = what
        self.unpacked = self.part_bytes = self.chars = self.elements = 0

    def count_unpacked(self, count: int) -> None:
        self.unpacked += count
        if self.unpacked > self.limits.unpacked:
            raise OverLimit(f"the {self.what} unpacks to more than {self.limits.unpacked:,} bytes: refused (a zip bomb?)",
                            "check the file")

    def check_ratio(self, name: str, unpacked: int, packed: int) -> None:
        """An entry `name` that has unpacked `unpacked` bytes from `packed` bytes read so far."""
        if unpacked > self.limits.ratio_from and unpacked > self.limits.ratio * max(packed, 1):
            raise OverLimit(f"the {self.what}'s entry {name} unpacks to more than {self.limits.ratio} times its packed size: "
                            "refused (a zip bomb?)", "check the file")

    def count_part_bytes(self, count: int) -> None:
        self.part_bytes += count
        if self.part_bytes > self.limits.part_bytes:
            raise OverLimit(f"the {self.what}'s parts with text hold more than {self.limits.part_bytes:,} bytes")

    def count_chars(self, count: int) -> None:
        self.chars += count
        if self.chars > self.limits.chars:
            raise OverLimit(f"the {self.what} holds more than {self.limits.chars:,} characters of text")

    def count_element(self, depth: int) -> None:
        """One more XML element, `depth` deep (the root: 1)."""
        self.elements += 1
        if self.elements > self.limits.elements:
            raise OverLimit(f"the {self.what} holds more than {self.limits.elements:,} XML elements")
        if depth > self.limits.depth:
            raise OverLimit(f"the {self.what} nests XML elements more than {self.limits.depth} deep",
                            "check the file: documents nest a few dozen levels")
