"""HTML in, HTML out: the text of a page translated a sentence at a time, every byte of its markup kept.

What is translated: the text of each *block*, whatever lies between two tags that are not inline
(`<p>`, `<li>`, `<td>`, `<div>`, `<h1>`, `<br>`, ...), taken as a whole: its inline elements (INLINE:
`<b>`, `<i>`, `<em>`, `<a>`, `<span>`, ...) do not cut it, and it is split into sentences with
`documents/sentences.py` (a line break in the source is a space here, as a browser shows it). Each
sentence goes to the model as its words joined by single spaces.

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

The tokens are documents/html_tokens.py's; where the inline tags go in a translation, documents/placement.py's.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nmtcli.documents.html_tokens import (  # noqa: F401 - INLINE, tokenize: also imported from here
    ALNUM, BREAKS, CHARREF, INLINE, INLINE_VERBATIM, LINE_BREAKS, MAX_INLINE_DEPTH, RAW_TEXT, VERBATIM, VOID, WORD, Token, inline,
    element_end, opened, untranslated, tokenize)
from nmtcli.documents.placement import Node, Sentence, render_sentence
from nmtcli.documents.sentences import joined_over, sentence_spans

if TYPE_CHECKING:
    from nmtcli.documents.protect import Protection
    from nmtcli.inference.results import Translation


@dataclass
class Document:
    """Parsed HTML: `sentences` to translate, and `render` to put their translations back."""

    parts: list[str | Sentence]  # kept markup and text, and the sentences with their tags

    @property
    def sentence_parts(self) -> list[Sentence]:
        return [part for part in self.parts if isinstance(part, Sentence)]

    @property
    def sentences(self) -> list[str]:
        """What the model translates, one sentence each."""
        return [s.text for s in self.sentence_parts]

    def render(self, translations: Sequence[tuple[str, str | None]]) -> str:
        """The document with each sentence replaced by its (translation, Pharaoh word alignment) (None: no
        alignment, tags placed at the translation's edges)."""
        if len(translations) != len(self.sentence_parts):
            raise ValueError(f"{len(translations)} translations for {len(self.sentence_parts)} sentences")
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
            opened(stack, counts, t)
        if t.kind == "text":
            run.append(("text", t.start, t.end, t))
        elif t.kind == "other":
            run.append(("atom", t.start, t.end, t))
        elif t.kind == "start" and (t.name in VERBATIM or untranslated(t)) and not t.closed and t.name not in VOID:
            j = element_end(tokens, i, counts)
            end = tokens[j - 1].end
            opened(stack, counts, Token("end", 0, 0, t.name))
            if t.name in INLINE_VERBATIM or inline(t.name):
                run.append(("verbatim", t.start, end, t))
            else:
                flush()
                parts.append(source[t.start:end])
            i = j
            continue
        elif t.kind == "start" and (t.name in VOID or t.closed) and t.name not in BREAKS:
            run.append(("atom", t.start, t.end, t))
        elif t.kind == "start" and inline(t.name):
            run.append(("open", t.start, t.end, t))
        elif t.kind == "end" and inline(t.name):
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
    for m in CHARREF.finditer(raw):
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
    if not ALNUM.search(text):
        return [source[run[0][1]:run[-1][2]]]
    flat = text.translate(LINE_BREAKS)
    for kind, position, node, _ in marks:
        if kind != "chars" and node.kind == "atom":
            node.spaces = (position > 0 and flat[position - 1].isspace(), position < len(flat) and flat[position].isspace())
        elif kind in ("open", "verbatim") and node.q > node.p:
            before = re.search(r"\S+$", flat[max(0, node.p - 64):node.p])
            after = re.match(r"\S+", flat[node.q:node.q + 64])
            head, tail = before.group() if before else "", after.group() if after else ""
            node.edges = tuple(edge if edge and not ALNUM.search(edge) else "" for edge in (head, tail))
    spans = [s for s in sentence_spans(flat, language) if ALNUM.search(flat[s[0]:s[1]])]
    spans = joined_over(spans, [(n.p, n.q) for kind, _, n, _ in marks if kind == "verbatim" and n.q > n.p])
    marks = _cut_at(marks, sorted({x for span in spans for x in span}))
    where = _sentence_of_marks(marks, spans)
    sentences = []
    # A kept element's words are cut off the text stuck to it ("<kbd>Ctrl</kbd>+<kbd>C</kbd>": three words): its
    # source replaces the target words linked to its own words, never the translation of the text beside it.
    kept = sorted({x for kind, _, n, _ in marks if kind == "verbatim" and n.q > n.p for x in (n.p, n.q)})
    for s, e in spans:
        words = []
        for w in WORD.finditer(flat[s:e]):
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


def translate_html(source: str, language: str, translate: Callable[[list[str]], list[tuple[str, str | None]]]) -> str:
    """`source` with its text translated by `translate` (sentences -> (translation, word alignment) each)."""
    document = parse(source, language)
    return document.render(translate(document.sentences) if document.sentences else [])
