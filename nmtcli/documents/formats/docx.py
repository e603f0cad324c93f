"""Word documents (.docx, Office Open XML): every paragraph of the body, tables, headers, footers, footnotes and
endnotes translated, its runs placed by the alignment; every other byte of those parts, and every other part of the
package (styles, numbering, images, relationships, comments), kept.

A .docx is a zip of XML parts (package.py: the zip checked, the other parts copied). The parts with text
(word/document.xml, header*.xml, footer*.xml, footnotes.xml, endnotes.xml) are read for their bytes (xmlbytes.py:
expat with byte offsets, entities refused).

A paragraph (`<w:p>`) is one block; its properties (`<w:pPr>`) are kept in front of it. Each run (`<w:r>`), with
its own formatting (`<w:rPr>`: bold, italic, a font, a colour), is an inline element around its text, so the
alignment puts each run's formatting on the translation of its words instead of merging the paragraph into its first
run (what LibreTranslate's users report, its issues #599 and #683); so are the containers of runs: hyperlinks
(`<w:hyperlink>`), tracked insertions (`<w:ins>`), simple fields' results (`<w:fldSimple>`), smart tags. A run that
holds no text but a field code (`<w:fldChar>`, `<w:instrText>`), a drawing, a footnote reference or an object, a
tracked deletion (`<w:del>`), bookmarks, comment anchors and proofing marks are standalone elements, kept whole and
placed by the alignment; a tab or a line break inside a run stays in its run. Translated text outside every run
(words the alignment gave to no run) is written in a run of its own, with no formatting of its own; text is written
in `<w:t xml:space="preserve">`, so its spaces stay. Paragraphs inside text boxes are not translated yet (the run
holding the drawing is kept whole).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from nmtcli.documents.formats.core import Block, Document, Tag, Token
from nmtcli.documents.formats.package import read_package
from nmtcli.documents.formats.xmlbytes import Edit, Element, parse, text, unescaped
TEXT_PARTS = re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes)\.xml")
CONTAINERS = frozenset(("hyperlink", "ins", "fldSimple", "smartTag", "customXml", "moveTo"))
KEPT_RUN_CHILDREN = frozenset(("fldChar", "instrText", "drawing", "pict", "object", "footnoteReference", "endnoteReference",
                               "commentReference", "delText", "AlternateContent", "ruby", "sym"))
RUN_CONTENT = frozenset(("tab", "br", "cr", "noBreakHyphen", "softHyphen", "lastRenderedPageBreak"))
_TEXT = '<w:t xml:space="preserve">'


def read(data: bytes, format: str = "docx") -> Document:
    return read_package(data, "Word document", "word/document.xml", TEXT_PARTS, _part)


def _part(data: bytes) -> Document:
    root = parse(data)
    edits: list[tuple[int, int, Edit]] = []
    blocks: list[Block] = []
    for paragraph in _paragraphs(root):
        children = [c for c in paragraph.children if c.name != "pPr"]
        if not children:
            continue
        kinds: dict[int, str] = {}
        tokens = _tokens(data, children, kinds)
        block = Block(tokens, write=lambda tokens, kinds=kinds: _write(tokens, kinds))
        blocks.append(block)
        start, end = children[0].start, paragraph.end
        edits.append((start, end, Edit(block, text(data, start, end), block.render)))
    parts: list = []
    at = 0
    for start, end, edit in edits:
        parts += [text(data, at, start), edit]
        at = end
    parts.append(text(data, at, len(data)))
    return Document(parts, blocks)


def _paragraphs(element: Element):
    """The paragraphs not inside another (a text box's sit in a drawing in a run of another paragraph: that run is
    kept whole, the text box's paragraphs with it)."""
    for child in element.children:
        if child.name == "p":
            yield child
        else:
            yield from _paragraphs(child)


def _tokens(data: bytes, children: list[Element], kinds: dict[int, str]) -> list[Token]:
    """A paragraph's (or a container's) children as text and tags; `kinds` gets each element's kind by its id ("run",
    "container", "in-run": a tab or break of a run, "void": a whole element kept)."""
    out: list[Token] = []
    for child in children:
        raw = text(data, child.start, child.end_end)
        if child.name == "r" and any(c.name == "t" for c in child.children) and not any(c.name in KEPT_RUN_CHILDREN for c in child.children):
            n = len(kinds)
            kinds[n] = "run"
            properties = next((c for c in child.children if c.name == "rPr"), None)
            opening = text(data, child.start, properties.end_end if properties else child.start_end)
            out.append(Tag("open", opening, n))
            for part in child.children:
                if part.name == "t":
                    out.append(unescaped(text(data, part.start_end, part.end)))
                elif part.name != "rPr":
                    kinds[len(kinds)] = "in-run" if part.name in RUN_CONTENT else "void"
                    out.append(Tag("void", text(data, part.start, part.end_end), len(kinds) - 1))
            out.append(Tag("close", text(data, child.end, child.end_end), n))
        elif child.name in CONTAINERS and child.end_end > child.end:
            n = len(kinds)
            kinds[n] = "container"
            out.append(Tag("open", text(data, child.start, child.start_end), n))
            out += _tokens(data, child.children, kinds)
            out.append(Tag("close", text(data, child.end, child.end_end), n))
        else:
            kinds[len(kinds)] = "void"
            out.append(Tag("void", raw, len(kinds) - 1))
    return out


def _write(tokens: Sequence[Token], kinds: dict[int, str]) -> str:
    """Tokens as WordprocessingML: text in `<w:t>` inside its run, or in a run of its own outside every run; a tab or
    break the alignment put outside its run in a run of its own; a whole element (a field's run, a bookmark) it put
    inside a run between the run's two halves, since a run holds no run."""
    out: list[str] = []
    runs: list[Tag | None] = []  # for each open element: its start tag if it is a run
    open_text: str | None = None  # what closes the text being written: "</w:t>" or "</w:t></w:r>"
    for token in tokens:
        if isinstance(token, str):
            if not token:
                continue
            if open_text is None:
                in_run = bool(runs) and runs[-1]
                out.append(_TEXT if in_run else "<w:r>" + _TEXT)
                open_text = "</w:t>" if in_run else "</w:t></w:r>"
            out.append(html.escape(token, quote=False))
            continue
        if open_text is not None:
            out.append(open_text)
            open_text = None
        kind = kinds.get(token.id, "void")
        if token.kind == "open":
            runs.append(token if kind == "run" else None)
        elif token.kind == "close" and runs:
            runs.pop()
        in_run = bool(runs) and runs[-1] is not None
        if token.kind == "void" and kind == "in-run" and not in_run:
            out.append(f"<w:r>{token.markup}</w:r>")
        elif token.kind == "void" and kind == "void" and in_run:
            out.append(f"</w:r>{token.markup}{runs[-1].markup}")
        else:
            out.append(token.markup)
    if open_text is not None:
        out.append(open_text)
    return "".join(out)
