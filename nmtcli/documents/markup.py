"""HTML in, HTML out: the text of a page translated a sentence at a time, every byte of its markup kept.

The parser is Python's own `html.parser` used as a tokenizer: it reports where each tag, comment,
doctype and run of text starts in the source, so everything that is not translated comes back as the
very characters it was (attribute quotes, letter case, entities, comments, `<script>` bodies), not as a
parser's re-serialisation of it. It never raises on malformed input and keeps no recursion, so a
page of 100,000 nested `<div>`s is one pass over a list. (lxml, selectolax and html5lib build trees and
serialise them again: they report no source offsets, and libxml2 keeps 255 of 100,000 levels of nesting.
Measured on a 1 MB page: html.parser 1.2 s, lxml 0.05 s, html5lib 5.3 s.)

What is translated: the text of each *block*, whatever lies between two tags that are not inline
(`<p>`, `<li>`, `<td>`, `<div>`, `<h1>`, `<br>`, ...), taken as a whole: its inline elements (INLINE:
`<b>`, `<i>`, `<em>`, `<a>`, `<span>`, ...) do not cut it, and it is split into sentences with
`documents/sentences.py` (a line break in the source is a space here, as a browser shows it). Each
sentence goes to the model as its words joined by single spaces.

Where the inline tags go: around the translation of the words they wrapped, by the model's word
alignment with every source word linked (inference/alignment.py's COVERING: each target word is linked
to the source word it attends to most, as `--alignment words` gives it, and each source word no target
word is linked to, to the target word that attends to it most). An element that wrapped words wraps at
least one wherever one can be given it (below): not an empty `<a href>` where the reader's link text was.
An element wraps the target words linked to any word it covers (a word partly inside counts), from
the first to the last of them: when they are not contiguous the words between are wrapped too, since
a tag cannot be copied without copying its id and link. Punctuation the element left outside in the source
stays outside where the target word has it too (`<a>the link</a>.`, `"<b>word</b>"`). An element whose words
are still linked to no target word (no alignment, links past the words) wraps the target word at their place
by position (the diagonal: the middle of its words scaled to the translation's length). An element that wraps
no text and a void element inside text (`<img>`, a comment) sit where the nearest source word before them
went (after its last target word; none before: before the first target word of the nearest word after).
Nested elements stay nested: a child is clipped to its parent's words, and siblings whose words overlap
in the translation are made to follow each other in the order of their first words (the later one gives
up the shared words; one left with no word takes the word no sibling wraps nearest to its place, else the
nearest end word of a sibling that wraps more than one: its first word only where its start tag is in the
sentence, its last only where its end tag is, and one that opened in an earlier sentence takes only a word before
its siblings', one that closes in a later one only a word after theirs, so that no tags cross; never a word a kept
element's source stands for. It stays empty only where its parent, or the sentence, has fewer words than such
elements, or where every word it could take belongs to a kept element or would make tags cross a sentence's
edge). An element that starts in one sentence and ends in another opens at its first word's translation
and runs to the sentence's end, and from the next one's start to its last word's. Inline tags that cross
each other (`<b><i>x</b></i>`) or nest deeper than MAX_INLINE_DEPTH make that block fall back to
translating each run of text between tags on its own, every tag staying where it was.

Kept as they are, byte for byte: every tag with its attributes (`title`, `alt`, `placeholder` are not
translated: a client that wants them sends them as text), comments, doctypes, processing instructions,
entities outside the translated text, text of no letter or digit (spaces, `&nbsp;`, "|"), and whole
elements: VERBATIM ones (`<script>`, `<style>`, `<pre>`, `<textarea>`, `<code>`, `<kbd>`, `<samp>`,
`<svg>`, `<math>`, ...) and any element with `translate="no"` or the class `notranslate`, to where HTML
ends it (its end tag, the end tag of an element around it, or a start tag that closes it: `<li>` an open
`<li>`, `<div>` an open `<p>`; a kept inline element: a block's start tag). An inline one among them
(`<code>` in a sentence) is read by the model with the sentence, its words cut off the text stuck to it
(`<kbd>Ctrl</kbd>+<kbd>C</kbd>`: "Ctrl + C"), and its original source replaces the target words its
words are linked to; a target word that is the stuck source word unchanged stays stuck to it. One that
shows no text stands in its sentence as a void element does. A comment never closed hides the rest of
the document (as in a browser): kept as it is. `<br>` and `<hr>` end a block (the text on each side
is translated apart, as lines are). Translated text is written with `&`, `<` and `>` escaped.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import TYPE_CHECKING

from nmtcli.documents.sentences import sentence_spans

if TYPE_CHECKING:
    from nmtcli.documents.protect import Protection
    from nmtcli.inference.results import Translation

# Elements that run inside a line of text: their tags do not cut a block's text.
INLINE = frozenset("a abbr acronym b bdi bdo big cite data del dfn em font i ins label mark nobr q rp rt ruby s small span "
                   "strike strong sub sup time tt u".split())
# Elements whose whole source is kept: code, raw text, and things that are not prose.
VERBATIM = frozenset("script style pre textarea code kbd samp var svg math template xmp listing plaintext iframe noembed "
                     "noframes object".split())
INLINE_VERBATIM = frozenset("code kbd samp var svg math".split())
# Void elements that are part of a line (anchored to the words around them); <br> and <hr> end the block.
VOID = frozenset("area base br col embed hr img input link meta param source track wbr keygen".split())
BREAKS = frozenset(("br", "hr"))
MAX_INLINE_DEPTH = 32

# Elements whose content html.parser must read as raw text (no tags inside), as a browser does.
RAW_TEXT = ("script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "plaintext")

_ALNUM = re.compile(r"\w", re.UNICODE)
_WORD = re.compile(r"\S+")
# A character reference as html.unescape reads it (its own pattern), and everything between them.
_CHARREF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


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


def _untranslated(token: Token) -> bool:
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


def _element_end(tokens: list[Token], i: int, enclosing: dict[str, int]) -> int:
    """The index of the token after the element that token i starts: after the end tag that balances it, or
    before the first token that closes it without one: the end tag of an element around it (`enclosing`: the
    names of the open elements, with their counts) or a start tag that implies its end (_IMPLIED_END; a kept
    inline element: a block's start tag). Never closed: to the end of the document."""
    name = tokens[i].name
    ends = _INLINE_ENDS if name in INLINE or name in ("code", "kbd", "samp", "var") else _IMPLIED_END.get(name, frozenset())
    inner: list[str] = []  # the open elements inside it
    for j in range(i + 1, len(tokens)):
        t = tokens[j]
        if t.kind == "start" and not t.closed and t.name not in VOID:
            if t.name in ends and (name == "p" or all(n in INLINE for n in inner)):
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


def _opened(stack: list[str], counts: dict[str, int], t: Token) -> None:
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


# --- a block's text with its inline elements ---------------------------------------------------------


@dataclass(eq=False)
class Node:
    """An inline element (or a void element, comment or kept element) in a block's text T: it covers T[p:q]."""

    kind: str  # "wrap" (open and close tags around translated words), "verbatim" (its source replaces its words), "atom"
    p: int
    q: int
    open: str = ""  # the source of its start tag ("" when it opened before this block); verbatim and atoms: their whole source
    close: str = ""  # the source of its end tag ("" when it closes after this block)
    parent: Node | None = None
    name: str = ""
    spaces: tuple[bool, bool] = (False, False)  # an atom: whether the source has whitespace before it, after it
    edges: tuple[str, str] = ("", "")  # punctuation of its first and last word outside it ('"<b>word</b>."': '"', '.')
    protects: str = ""  # a protected span (documents/protect.py): its text, which the model's own words may not hold


@dataclass
class Sentence:
    text: str  # what the model reads: the words joined by single spaces
    words: list[tuple[int, int]]  # each source word's [start, end) in the block's text
    nodes: list[Node]  # the nodes with a tag inside this sentence
    opens: set[int]  # ids of nodes whose start tag is inside it
    closes: set[int]


@dataclass
class Document:
    """Parsed HTML: `segments` to translate, and `render` to put their translations back."""

    parts: list[str | Sentence]

    @property
    def sentences(self) -> list[Sentence]:
        return [part for part in self.parts if isinstance(part, Sentence)]

    @property
    def segments(self) -> list[str]:
        """What the model translates, one sentence each."""
        return [s.text for s in self.sentences]

    def render(self, translations: Sequence[tuple[str, str | None]]) -> str:
        """The document with each sentence replaced by its (translation, Pharaoh word alignment) (None: no
        alignment, tags placed at the translation's edges)."""
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        done = iter(translations)
        return "".join(part if isinstance(part, str) else render_sentence(part, *next(done)) for part in self.parts)

    def render_kth(self, results: Sequence[Sequence[Translation]], k: int = 0) -> str:
        """`render` with each sentence's k-th best translation (kth_best) from its n-best list, and its alignment;
        a sentence of no tokens (an empty n-best list) becomes ""."""
        from nmtcli.inference.results import kth_best

        chosen = [kth_best(hyps, k) for hyps in results]
        return self.render([(best.text, best.alignment) if best else ("", None) for best in chosen])


class TooManySentences(ValueError):
    """The document holds more sentences than `parse` was allowed to cut (it stops there: bounded work)."""

    def __init__(self, limit: int):
        super().__init__(f"more than {limit:,} sentences")
        self.limit = limit


def parse(source: str, language: str, max_sentences: int | None = None, protect: Protection | None = None) -> Document:
    """The document's blocks cut into sentences (of `language`'s rules), and everything else as it is;
    TooManySentences as soon as there are more than `max_sentences`. `protect` (documents/protect.py): the spans of
    text it finds are kept byte for byte, each placed in the translation as a void element is."""
    tokens = tokenize(source)
    parts: list[str | Sentence] = []
    run: list[tuple[str, int, int, Token]] = []  # (item kind, start, end, token): text, open, close, atom, verbatim
    count = [0]

    def flush() -> None:
        if run:
            block = _block(source, run, language, protect)
            parts.extend(block)
            run.clear()
            count[0] += sum(isinstance(part, Sentence) for part in block)
            if max_sentences is not None and count[0] > max_sentences:
                raise TooManySentences(max_sentences)

    stack: list[str] = []
    counts: dict[str, int] = {}
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.kind in ("start", "end"):
            _opened(stack, counts, t)
        if t.kind == "text":
            run.append(("text", t.start, t.end, t))
        elif t.kind == "other":
            run.append(("atom", t.start, t.end, t))
        elif t.kind == "start" and (t.name in VERBATIM or _untranslated(t)) and not t.closed and t.name not in VOID:
            j = _element_end(tokens, i, counts)
            end = tokens[j - 1].end
            _opened(stack, counts, Token("end", 0, 0, t.name))
            if t.name in INLINE_VERBATIM or t.name in INLINE:
                run.append(("verbatim", t.start, end, t))
            else:
                flush()
                parts.append(source[t.start:end])
            i = j
            continue
        elif t.kind == "start" and (t.name in VOID or t.closed) and t.name not in BREAKS:
            run.append(("atom", t.start, t.end, t))
        elif t.name in INLINE and t.kind == "start":
            run.append(("open", t.start, t.end, t))
        elif t.name in INLINE and t.kind == "end":
            run.append(("close", t.start, t.end, t))
        else:  # a block's tag, <br>, <hr>: the text around it is translated apart
            flush()
            parts.append(source[t.start:t.end])
        i += 1
    flush()
    merged: list[str | Sentence] = []
    raw: list[str] = []
    for part in parts:  # adjacent raw strings as one
        if isinstance(part, str):
            raw.append(part)
            continue
        if raw:
            merged.append("".join(raw))
            raw.clear()
        merged.append(part)
    if raw:
        merged.append("".join(raw))
    return Document(merged)


def _decoded(raw: str) -> list[tuple[str, str]]:
    """(source, text) chunks of raw text: each character reference alone, with what it stands for."""
    chunks, at = [], 0
    for m in _CHARREF.finditer(raw):
        if m.start() > at:
            chunks.append((raw[at:m.start()], raw[at:m.start()]))
        chunks.append((m.group(), html.unescape(m.group())))
        at = m.end()
    if at < len(raw):
        chunks.append((raw[at:], raw[at:]))
    return chunks


# A mark of a block, in source order: (kind, position in the block's text T, node or raw source, text it adds to T).
# kinds: "chars" (a chunk of text: its source and its text), "open", "close", "atom", "verbatim" (a node).
Mark = tuple[str, int, object, str]


def _block(source: str, run: list[tuple[str, int, int, Token]], language: str, protect: Protection | None = None) -> list[str | Sentence]:
    """One block's items as raw strings and Sentences: its text T, its nodes, its sentences."""
    marks = _marks(source, _protected(source, run, protect) if protect is not None else run)
    if marks is None:  # tags that cross, or nest too deep: each run of text alone, every tag where it was
        out: list[str | Sentence] = []
        for item in run:
            out.extend(_block(source, [item], language, protect) if item[0] == "text" else [source[item[1]:item[2]]])
        return out
    text = "".join(mark[3] for mark in marks)
    if not _ALNUM.search(text):
        return [source[run[0][1]:run[-1][2]]]
    flat = text.translate(_LINE_BREAKS)
    for kind, position, node, _ in marks:
        if kind != "chars" and node.kind == "atom":
            node.spaces = (position > 0 and flat[position - 1].isspace(), position < len(flat) and flat[position].isspace())
        elif kind in ("open", "verbatim") and node.q > node.p:
            before = re.search(r"\S+$", flat[max(0, node.p - 64):node.p])
            after = re.match(r"\S+", flat[node.q:node.q + 64])
            head, tail = before.group() if before else "", after.group() if after else ""
            node.edges = tuple(edge if edge and not _ALNUM.search(edge) else "" for edge in (head, tail))
    spans = [s for s in sentence_spans(flat, language) if _ALNUM.search(flat[s[0]:s[1]])]
    spans = _merge_spans(spans, [(n.p, n.q) for kind, _, n, _ in marks if kind == "verbatim" and n.q > n.p])
    marks = _cut_at(marks, sorted({x for span in spans for x in span}))
    where = _sentence_of_marks(marks, spans)
    sentences = []
    # A kept element's words are cut off the text stuck to it ("<kbd>Ctrl</kbd>+<kbd>C</kbd>": three words): its
    # source replaces the target words linked to its own words, never the translation of the text beside it.
    kept = sorted({x for kind, _, n, _ in marks if kind == "verbatim" and n.q > n.p for x in (n.p, n.q)})
    for s, e in spans:
        words = []
        for w in _WORD.finditer(flat[s:e]):
            a, b = s + w.start(), s + w.end()
            for x in kept[bisect.bisect_right(kept, a):bisect.bisect_left(kept, b)]:
                words.append((a, x))
                a = x
            words.append((a, b))
        sentences.append(Sentence(" ".join(flat[a:b] for a, b in words), words, [], set(), set()))
    out = []
    emitted = None
    for (kind, _, payload, _), k in zip(marks, where):
        if k is None:
            out.append(payload if kind == "chars" else payload.close if kind == "close" else payload.open)
            continue
        sentence = sentences[k]
        if kind != "chars":
            if id(payload) not in sentence.opens and id(payload) not in sentence.closes:
                sentence.nodes.append(payload)
            if kind != "close":
                sentence.opens.add(id(payload))
            if kind != "open":
                sentence.closes.add(id(payload))
        if k != emitted:
            out.append(sentence)
            emitted = k
    return out


def _protected(source: str, run: list[tuple[str, int, int, Token]], protect: Protection) -> list[tuple[str, int, int, Token]]:
    """The run with each protected span of its text (found in the text as read, `&lt;x/&gt;` as "<x/>", and kept as
    written: a character reference is never cut) made an item of its own ("span"), which `_marks` makes an atom: the
    model never reads it."""
    from nmtcli.documents.protect import find_spans

    out: list[tuple[str, int, int, Token]] = []
    for item in run:
        kind, start, end, token = item
        spans = []
        if kind == "text":
            text, starts, ends, at = [], [], [], 0  # the text as read; each character's source offsets [start, end)
            for raw, read in _decoded(source[start:end]):
                text.append(read)
                whole = len(raw) != len(read)
                starts += [at if whole else at + k for k in range(len(read))]
                ends += [at + len(raw) if whole else at + k + 1 for k in range(len(read))]
                at += len(raw)
            spans = [(starts[a], ends[b - 1]) for a, b in find_spans("".join(text), protect)]
        at = start
        for a, b in spans:
            if start + a > at:
                out.append(("text", at, start + a, token))
            out.append(("span", start + a, start + b, token))
            at = start + b
        if not spans:
            out.append(item)
        elif at < end:
            out.append(("text", at, end, token))
    return out


def _cut_at(marks: list[Mark], cuts: list[int]) -> list[Mark]:
    """The text marks cut where a sentence starts or ends inside them (a character reference stays whole)."""
    out: list[Mark] = []
    for mark in marks:
        kind, position, raw, text = mark
        end = position + len(text)
        inner = cuts[bisect.bisect_right(cuts, position):bisect.bisect_left(cuts, end)]
        if kind != "chars" or not inner or raw != text:
            out.append(mark)
            continue
        for a, b in zip([position, *inner], [*inner, end]):
            out.append(("chars", a, text[a - position:b - position], text[a - position:b - position]))
    return out


def _sentence_of_marks(marks: list[Mark], spans: list[tuple[int, int]]) -> list[int | None]:
    """The sentence each mark is part of, or None for the marks between sentences (kept as they are). Text
    belongs where its characters are, a start tag to the sentence of its first character, an end tag to that
    of its last; a mark of no width (a void element, a comment, an empty element) to a sentence it is
    strictly inside of, or whose marks are on both sides of it."""
    starts = [s for s, _ in spans]

    def sentence(position: int, at_end: bool = False) -> int | None:
        k = bisect.bisect_right(starts, position - 1 if at_end else position) - 1
        if k >= 0 and ((spans[k][0] < position <= spans[k][1]) if at_end else (spans[k][0] <= position < spans[k][1])):
            return k
        return None

    where: list[int | None] = []
    point = []  # marks of no width
    for m, (kind, position, payload, _) in enumerate(marks):
        if kind == "chars":
            where.append(sentence(position))
        elif kind == "verbatim" and payload.q > payload.p:  # the sentence its text overlaps (it may start with spaces)
            k = bisect.bisect_right(starts, payload.q - 1) - 1
            where.append(k if k >= 0 and spans[k][1] > payload.p else None)
        elif kind == "open" and payload.q > payload.p:
            where.append(sentence(position))
        elif kind == "close" and payload.q > payload.p:
            where.append(sentence(position, at_end=True))
        else:
            k = sentence(position)
            where.append(k if k is not None and spans[k][0] < position else None)
            point.append(m)
    no_width = set(point)
    sure = [m for m in range(len(marks)) if m not in no_width]
    for m in point:
        if where[m] is None:
            x = bisect.bisect_left(sure, m)
            before = where[sure[x - 1]] if x > 0 else None
            after = where[sure[x]] if x < len(sure) else None
            if before is not None and before == after:
                where[m] = before
    return where


def _merge_spans(spans: list[tuple[int, int]], keep_whole: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sentences joined where one of `keep_whole` (a kept inline element) would be cut between them."""
    out: list[tuple[int, int]] = []
    for s, e in spans:
        if out and any(p < out[-1][1] and q > s for p, q in keep_whole):
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def _marks(source: str, run: list[tuple[str, int, int, Token]]) -> list[Mark] | None:
    """The block's marks in source order, with their nodes; None where inline tags cross or nest deeper
    than MAX_INLINE_DEPTH. An end tag with no start tag in the block opened before it (it wraps everything so
    far); a start tag never closed in the block closes after it."""
    marks: list[Mark] = []
    stack: list[Node] = []
    roots: list[Node] = []
    position = 0
    for kind, start, end, token in run:
        raw = source[start:end]
        if kind == "text":
            for chunk, text in _decoded(raw):
                marks.append(("chars", position, chunk, text))
                position += len(text)
            continue
        parent = stack[-1] if stack else None
        if kind == "span":  # a protected span: kept as written, placed as a void element is
            node = Node("atom", position, position, open=raw, parent=parent, protects=html.unescape(raw))
            marks.append(("atom", position, node, ""))
        elif kind in ("atom", "verbatim"):
            text = _verbatim_text(source, start, end) if kind == "verbatim" else ""
            # a kept element that shows no text stands between words as a void element does
            node = Node(kind if text else "atom", position, position + len(text), open=raw, parent=parent, name=token.name)
            marks.append((kind, position, node, text))
            position += len(text)
        elif kind == "open":
            if len(stack) >= MAX_INLINE_DEPTH:
                return None
            node = Node("wrap", position, -1, open=raw, parent=parent, name=token.name)
            stack.append(node)
            marks.append(("open", position, node, ""))
        elif stack and stack[-1].name == token.name:
            node = stack.pop()
            node.q, node.close = position, raw
            marks.append(("close", position, node, ""))
            continue
        elif not stack:
            node = Node("wrap", 0, position, close=raw, name=token.name)
            for root in roots:
                root.parent = node
            roots.clear()
            marks.append(("close", position, node, ""))
        else:
            return None
        if node.parent is None:
            roots.append(node)
    for node in stack:
        node.q = position
    return marks


def _verbatim_text(source: str, start: int, end: int) -> str:
    """The text a kept inline element shows (its text tokens, entities read): the model reads it in its sentence."""
    tokens = tokenize(source[start:end])
    return "".join(html.unescape(source[t.start + start:t.end + start]) for k, t in enumerate(tokens)
                   if t.kind == "text" and not (k and tokens[k - 1].kind == "start" and tokens[k - 1].name in RAW_TEXT[:2]))


# --- a sentence's translation with its tags ----------------------------------------------------------


def _links(alignment: str | None, sources: int, targets: int) -> dict[int, list[int]]:
    """Source word -> its linked target words, from Pharaoh "i-j ..." (links outside the words left out)."""
    linked: dict[int, list[int]] = {}
    for link in (alignment or "").split():
        i, _, j = link.partition("-")
        if i.isdigit() and j.isdigit() and int(i) < sources and int(j) < targets:
            linked.setdefault(int(i), []).append(int(j))
    return linked


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def render_sentence(sentence: Sentence, translation: str, alignment: str | None, escape: Callable[[str], str] = _escape) -> str:
    """The translation (escaped) with the sentence's tags placed around the target words their words are
    linked to (module docstring); with no alignment, by the diagonal. The text of a protected span is taken out
    of the model's own words first (`without`), so that the span, placed as an atom, is there exactly once.
    `escape`: how the model's words are written (plain text: as they are)."""
    protected = [node.protects for node in sentence.nodes if node.protects]
    if protected:
        translation, alignment = without(translation, alignment, protected)
    words = translation.split()
    n = len(words)
    if not sentence.nodes:
        return escape(" ".join(words))
    linked = _links(alignment, len(sentence.words), n)
    if alignment is None and n:  # no attention to read (nothing in nmt does this): the diagonal
        linked = {}
        for j in range(n):
            linked.setdefault(min(len(sentence.words) - 1, j * len(sentence.words) // n), []).append(j)
    span, children = _place(sentence, n, linked)
    return _spaced(_punctuation_outside(_events(sentence, words, span, children, escape)))


def _place(sentence: Sentence, n: int, linked: dict[int, list[int]]) -> tuple[dict[int, tuple[int, int]], dict[int | None, list[Node]]]:
    """Each node's [lo, hi) over the n target words (lo == hi: it wraps none and stands before word lo), and
    each node's children (None: the sentence's top level) in the order they are written."""
    in_sentence = {id(node) for node in sentence.nodes}

    starts = [a for a, _ in sentence.words]
    ends = [b for _, b in sentence.words]
    # after[k]: where a node goes after the first k words (after the last target word of the nearest linked word
    # among them); from[k]: before the first target word of the nearest linked word from word k on (None: none).
    after: list[int | None] = [None]
    for i in range(len(starts)):
        after.append(max(linked[i]) + 1 if linked.get(i) else after[-1])
    from_: list[int | None] = [None]
    for i in reversed(range(len(starts))):
        from_.append(min(linked[i]) if linked.get(i) else from_[-1])
    from_.reverse()

    def covered(node: Node) -> range:  # the source words it covers: a < q and b > p
        return range(bisect.bisect_right(ends, node.p), bisect.bisect_left(starts, node.q))

    def targets(node: Node) -> list[int]:
        return [j for i in covered(node) for j in linked.get(i, ())]

    # wants[node]: for an element around words, the target word at their place by position (the diagonal), near which
    # it takes a word if it is left with none (its words linked to nothing, or its siblings took all of its own)
    wants: dict[int, int] = {}
    for node in sentence.nodes:
        words = covered(node)
        if node.kind == "wrap" and words and n:
            wants[id(node)] = min(n - 1, (words.start + words.stop) * n // (2 * len(starts)))

    def anchor(position: int) -> int:
        k = bisect.bisect_left(starts, position)  # the words that start before it
        return after[k] if after[k] is not None else from_[k] if from_[k] is not None else 0

    span: dict[int, tuple[int, int]] = {}
    for node in sentence.nodes:
        opens, closes = id(node) in sentence.opens, id(node) in sentence.closes
        found = targets(node) if node.kind != "atom" else []
        if node.kind == "atom" or (not found and opens and closes):
            at = anchor(node.p)
            span[id(node)] = (at, at)
        else:
            lo = min(found) if opens and found else 0 if not opens else anchor(node.p)
            hi = max(found) + 1 if closes and found else n if not closes else anchor(node.q)
            span[id(node)] = (lo, max(lo, hi))

    def parent(node: Node) -> Node | None:
        up = node.parent
        while up is not None and id(up) not in in_sentence:
            up = up.parent
        return up

    children: dict[int | None, list[Node]] = {}
    for node in sentence.nodes:  # in source order: parents before their children
        up = parent(node)
        children.setdefault(None if up is None else id(up), []).append(node)

    def kept(kids: list[Node]) -> set[int]:  # the target words a kept element among them (or inside one) stands for
        words: set[int] = set()
        for kid in kids:
            lo, hi = span[id(kid)]
            inside = [kid]
            while inside:
                node = inside.pop()
                if node.kind == "verbatim":
                    a, b = span[id(node)]
                    words.update(range(max(a, lo), min(b, hi)))
                inside.extend(children.get(id(node), ()))
        return words

    def order(node: Node) -> tuple[int, bool]:  # siblings by their first word, one that wraps none first
        lo, hi = span[id(node)]
        return lo, hi > lo

    # Top-down: clip children to their parent, make siblings follow each other, and give words to those left with none.
    todo: list[tuple[int | None, int, int]] = [(None, 0, n)]
    while todo:
        key, low, high = todo.pop()
        kids = children.get(key, [])
        for node in kids:
            lo, hi = span[id(node)]
            lo, hi = min(max(lo, low), high), min(max(hi, low), high)
            span[id(node)] = (lo, hi)
        kids.sort(key=order)
        cursor = low
        for node in kids:
            lo, hi = span[id(node)]
            if lo < cursor:
                lo, hi = cursor, max(hi, cursor)
            span[id(node)] = (lo, hi)
            cursor = max(cursor, hi)
        if high > low and any(id(node) in wants and span[id(node)][0] == span[id(node)][1] for node in kids):
            _give_words(sentence, kids, span, wants, low, high, kept(kids))
            kids.sort(key=order)
        todo.extend((id(node), *span[id(node)]) for node in kids)
    return span, children


def _give_words(sentence: Sentence, kids: list[Node], span: dict[int, tuple[int, int]], wants: dict[int, int],
                low: int, high: int, kept: set[int]) -> None:
    """Siblings laid out in [low, high) (spans that do not overlap): each one in `wants` that wraps no word takes the
    word no sibling wraps nearest to its wanted one, else the nearest end word of an element among them that wraps more
    than one: its first word if its start tag is in this sentence, its last if its end tag is (a tag in another sentence
    cannot move). An element whose start tag is in an earlier sentence takes only a word before every
    sibling's words, one whose end tag is in a later sentence only a word after them: their tags would cross. A word a
    kept element (`<code>`) stands for is never taken: its source is written in place of it. Where no word is left
    to take, the element stays empty."""
    taken = {x for node in kids for x in range(*span[id(node)])} | kept
    free = [x for x in range(low, high) if x not in taken]
    wide = [node for node in kids if node.kind == "wrap" and span[id(node)][1] - span[id(node)][0] > 1]
    for node in kids:
        lo, hi = span[id(node)]
        if lo < hi or id(node) not in wants:
            continue
        want = min(max(wants[id(node)], low), high - 1)
        # the words it may take: [first, last]. A free word is in no sibling's span, and a sibling whose end word it takes
        # keeps its other words after (before) it: `last` may be a sibling's first word, `first` a sibling's last.
        first, last = low, high - 1
        if id(node) not in sentence.opens or id(node) not in sentence.closes:
            spans = [span[id(other)] for other in kids if other is not node and span[id(other)][0] < span[id(other)][1]]
            if id(node) not in sentence.opens:
                last = min((a for a, _ in spans), default=last)
            if id(node) not in sentence.closes:
                first = max((b - 1 for _, b in spans), default=first)
        i, j = bisect.bisect_left(free, first), bisect.bisect_right(free, last)
        ends = [] if i < j else [
            (abs(x - want), x, other) for other in wide
            for x, tag_here in ((span[id(other)][0], id(other) in sentence.opens), (span[id(other)][1] - 1, id(other) in sentence.closes))
            if tag_here and first <= x <= last and x not in kept]
        if i < j:
            k = bisect.bisect_left(free, want, i, j)
            x = min(free[max(k - 1, i):min(k + 1, j)], key=lambda x: (abs(x - want), x))
            free.remove(x)
        elif ends:
            _, x, other = min(ends, key=lambda end: end[:2])
            a, b = span[id(other)]
            span[id(other)] = (a + 1, b) if x == a else (a, b - 1)
            if b - a == 2:
                wide.remove(other)
        else:
            continue
        span[id(node)] = (x, x + 1)


def without(translation: str, alignment: str | None, texts: Sequence[str]) -> tuple[str, str | None]:
    """The translation's words with every occurrence of `texts` (protected spans, which are put back on their own)
    cut out of them, words left empty dropped, and the Pharaoh alignment's target words numbered again."""
    words = translation.split()
    texts = [t for t in texts if t.strip()]
    if not any(t in " ".join(words) for t in texts):
        return " ".join(words), alignment
    while True:  # the first occurrence at a time: a cut can join the two sides into another one
        live = [i for i, w in enumerate(words) if w]
        joined = " ".join(words[i] for i in live)
        hits = [(joined.find(t), t) for t in texts if t in joined]
        if not hits:
            break
        at, text = min(hits)
        removed, position = 0, 0
        for i in live:
            word = words[i]
            a, b = max(at, position) - position, min(at + len(text), position + len(word)) - position
            if a < b:
                words[i] = word[:a] + word[b:]
                removed += b - a
            position += len(word) + 1
        if not removed:  # only the spaces between words: nothing of the model's to cut
            break
    renumbered, kept = {}, []
    for j, word in enumerate(words):
        if word:
            renumbered[j] = len(kept)
            kept.append(word)
    if alignment is not None:
        links = (link.partition("-") for link in alignment.split())
        alignment = " ".join(f"{i}-{renumbered[int(j)]}" for i, _, j in links if j.isdigit() and int(j) in renumbered)
    return " ".join(kept), alignment


def _events(sentence: Sentence, words: list[str], span: dict[int, tuple[int, int]],
            children: dict[int | None, list[Node]], escape: Callable[[str], str] = _escape) -> list[tuple[str, object, object]]:
    """The sentence written out as (kind, text or node, node id or ids) events: word, open, close, atom, and
    the head and tail punctuation cut off a word to stand outside the tags around it."""
    n = len(words)
    heads: dict[int, tuple[str, set[int]]] = {}  # target word -> punctuation to cut off its start, for these nodes
    tails: dict[int, tuple[str, set[int]]] = {}
    for node in sentence.nodes:
        a, b = span[id(node)]
        head, tail = node.edges
        if head and a < b and (node.kind == "verbatim" or id(node) in sentence.opens):
            _cut(heads, a, head, id(node), words, str.startswith)
        if tail and a < b and (node.kind == "verbatim" or id(node) in sentence.closes):
            _cut(tails, b - 1, tail, id(node), words, str.endswith)

    events: list[tuple[str, object, object]] = []  # (kind, text or node, node id or ids): word, open, close, atom, head, tail
    stack: list[tuple[int | None, int, int, int]] = [(None, 0, n, 0)]  # (node id, lo, hi, next child)
    position = [0]

    def word(x: int) -> None:
        text, head, tail = words[x], heads.get(x), tails.get(x)
        if head:
            text = text[len(head[0]):]
            events.append(("head", escape(head[0]), head[1]))
        core = text[:len(text) - len(tail[0])] if tail else text
        events.append(("word", escape(core), None))
        if tail:
            events.append(("tail", escape(tail[0]), tail[1]))

    def words_until(end: int) -> None:
        while position[0] < end:
            word(position[0])
            position[0] += 1

    by_id = {id(node): node for node in sentence.nodes}
    pieces = sentence.text.split(" ")
    ending = {b: i for i, (_, b) in enumerate(sentence.words)}
    starting = {a: i for i, (a, _) in enumerate(sentence.words)}

    def stuck(i: int | None, x: int) -> bool:
        """Source word i is stuck to a kept element (no space between) and target word x is that word as it was."""
        return i is not None and 0 <= x < n and words[x] == pieces[i]

    while stack:
        key, lo, hi, k = stack.pop()
        kids = children.get(key, [])
        if k < len(kids):
            stack.append((key, lo, hi, k + 1))
            node = kids[k]
            a, b = span[id(node)]
            words_until(a)
            if node.kind == "atom":
                events.append(("atom", node, None))
            elif node.kind == "verbatim":  # its source in place of its words (but the punctuation around it)
                position[0] = max(position[0], b)
                if a in heads and id(node) in heads[a][1]:
                    events.append(("head", escape(heads[a][0]), set()))
                if stuck(ending.get(node.p), a - 1):  # "+<kbd>C</kbd>": as stuck in the translation
                    events.append(("glue", "", None))
                events.append(("word", node.open, None))
                if b - 1 in tails and id(node) in tails[b - 1][1]:
                    events.append(("tail", escape(tails[b - 1][0]), set()))
                if stuck(starting.get(node.q), b):
                    events.append(("glue", "", None))
            else:
                if id(node) in sentence.opens:
                    events.append(("open", node.open, id(node)))
                stack.append((id(node), a, b, 0))
            continue
        words_until(hi)
        if key is not None and key in sentence.closes:
            events.append(("close", by_id[key].close, key))
    return events


def _cut(cuts: dict[int, tuple[str, set[int]]], x: int, edge: str, node: int, words: list[str], has) -> None:
    """Word x's `edge` (its leading or trailing punctuation) is to go outside `node`'s tags, where the word has it."""
    if x in cuts and cuts[x][0] == edge:
        cuts[x][1].add(node)
    elif x not in cuts and has(words[x], edge) and len(words[x]) > len(edge):
        cuts[x] = (edge, {node})


def _punctuation_outside(events: list[tuple[str, object, object]]) -> list[tuple[str, object, object]]:
    """A word's trailing punctuation after the end tags of the elements it was outside of in the source, its
    leading punctuation before their start tags."""
    for i in range(len(events)):
        if events[i][0] == "tail":
            j = i
            while j + 1 < len(events) and events[j + 1][0] == "close" and events[j + 1][2] in events[j][2]:
                events[j], events[j + 1] = events[j + 1], events[j]
                j += 1
    for i in range(len(events) - 1, -1, -1):
        if events[i][0] == "head":
            j = i
            while j > 0 and events[j - 1][0] == "open" and events[j - 1][2] in events[j][2]:
                events[j], events[j - 1] = events[j - 1], events[j]
                j -= 1
    return events


def _spaced(events: list[tuple[str, object, object]]) -> str:
    """The events as text: one space between words, before the start tags (and punctuation) in front of a word;
    void elements and comments between two words keep the source's whitespace on each side of them."""
    out: list[tuple[str, object]] = []
    seen_word = glued = False
    for kind, value, _ in events:
        if kind == "glue":  # no space before the next word
            glued = True
            continue
        if kind == "word":
            if seen_word and not glued:
                at = len(out)
                while at > 0 and out[at - 1][0] in ("open", "head"):
                    at -= 1
                first = at
                while first > 0 and out[first - 1][0] in ("atom", "atom space"):
                    first -= 1
                before, after = (out[first][1].spaces[0], out[at - 1][1].spaces[1]) if first < at else (False, True)
                if first < at and out[at - 1][1].protects and _ALNUM.match(value):  # glued to punctuation only, as in the source
                    after = True
                if after or not before:
                    out.insert(at, ("space", " "))
                if before:
                    out.insert(first, ("space", " "))
            seen_word, glued = True, False
        if kind == "atom" and out and out[-1][0] == "atom" and out[-1][1].p != value.p:  # apart in the source
            out.append(("atom space", " "))
        out.append((kind, value))
    last = max((k for k, (kind, _) in enumerate(out) if kind == "word"), default=None)
    if last is not None:  # atoms after the last word (placed there by the alignment): the first keeps its space before
        for k in range(last + 1, len(out)):
            if out[k][0] == "atom":
                if out[k][1].spaces[0]:
                    out.insert(k, ("space", " "))
                break
    return "".join(value.open if kind == "atom" else value for kind, value in out)


def translate_html(source: str, language: str, translate: Callable[[list[str]], list[tuple[str, str | None]]]) -> str:
    """`source` with its text translated by `translate` (sentences -> (translation, word alignment) each)."""
    document = parse(source, language)
    return document.render(translate(document.segments) if document.segments else [])
