"""XML read for its bytes: expat's element tree with the byte offsets of every tag, so that a file is written back as
its own bytes with only what is translated changed (xliff.py, docx.py).

expat is set up as defusedxml sets it up: parameter entities are never parsed, and a document that declares an entity
(the billion laughs, an external entity pointing at /etc/passwd or a URL) or refers to an external one is refused
before anything is read from it, so no entity is ever resolved. Only UTF-8 (and ASCII) files are read.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from xml.parsers import expat

from nmtcli.documents.formats.core import Block, Tag, Token
from nmtcli.errors import NmtError


@dataclass
class Element:
    name: str  # local name (a prefix dropped)
    attrs: dict[str, str]
    start: int  # the start tag: data[start:start_end]
    start_end: int = -1
    end: int = -1  # the end tag: data[end:end_end] (empty for <x/>)
    end_end: int = -1
    children: list[Element] = field(default_factory=list)


class _Refused(Exception):
    pass


def parse(data: bytes) -> Element:
    """The element tree with each tag's byte offsets; NmtError for XML that is not well-formed, declares entities,
    or is not UTF-8."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise NmtError("the XML file is UTF-16: nmt reads UTF-8", "save it as UTF-8", exit_code=2)
    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    marks: list[int] = []  # the byte offset of every event: where the previous one's bytes end
    stack: list[Element] = []
    root: list[Element] = []
    pending: list[tuple[Element, str]] = []  # (element, "start" or "end") whose end offset is the next event's

    def mark() -> None:
        at = parser.CurrentByteIndex
        for element, which in pending:
            setattr(element, "start_end" if which == "start" else "end_end", at)
        pending.clear()
        marks.append(at)

    def start(name, attrs):
        mark()
        element = Element(name.rpartition(":")[2], attrs, parser.CurrentByteIndex)
        (stack[-1].children if stack else root).append(element)
        stack.append(element)
        pending.append((element, "start"))

    def end(name):
        element = stack.pop()
        at = parser.CurrentByteIndex
        if pending and pending[-1] == (element, "start") and data[at - 2:at] == b"/>":  # <x/>: no end tag
            mark()
            element.end = element.end_end = element.start_end
            return
        mark()
        element.end = parser.CurrentByteIndex
        pending.append((element, "end"))

    def refuse(*args):
        raise _Refused()

    def declaration(version, encoding, standalone):
        if encoding and encoding.lower().replace("-", "").replace("_", "") not in ("utf8", "ascii", "usascii"):
            raise _Refused(f"the XML file is encoded in {encoding}: nmt reads UTF-8")

    parser.StartElementHandler, parser.EndElementHandler = start, end
    parser.CharacterDataHandler = parser.CommentHandler = lambda data: mark()
    parser.ProcessingInstructionHandler = lambda target, data: mark()
    parser.EntityDeclHandler = parser.UnparsedEntityDeclHandler = parser.ExternalEntityRefHandler = refuse
    parser.XmlDeclHandler = declaration
    try:
        parser.Parse(data, True)
    except _Refused as e:
        if e.args:
            raise NmtError(e.args[0], "save it as UTF-8", exit_code=2) from None
        raise NmtError("the XML file declares or refers to an entity: refused, entities are never resolved",
                       "remove the <!DOCTYPE ...> entity declarations", exit_code=2) from None
    except expat.ExpatError as e:
        raise NmtError(f"the file is not well-formed XML: {expat.ErrorString(e.code)} at line {e.lineno}, column {e.offset}",
                       "check that it is the format its extension says, or repair it", exit_code=2) from None
    for element, which in pending:
        setattr(element, "start_end" if which == "start" else "end_end", len(data))
    return root[0]


_MARKUP = re.compile(r"<!--.*?-->|<\?.*?\?>|<!\[CDATA\[(.*?)\]\]>", re.S)


def unescaped(raw: str) -> str:
    """XML text as the reader reads it: entities replaced, CDATA opened, comments and instructions dropped."""
    return html.unescape(_MARKUP.sub(lambda m: m[1] or "", raw)) if "<" in raw or "&" in raw else raw


def text(data: bytes, start: int, end: int) -> str:
    return data[start:end].decode("utf-8")


class Edit:
    """What replaces some bytes of the file: `translated()` where the block was translated, else `original`."""

    def __init__(self, block: Block, original: str, translated):
        self.block, self.original, self.translated = block, original, translated

    def render(self) -> str:
        return self.translated() if self.block.translation is not None else self.original


def spliced(data: bytes, edits: Sequence[tuple[int, int, Edit]]) -> list:
    """The parts of a document: the source's text between the `edits` (start, end, Edit; in order, none overlapping),
    each edit in its place."""
    parts: list = []
    at = 0
    for start, end, edit in edits:
        parts += [text(data, at, start), edit]
        at = end
    parts.append(text(data, at, len(data)))
    return parts


def inline_tokens(data: bytes, element: Element, paired: frozenset[str], number: list[int] | None = None,
                  breaks: frozenset[str] = frozenset()) -> list[Token]:
    """The content of `element` as text and tags: children named in `paired` open and close around their own content
    (one with no content is standalone), those in `breaks` line breaks, every other child element whole as one
    standalone tag."""
    number = [0] if number is None else number
    out: list[Token] = []
    at = element.start_end
    for child in element.children:
        if child.start > at:
            out.append(unescaped(text(data, at, child.start)))
        if child.name in paired and child.end > child.start_end:
            n = number[0]
            number[0] += 1
            out.append(Tag("open", text(data, child.start, child.start_end), n))
            out += inline_tokens(data, child, paired, number, breaks)
            out.append(Tag("close", text(data, child.end, child.end_end), n))
        else:
            out.append(Tag("break" if child.name in breaks else "void", text(data, child.start, child.end_end), number[0]))
            number[0] += 1
        at = child.end_end
    if element.end > at:
        out.append(unescaped(text(data, at, element.end)))
    return out


def xml_text(tokens: Sequence[Token]) -> str:
    """Tokens as XML content: text escaped, tags as written."""
    return "".join(html.escape(t, quote=False) if isinstance(t, str) else t.markup for t in tokens)
