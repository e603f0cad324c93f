"""OpenDocument text and presentations (.odt, .odp): every paragraph and heading translated, spans and links placed
by the alignment; every other byte of content.xml and styles.xml, and every other part of the package, kept.

An OpenDocument is a zip of XML parts (package.py: the zip checked, the other parts copied, `mimetype` first). Its
text is in content.xml (the body: paragraphs, headings, list items, table cells, a presentation's text boxes and
speaker notes) and styles.xml (the master pages' headers and footers), read for their bytes (xmlbytes.py: expat with
byte offsets, entities refused). Each `<text:p>` and `<text:h>` is a block of mixed content: its text, spans
(`<text:span>`, with their automatic styles: bold, italic, a colour), links (`<text:a>`) and `<text:meta>` are
inline elements placed by the alignment; everything else in it (`<text:s/>` runs of spaces, tabs, line breaks,
bookmarks, fields such as page numbers and dates, notes, annotations, frames and images, tracked-change marks) is a
standalone element kept whole. A paragraph inside another (a note's body, a text box anchored in a paragraph) is kept
with the element that holds it, not translated yet.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from nmtcli.documents.formats.core import Block, Document
from nmtcli.documents.formats.limits import Budget
from nmtcli.documents.formats.package import read_package
from nmtcli.documents.formats.xmlbytes import Edit, Element, inline_tokens, parse, spliced, text, xml_text

PAIRED = frozenset(("span", "a", "meta"))
BREAKS = frozenset(("line-break",))  # the sentence before one ends there
TEXT_PARTS = re.compile(r"content\.xml|styles\.xml")
NAMES = {"odt": "OpenDocument text", "odp": "OpenDocument presentation"}


def read(data: bytes, format: str = "odt", budget: Budget | None = None) -> Document:
    return read_package(data, NAMES.get(format, "OpenDocument"), "content.xml", TEXT_PARTS, _part, budget)


def _part(source: bytes | Iterable[bytes], budget: Budget | None = None) -> Document:
    root, data = parse(source, budget)
    edits: list[tuple[int, int, Edit]] = []
    blocks: list[Block] = []
    for paragraph in _paragraphs(root):
        if paragraph.end <= paragraph.start_end:  # <text:p/>
            continue
        block = Block(inline_tokens(data, paragraph, PAIRED, breaks=BREAKS), write=xml_text)
        blocks.append(block)
        edits.append((paragraph.start_end, paragraph.end, Edit(block, text(data, paragraph.start_end, paragraph.end), block.render)))
    return Document(spliced(data, edits), blocks)


def _paragraphs(element: Element) -> Iterator[Element]:
    """The paragraphs and headings not inside another (a note's or an anchored text box's are kept with it), in order;
    a walk with a stack of its own, as deep as elements nest."""
    walk = [iter(element.children)]
    while walk:
        child = next(walk[-1], None)
        if child is None:
            walk.pop()
        elif child.name in ("p", "h"):
            yield child
        else:
            walk.append(iter(child.children))
