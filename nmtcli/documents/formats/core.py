"""What a document is: blocks of text with inline elements, among parts kept byte for byte.

Every format module reads its file into a `Document`: `parts` in file order, each either kept text (the
file's own characters: headers, timings, code, markup, whitespace) or a `Block`, a run of text the reader
sees as one (a paragraph, a cue, a gettext message, an XLIFF source). A block's `tokens` are its text and its
inline elements as `Tag`s (bold, a link, an XLIFF `<g>` or `<x/>`), each tag holding the source it stands for,
so the format writes it back unchanged. Translating a document (`translate_document`) fills each block's
`translation`; `Document.render` writes the parts again, the kept ones as they were.

How a block is translated, through the Python API only (nmtcli/api.py, passed in as `translator`):
- text alone: `Translator.translate(texts, split_sentences=True)`: cut into sentences, each translated,
  joined with the text's own whitespace;
- text with inline elements: as an HTML fragment through `Translator.translate_html`, each paired element an
  inline `<span>` and each standalone one a void `<img>`, numbered, so the alignment places them as it places
  HTML's inline tags (documents/markup.py); the spans and images are then read back into the block's own tags.
Protected spans (placeholders, URLs: documents/protect.py) are kept by both calls (`protect`, `protect_regex`).

A format that must share a translation among several places (a sentence that runs over several subtitle
cues, a paragraph over several Markdown lines) cuts it with `split_by_length`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, Union

from nmtcli.errors import NmtError


@dataclass(frozen=True)
class Tag:
    """An inline element's start ("open"), end ("close") or the whole of a standalone one ("void"; "break": a line
    break, which ends the sentence before it as HTML's `<br>` does), as written in the file (`markup`); an open and
    its close share `id`, unique within the block."""

    kind: Literal["open", "close", "void", "break"]
    markup: str
    id: int


Token = Union[str, Tag]  # text (as the reader reads it: unescaped) or an inline element's tag


def plain(tokens: Sequence[Token]) -> str:
    """Tokens written as they are: text as it is, tags as their markup (a format with no escaping)."""
    return "".join(t if isinstance(t, str) else t.markup for t in tokens)


def text_of(tokens: Sequence[Token]) -> str:
    return "".join(t for t in tokens if isinstance(t, str))


_LETTER = re.compile(r"[^\W_]")


@dataclass
class Block:
    """A run of text to translate with its inline elements; `write` is how the format writes tokens (escaping)."""

    tokens: list[Token]
    write: Callable[[Sequence[Token]], str] = plain
    translation: list[Token] | None = None
    html: bool = False  # its one token is an HTML document, translated whole by Translator.translate_html

    @property
    def characters(self) -> int:
        """The characters of text it holds (an HTML document's: outside its tags): what a read's `chars` limit counts."""
        return len(re.sub(r"<[^>]*>", "", text_of(self.tokens))) if self.html else len(text_of(self.tokens))

    @property
    def translatable(self) -> bool:
        """Text with a letter or digit in it: a block of spaces, numbers-free punctuation or tags alone is kept."""
        return bool(_LETTER.search(text_of(self.tokens)))

    def render(self) -> str:
        return self.write(self.translation if self.translation is not None else self.tokens)


class Part(Protocol):
    def render(self) -> str: ...


@dataclass
class Document:
    """A file as parts in order: kept text or something rendered (a Block, or a format's own part that reads
    the blocks' translations); `blocks` are what is translated (by default the Blocks among `parts`)."""

    parts: list[str | Part]
    blocks: list[Block] = field(default_factory=list)

    def __post_init__(self):
        if not self.blocks:
            self.blocks = [p for p in self.parts if isinstance(p, Block)]

    def render(self) -> str:
        return "".join(p if isinstance(p, str) else p.render() for p in self.parts)


class Translator(Protocol):
    """The two calls of the Python API (nmtcli.api.Translator) a document is translated with."""

    def translate(self, texts: Iterable[str], **options) -> list: ...

    def translate_html(self, document: str, **options) -> str: ...


Progress = Callable[[int, int], None]  # (blocks done, blocks in all)

# Blocks per call: big enough for the engine to batch their sentences together, small enough that a long
# file's progress moves (and its memory stays bounded by a chunk's HTML).
CHUNK = 64


def translate_document(translator: Translator, document: Document, options: dict | None = None,
                       progress: Progress | None = None) -> None:
    """Fill the translation of each translatable block of `document`, a chunk of blocks per call; `options`: the
    search and protection keywords both API calls take (beam, alpha, length_penalty, max_len_a, max_len_b,
    protect, protect_regex)."""
    options = options or {}
    blocks = [b for b in document.blocks if b.translatable]
    if progress:
        progress(0, len(blocks))
    for start in range(0, len(blocks), CHUNK):
        chunk = blocks[start:start + CHUNK]
        for block in chunk:
            if block.html:
                block.translation = [translator.translate_html(text_of(block.tokens), **options)]
        chunk = [b for b in chunk if not b.html]
        plain_blocks = [b for b in chunk if not any(isinstance(t, Tag) for t in b.tokens)]
        if plain_blocks:
            results = translator.translate([text_of(b.tokens) for b in plain_blocks], split_sentences=True, **options)
            for block, result in zip(plain_blocks, results):
                block.translation = [result.text]
        tagged = [b for b in chunk if any(isinstance(t, Tag) for t in b.tokens)]
        if tagged:
            fragment = "".join(f'<div data-b="{n}">{as_html(b.tokens)}</div>\n' for n, b in enumerate(tagged))
            for block, tokens in zip(tagged, from_html(translator.translate_html(fragment, **options), len(tagged))):
                block.translation = complete(tokens, block.tokens)
        if progress:
            progress(min(start + CHUNK, len(blocks)), len(blocks))


# --- a block as an HTML fragment and back ----------------------------------------------------------


def as_html(tokens: Sequence[Token]) -> str:
    """Each paired element a numbered `<span>`, each standalone one a numbered `<img>` (inline: markup.py's
    INLINE and VOID), each line break a numbered `<br>` (the text on each side translated apart), the text escaped."""
    out = []
    for t in tokens:
        if isinstance(t, str):
            out.append(html.escape(t, quote=False))
        elif t.kind == "open":
            out.append(f'<span data-i="{t.id}">')
        elif t.kind == "close":
            out.append("</span>")
        elif t.kind == "break":
            out.append(f'<br data-i="{t.id}">')
        else:
            out.append(f'<img data-i="{t.id}">')
    return "".join(out)


# Only the tags as_html wrote: translated text has its <, > and & escaped, so any other "<" is text.
_OURS = re.compile(r'<div data-b="(\d+)">|</div>|<span data-i="(\d+)">|</span>|<img data-i="(\d+)">|<br data-i="(\d+)">')


def from_html(translated: str, count: int) -> list[list[Token]]:
    """The tokens of each of `count` blocks in translate_html's answer to the fragment: tags by number (an end
    tag closes the innermost open span, as HTML nests them), text unescaped."""
    blocks: list[list[Token]] = [[] for _ in range(count)]
    current: list[Token] | None = None
    opened: list[int] = []
    position = 0
    for found in _OURS.finditer(translated):
        if current is not None and found.start() > position:
            current.append(html.unescape(translated[position:found.start()]))
        position = found.end()
        tag = found[0]
        if found[1] is not None:
            current, opened = blocks[int(found[1])], []
        elif tag == "</div>":
            current = None
        elif current is None:
            continue
        elif found[2] is not None:
            opened.append(int(found[2]))
            current.append(Tag("open", "", int(found[2])))
        elif tag == "</span>":
            if opened:
                current.append(Tag("close", "", opened.pop()))
        elif found[3] is not None:
            current.append(Tag("void", "", int(found[3])))
        else:
            current.append(Tag("break", "", int(found[4])))
    return blocks


def complete(translated: list[Token], source: Sequence[Token]) -> list[Token]:
    """The translated tokens with each tag's markup from the source; a tag the answer lost (which markup.py
    never does) goes at the end, so that every element is written once."""
    markup = {(t.kind, t.id): t.markup for t in source if isinstance(t, Tag)}
    out: list[Token] = []
    seen = set()
    for t in translated:
        if isinstance(t, Tag):
            if (t.kind, t.id) in markup and (t.kind, t.id) not in seen:
                seen.add((t.kind, t.id))
                out.append(Tag(t.kind, markup[t.kind, t.id], t.id))
        elif t:
            out.append(t)
    for t in source:
        if isinstance(t, Tag) and (t.kind, t.id) not in seen:
            out.append(t)
    return out


# --- one translation shared among several places, by length ------------------------------------------


def words_of(tokens: Sequence[Token]) -> list[list[Token]]:
    """The tokens cut at whitespace into words, each with its tags: a start tag or a standalone one goes with the
    word after it, an end tag with the word before it."""
    words: list[list[Token]] = []
    pending: list[Token] = []  # tags waiting for the next word
    glued = False  # the last word may still grow (no whitespace since)
    for t in tokens:
        if isinstance(t, Tag):
            if t.kind == "close" and words and not pending:
                words[-1].append(t)
            else:
                pending.append(t)
            continue
        for piece in re.split(r"(\s+)", t):
            if not piece:
                continue
            if piece.isspace():
                glued = False
            elif glued:  # a tag inside a word ("wo<b>rd</b>") stays inside it
                words[-1].extend(pending + [piece])
                pending = []
            else:
                words.append(pending + [piece])
                pending, glued = [], True
    if pending:
        if words:
            words[-1].extend(pending)
        else:
            words.append(pending)
    return words


def split_by_length(tokens: Sequence[Token], weights: Sequence[float], reopen: bool = True) -> list[list[Token]]:
    """`tokens` shared among len(weights) places, each getting whole words in order, as many characters as its
    weight's share as nearly as can be (every place at least a word while there are words enough). Words are
    joined by single spaces. With `reopen`, an element open at a place's end is closed there and opened again at
    the next place's start (subtitle styling is per cue), so that each place is well nested on its own."""
    n = len(weights)
    words = words_of(tokens)
    if n <= 1:
        return [_joined(words)] if n else []
    lengths = [len(text_of(w)) + 1 for w in words]
    total, weight = sum(lengths) or 1, sum(weights) or 1
    cuts, done, at = [], 0, 0  # cuts[j]: the first word of place j + 1
    wanted = 0.0
    if len(words) < n:  # a word a place, from the first, as long as there are words
        cuts = [min(j + 1, len(words)) for j in range(n - 1)]
    for j in range(n - 1 if len(words) >= n else 0):
        wanted += weights[j] / weight * total
        # each place a word at least, and a word left for each place after it
        best = min(range(at + 1, len(words) - (n - 1 - j) + 1), key=lambda k: abs(done + sum(lengths[at:k]) - wanted))
        done += sum(lengths[at:best])
        cuts.append(best)
        at = best
    bounds = [0, *cuts, len(words)]
    places = [_joined(words[bounds[j]:bounds[j + 1]]) for j in range(n)]
    return _reopened(places) if reopen else places


def _joined(words: list[list[Token]]) -> list[Token]:
    out: list[Token] = []
    for i, word in enumerate(words):
        if i:
            out.append(" ")
        out.extend(word)
    return out


def _reopened(places: list[list[Token]]) -> list[list[Token]]:
    """Each place closes the elements still open at its end and the next opens them again."""
    carried: list[Tag] = []
    out = []
    for place in places:
        tokens: list[Token] = list(carried)
        stack = list(carried)
        for t in place:
            tokens.append(t)
            if isinstance(t, Tag) and t.kind == "open":
                stack.append(t)
            elif isinstance(t, Tag) and t.kind == "close" and stack:
                stack.pop()
        closes = {t.id: t for p in places for t in p if isinstance(t, Tag) and t.kind == "close"}
        tokens += [closes[t.id] for t in reversed(stack) if t.id in closes]
        carried = [t for t in stack if t.id in closes]
        out.append(tokens)
    return out


def decoded(data: bytes, what: str) -> str:
    """A file's bytes as text: UTF-8 (a byte-order mark kept as the text's first character, written back)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NmtError(f"the {what} is not UTF-8 text (byte {e.start}: {data[e.start:e.start + 1]!r})",
                       "save it as UTF-8, or check that it is the format its extension says", exit_code=2) from None
