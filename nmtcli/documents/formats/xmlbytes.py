"""XML read for its bytes: expat's element tree with the byte offsets of every tag, so that a file is written back as
its own bytes with only what is translated changed (xliff.py, docx.py).

expat is set up as defusedxml sets it up: parameter entities are never parsed, and a document that declares an entity
(the billion laughs, an external entity pointing at /etc/passwd or a URL) or refers to an external one is refused
before anything is read from it, so no entity is ever resolved. Only UTF-8 (and ASCII) files are read.

The bytes may come a chunk at a time (a zip entry as it unpacks: package.py), and every element and every character of
text is counted against the read's limits as expat reports it (limits.py: elements, depth, characters), so parsing
stops where a limit is passed and what the tree holds is bounded by the limits, not by the input: an element keeps
its tag's offsets, its children, and only the attributes its reader asks for (~270 bytes an element, whatever its
attributes; everything else is in the bytes).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from xml.parsers import expat

from nmtcli.documents.formats.core import Block, Tag, Token
from nmtcli.documents.formats.limits import Budget
from nmtcli.errors import NmtError

_NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})  # shared by the elements without any


@dataclass(slots=True)
class Element:
    name: str  # local name (a prefix dropped)
    attrs: Mapping[str, str]  # those of the attributes parse() was asked to keep that it has
    start: int  # the start tag: data[start:start_end]
    start_end: int = -1
    end: int = -1  # the end tag: data[end:end_end] (empty for <x/>)
    end_end: int = -1
    children: list[Element] = field(default_factory=list)


class _Refused(Exception):
    pass


def parse(source: bytes | Iterable[bytes], budget: Budget | None = None, attributes: frozenset[str] = frozenset()) -> tuple[Element, bytes]:
    """The element tree with each tag's byte offsets and the `attributes` named (by their qualified names), and the
    bytes they are offsets into (`source` whole, or its chunks joined); NmtError for XML that is not well-formed,
    declares entities, or is not UTF-8, OverLimit (an NmtError) as soon as it passes one of `budget`'s limits."""
    budget = budget or Budget()
    whole = isinstance(source, bytes)
    data = source if whole else bytearray()
    parser = expat.ParserCreate("UTF-8")  # whatever the declaration says (another encoding is refused: `declaration`)
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    stack: list[Element] = []
    root: list[Element] = []
    pending: list[tuple[Element, str]] = []  # (element, "start" or "end") whose end offset is the next event's
    local_names: dict[str, str] = {}  # qualified name -> local name, one string each

    def mark() -> None:
        if not pending:
            return
        at = parser.CurrentByteIndex
        for element, which in pending:
            if which == "start":
                element.start_end = at
            else:
                element.end_end = at
        pending.clear()

    def start(name, attrs):
        mark()
        budget.count_element(len(stack) + 1)
        local = local_names.get(name) or local_names.setdefault(name, name.rpartition(":")[2])
        kept = {a: attrs[a] for a in attributes if a in attrs} if attributes and attrs else _NO_ATTRIBUTES
        element = Element(local, kept or _NO_ATTRIBUTES, parser.CurrentByteIndex)
        (stack[-1].children if stack else root).append(element)
        stack.append(element)
        pending.append((element, "start"))

    def end(name):
        element = stack.pop()
        at = parser.CurrentByteIndex
        if pending and pending[-1] == (element, "start") and data[at - 1] == 62 and data[at - 2] == 47:  # "/>" ends <x/>: no end tag
            mark()
            element.end = element.end_end = element.start_end
            return
        mark()
        element.end = parser.CurrentByteIndex
        pending.append((element, "end"))

    def characters(text):
        mark()
        if not text.isspace():  # the whitespace between elements is not text
            budget.count_chars(len(text))

    def refuse(*args):
        raise _Refused()

    def declaration(version, encoding, standalone):
        if encoding and encoding.lower().replace("-", "").replace("_", "") not in ("utf8", "ascii", "usascii"):
            raise _Refused(f"the XML file is encoded in {encoding}: nmt reads UTF-8")

    parser.StartElementHandler, parser.EndElementHandler, parser.CharacterDataHandler = start, end, characters
    parser.CommentHandler = lambda data: mark()
    parser.ProcessingInstructionHandler = lambda target, data: mark()
    parser.EntityDeclHandler = parser.UnparsedEntityDeclHandler = parser.ExternalEntityRefHandler = refuse
    parser.XmlDeclHandler = declaration
    try:
        if whole:
            _check_utf8(data)
            parser.Parse(data, True)
        else:
            for chunk in source:
                if not data:
                    _check_utf8(chunk)
                data += chunk  # before expat reads it: a handler looks back at the bytes of its event
                parser.Parse(chunk, False)
            parser.Parse(b"", True)
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
    return root[0], data if whole else bytes(data)


def _check_utf8(first: bytes) -> None:
    """UTF-16 refused: a byte-order mark, or a zero byte among the first two, which expat takes for UTF-16 whatever
    it is told (and XML holds no zero byte)."""
    if first.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in first[:2]:
        raise NmtError("the XML file is UTF-16 (or not text): nmt reads UTF-8", "save it as UTF-8", exit_code=2)


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


def inline_tokens(data: bytes, element: Element, paired: frozenset[str], breaks: frozenset[str] = frozenset()) -> list[Token]:
    """The content of `element` as text and tags: children named in `paired` open and close around their own content
    (one with no content is standalone), those in `breaks` line breaks, every other child element whole as one
    standalone tag. A walk with a stack of its own, not a call a level: elements nest as deep as the read's limit."""
    out: list[Token] = []
    number = 0
    # The elements open around the walk: (element, its children still to read, its tag's number; None for `element`).
    opened: list[tuple[Element, Iterator[Element], int | None]] = [(element, iter(element.children), None)]
    at = element.start_end  # where the text not read yet starts
    while opened:
        parent, children, n = opened[-1]
        child = next(children, None)
        if child is None:  # the end of `parent`'s content
            opened.pop()
            if parent.end > at:
                out.append(unescaped(text(data, at, parent.end)))
            if n is not None:
                out.append(Tag("close", text(data, parent.end, parent.end_end), n))
                at = parent.end_end
            continue
        if child.start > at:
            out.append(unescaped(text(data, at, child.start)))
        if child.name in paired and child.end > child.start_end:
            out.append(Tag("open", text(data, child.start, child.start_end), number))
            opened.append((child, iter(child.children), number))
            at = child.start_end
        else:
            out.append(Tag("break" if child.name in breaks else "void", text(data, child.start, child.end_end), number))
            at = child.end_end
        number += 1
    return out


def xml_text(tokens: Sequence[Token]) -> str:
    """Tokens as XML content: text escaped, tags as written."""
    return "".join(html.escape(t, quote=False) if isinstance(t, str) else t.markup for t in tokens)
