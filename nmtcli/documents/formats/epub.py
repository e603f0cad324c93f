"""EPUB books (.epub): each XHTML content document translated as HTML (Translator.translate_html: tags, attributes
and code kept byte for byte, inline tags placed by the alignment); the package (package.py: the zip checked,
`mimetype` first and stored), the OPF manifest, the navigation's structure, styles, fonts and images kept.

Which documents: every .xhtml, .html or .htm entry of the zip (the chapters, and the navigation document, whose
link texts are the table of contents); the table of contents of EPUB 2 (toc.ncx) keeps its titles untranslated.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from nmtcli.documents.formats.core import Block, Document, decoded
from nmtcli.documents.formats.limits import Budget
from nmtcli.documents.formats.package import read_package

CONTENT = re.compile(r".*\.(xhtml|html|htm)", re.IGNORECASE)


def read(data: bytes, format: str = "epub", budget: Budget | None = None) -> Document:
    return read_package(data, "EPUB book", "META-INF/container.xml", CONTENT, _chapter, budget)


def _chapter(chunks: Iterator[bytes], budget: Budget) -> Document:
    """A chapter whole (package.py counts its bytes); its characters are counted when the book is read (formats.read)."""
    return Document([Block([decoded(b"".join(chunks), "EPUB chapter")], html=True)])
