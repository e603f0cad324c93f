"""HTML's tokens for documents/markup.py: where each tag, comment, doctype and run of text starts and ends in the
source, and which elements are inline, kept (verbatim) or void.

The parser is Python's own `html.parser` used as a tokenizer: it reports where each tag, comment,
doctype and run of text starts in the source, so everything that is not translated comes back as the
very characters it was (attribute quotes, letter case, entities, comments, `<script>` bodies), not as a
parser's re-serialisation of it. It never raises on malformed input and keeps no recursion, so a
page of 100,000 nested `<div>`s is one pass over a list. (lxml, selectolax and html5lib build trees and
serialise them again: they report no source offsets, and libxml2 keeps 255 of 100,000 levels of nesting.
Measured on a 1 MB page: html.parser 1.2 s, lxml 0.05 s, html5lib 5.3 s.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

# Elements that run inside a line of text: their tags do not cut a block's text.
INLINE = frozenset("a abbr acronym b bdi bdo big cite data del dfn em font i ins label mark nobr q rp rt ruby s small span "
                   "strike strong sub sup time tt u".split())
# Elements that start and end a block of text: the document's structure, HTML's block-level flow content, lists,
# tables, forms and the containers whose text is a fallback. Their tags cut a block's text; every other element
# that is not void or kept whole runs inside a line, an unknown one too (`<g>`, a custom `<my-widget>`), as a
# browser renders an element it does not know (display: inline).
BLOCK = frozenset("html head body title address article aside blockquote center details dialog dir div dl dd dt fieldset "
                  "figcaption figure footer form frameset frame h1 h2 h3 h4 h5 h6 header hgroup legend li main menu nav ol "
                  "p search section summary ul table caption colgroup thead tbody tfoot tr td th select optgroup option "
                  "button datalist noscript canvas video audio picture map".split())
# Elements whose whole source is kept: code, raw text, and things that are not prose.
VERBATIM = frozenset("script style pre textarea code kbd samp var svg math template xmp listing plaintext iframe noembed "
                     "noframes object".split())
INLINE_VERBATIM = frozenset("code kbd samp var svg math".split())
# Void elements that are part of a line (anchored to the words around them); <br> and <hr> end the block.
VOID = frozenset("area base br col embed hr img input link meta param source track wbr keygen".split())
BREAKS = frozenset(("br", "hr"))
MAX_INLINE_DEPTH = 32


def inline(name: str) -> bool:
    """Whether an element's tags run inside a line of text (a known inline element, or one not known to cut it)."""
    return name in INLINE or name not in BLOCK and name not in VERBATIM and name not in VOID

# Elements whose content html.parser must read as raw text (no tags inside), as a browser does.
RAW_TEXT = ("script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "plaintext")

ALNUM = re.compile(r"\w", re.UNICODE)
WORD = re.compile(r"\S+")
# A character reference as html.unescape reads it (its own pattern), and everything between them.
CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")
LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


# --- tokens: where each piece of the source starts and ends ------------------------------------------


@dataclass
class Token:
    kind: str  # "start", "end", "text", "other" (comment, doctype, processing instruction, CDATA)
    start: int
    end: int
    name: str = ""
    attrs: list[tuple[str, str | None]] = field(default_factory=list)
    closed: bool = False  # a start tag written <x/>


class _Tokenizer(HTMLParser):
    CDATA_CONTENT_ELEMENTS = RAW_TEXT

    def __init__(self, source: str):
        super().__init__(convert_charrefs=True)
        self.tokens: list[Token] = []
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", source)]

    def _add(self, kind: str, name: str = "", attrs=(), closed: bool = False) -> None:
        line, column = self.getpos()
        start = self.line_starts[line - 1] + column
        if self.tokens and self.tokens[-1].start == start and kind == "text" == self.tokens[-1].kind:
            return
        self.tokens.append(Token(kind, start, start, name, list(attrs), closed))

    def handle_starttag(self, tag, attrs):
        self._add("start", tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._add("start", tag, attrs, closed=True)

    def handle_endtag(self, tag):
        self._add("end", tag)

    def handle_data(self, data):
        self._add("text")

    def handle_comment(self, data):
        self._add("other")

    def handle_decl(self, decl):
        self._add("other")

    def handle_pi(self, data):
        self._add("other")

    def unknown_decl(self, data):
        self._add("other")

    def parse_marked_section(self, i, report=1):
        """<![CDATA[...]>, <![if ...]>: to the first ">", as HTML reads it outside SVG and MathML (a bogus comment).
        html.parser's own raises on an unknown keyword ("<![foo[") and searches to the end for each unclosed one."""
        end = self.rawdata.find(">", i + 3)
        if end < 0:
            return -1
        if report:
            self.unknown_decl(self.rawdata[i + 3:end])
        return end + 1


def tokenize(source: str) -> list[Token]:
    """The source as tokens that cover it exactly, in order: token i is source[start:end], and the next
    starts where it ends (consecutive text tokens are merged)."""
    parser = _Tokenizer(source)
    # Every tag, comment and declaration ends with ">": what follows the last one is text. html.parser would
    # rescan it to its end at every "<" in it (quadratic time: "<a " * 20,000 took 13 s).
    last = source.rfind(">") + 1
    parser.feed(source[:last])
    parser.close()
    tokens = parser.tokens
    if last < len(source):
        if tokens and tokens[-1].kind == "text" or parser.cdata_elem:
            pass  # the text (or a <script> never closed) runs on to the end
        else:
            tokens.append(Token("text", last, last))
    if not tokens or tokens[0].start > 0:  # html.parser reports everything; this only guards the invariant
        tokens.insert(0, Token("text", 0, 0))
    merged: list[Token] = []
    for i, token in enumerate(tokens):
        token.end = tokens[i + 1].start if i + 1 < len(tokens) else len(source)
        if token.end <= token.start and token.kind == "text":
            continue
        if merged and token.kind == "text" == merged[-1].kind:
            merged[-1].end = token.end
        else:
            merged.append(token)
    for i, token in enumerate(merged):  # "<!--" never closed: html.parser reads it as text, a browser hides all that follows
        raw_text = i > 0 and merged[i - 1].kind == "start" and merged[i - 1].name in RAW_TEXT
        at = source.find("<!--", token.start, token.end) if token.kind == "text" and not raw_text else -1
        if at >= 0:
            rest = [Token("other", at, len(source))]
            if at > token.start:
                rest.insert(0, Token("text", token.start, at))
            return merged[:i] + rest
    return merged


def untranslated(token: Token) -> bool:
    """translate="no" or class="notranslate": the element is kept whole."""
    for name, value in token.attrs:
        if name == "translate" and (value or "").strip().lower() == "no":
            return True
        if name == "class" and "notranslate" in (value or "").split():
            return True
    return False


# An element whose end tag may be left out ends where one of these start tags begins at its own level
# (HTML's optional end tags; <p> also ends inside inline elements).
_CLOSES_P = frozenset("address article aside blockquote details dialog div dl fieldset figcaption figure footer form h1 h2 h3 "
                      "h4 h5 h6 header hgroup hr main menu nav ol p pre section table ul".split())
_IMPLIED_END = {"p": _CLOSES_P, "li": frozenset(("li",)), "dt": frozenset(("dt", "dd")), "dd": frozenset(("dt", "dd")),
                "tr": frozenset(("tr", "tbody", "thead", "tfoot")), "td": frozenset(("td", "th", "tr", "tbody", "thead", "tfoot")),
                "th": frozenset(("td", "th", "tr", "tbody", "thead", "tfoot")), "option": frozenset(("option", "optgroup")),
                "optgroup": frozenset(("optgroup",)), "thead": frozenset(("tbody", "tfoot")), "tbody": frozenset(("tbody", "tfoot")),
                "rt": frozenset(("rt", "rp")), "rp": frozenset(("rt", "rp")), "colgroup": frozenset(("thead", "tbody", "tfoot", "tr"))}
# An inline element kept whole ends where a block's start tag begins (its parent's text ends there).
_INLINE_ENDS = _CLOSES_P | frozenset("li dd dt tr td th tbody thead tfoot option body html".split())


def element_end(tokens: list[Token], i: int, enclosing: dict[str, int]) -> int:
    """The index of the token after the element that token i starts: after the end tag that balances it, or
    before the first token that closes it without one: the end tag of an element around it (`enclosing`: the
    names of the open elements, with their counts) or a start tag that implies its end (_IMPLIED_END; a kept
    inline element: a block's start tag). Never closed: to the end of the document."""
    name = tokens[i].name
    ends = _INLINE_ENDS if inline(name) or name in ("code", "kbd", "samp", "var") else _IMPLIED_END.get(name, frozenset())
    inner: list[str] = []  # the open elements inside it
    for j in range(i + 1, len(tokens)):
        t = tokens[j]
        if t.kind == "start" and not t.closed and t.name not in VOID:
            if t.name in ends and (name == "p" or all(inline(n) for n in inner)):
                return j
            inner.append(t.name)
        elif t.kind == "end":
            if t.name in inner:
                while inner.pop() != t.name:
                    pass
            elif t.name == name:
                return j + 1
            elif enclosing.get(t.name):
                return j
    return len(tokens)


def opened(stack: list[str], counts: dict[str, int], t: Token) -> None:
    """The open elements (`stack`, and each name's count) after token t, as far as the kept elements need them."""
    if t.kind == "start" and not t.closed and t.name not in VOID:
        if stack and t.name in _IMPLIED_END.get(stack[-1], ()):
            counts[stack.pop()] -= 1
        stack.append(t.name)
        counts[t.name] = counts.get(t.name, 0) + 1
    elif t.kind == "end" and counts.get(t.name):
        while stack:
            counts[stack[-1]] -= 1
            if stack.pop() == t.name:
                break
