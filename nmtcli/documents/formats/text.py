"""Plain text: each line a paragraph, cut into sentences and translated (as `nmt translate --split-sentences`); line
breaks, blank lines and each line's leading and trailing whitespace kept."""

from __future__ import annotations

import re

from nmtcli.documents.formats.core import Block, Document, decoded
from nmtcli.errors import NmtError

_LINE = re.compile(r"([ \t]*)(.*?)([ \t]*)(\r\n|\n|\r|$)")


def read(data: bytes, format: str = "txt", budget=None) -> Document:
    text = decoded(data, "text file")
    if "\x00" in text:
        raise NmtError("the text file holds NUL bytes: it is binary, not text", "check that it is the format its extension says", exit_code=2)
    parts: list = ["\ufeff"] if text.startswith("\ufeff") else []  # a byte-order mark stays first
    for found in _LINE.finditer(text, len(parts)):
        if not found[0]:
            break
        lead, body, trail, end = found.groups()
        parts += [lead, Block([body]) if body else "", trail, end]
    return Document([p for p in parts if p != ""])
