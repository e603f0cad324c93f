"""Protected spans: placeholders, URLs, e-mail addresses and what a user marks come out byte for byte (issue 35).

The built-in kinds (KINDS, on unless `--no-protect`) and any `--protect REGEX` find spans in a text: leftmost
first, the longest of those that start there, never two that overlap. A span is taken out of what the model
reads ("by nothing", not a placeholder) and put back into the translation exactly once, where the word
alignment puts it: it is an atom, placed as HTML's void elements are (documents/markup.py): after the target
words of the nearest source word before it (inference/alignment.py's COVERING links every source word). Spans
before the text's first word or after its last stay at its start or end, with the whitespace between.

Why nothing rather than a placeholder token the model copies: a model trained on plain text copies no
placeholder reliably (it translates, drops or repeats it), and a placeholder that comes back twice, or half,
needs the alignment anyway; with nothing in its place the model's words are its translation of the rest, the
alignment places the span, and the guarantee does not depend on what the model writes. The cost: the model
does not see that a word stood there ("Deleted %s files" is read as "Deleted files"), and a span inside a word
("({0})") goes after that word's translation. Whatever the model writes, a protected span's text is cut out
of its own words (markup.without), so each span is in the output exactly as many times as in the source.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from nmtcli.documents.html_tokens import WORD
from nmtcli.documents.placement import Node, Sentence, render_sentence, without
from nmtcli.errors import NmtError
from nmtcli.inference.results import Translation, untranslated

_PAIRED = r"|\([^\s<>\"()]*\)|\{[^\s<>\"{}]*\}|\[[^\s<>\"\[\]]*\])"
_URL_PART = r"(?:[^\s<>\"()\[\]{}]" + _PAIRED
_URL_END = r"(?:[^\s<>\"'.,;:!?()\[\]{}]" + _PAIRED

# The built-in kinds: (name, regex). Each is matched on its own; overlaps go to the leftmost, then the longest.
KINDS: list[tuple[str, str]] = [
    # brackets inside a URL only in pairs (Foo_(bar), /{id}); it does not end with the sentence's punctuation
    ("url", r"\b(?:(?:https?|ftp)://|www\.)" + _URL_PART + "*" + _URL_END),
    ("email", r"\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+"),
    ("mustache", r"\{\{[^{}\n]{0,200}\}\}"),  # {{name}}, {{ user.name }}
    ("brace", r"\{[\w.:!,-]{0,64}\}"),  # {0}, {name}, {0:.2f}
    ("dollar", r"\$\{[^{}\s]{1,64}\}"),  # ${var}
    # %s, %d, %(name)s, %1$s, %.2f; not "50% off" nor German "100%ige" (a % right after a digit is a percent sign)
    ("printf", r"(?<!\d)%(?:\(\w+\))?(?:\d+\$)?[-+#0]?\d*(?:\.\d+)?[sdifxXcu]"),
    ("tag", r"</?[A-Za-z][\w:.-]*(?:\s[^<>]*)?/?>"),  # <x/>, <g id="1">, </g>: XLIFF's inline codes
]


@dataclass(frozen=True)
class Protection:
    """What is protected: the built-in kinds (or not) and the user's regexes, compiled."""

    patterns: tuple[re.Pattern, ...]

    @classmethod
    def of(cls, builtin: bool = True, regexes: Iterable[str] = (), flag: str = "--protect") -> Protection | None:
        """The protection asked for, or None for none; an invalid regex: NmtError naming it (exit 2)."""
        patterns = [re.compile(regex) for _, regex in KINDS] if builtin else []
        for regex in regexes:
            if not isinstance(regex, str):
                raise TypeError(f"a protected regex must be a str, not {type(regex).__name__}")
            try:
                patterns.append(re.compile(regex))
            except re.error as e:
                raise NmtError(f"{flag} {regex!r} is not a valid regular expression: {e}",
                               "write it in Python's re syntax, quoted for the shell", exit_code=2) from None
        return cls(tuple(patterns)) if patterns else None


def find_spans(text: str, protection: Protection | None) -> list[tuple[int, int]]:
    """[start, end) of each protected span of `text`, in order: leftmost first, the longest at a start, none
    overlapping; whitespace at a match's ends is left out of it, and a match of only whitespace is none."""
    if protection is None:
        return []
    found = []
    for pattern in protection.patterns:
        for m in pattern.finditer(text):
            a, b = m.span()
            while a < b and text[a].isspace():
                a += 1
            while b > a and text[b - 1].isspace():
                b -= 1
            if a < b:
                found.append((a, -b))
    spans: list[tuple[int, int]] = []
    for a, negative_b in sorted(found):
        if not spans or a >= spans[-1][1]:
            spans.append((a, -negative_b))
    return spans


@dataclass
class Protected:
    """A text with its protected spans taken out: `text` is what the model reads (its words, single spaces),
    `restore` puts the spans back into a translation of it."""

    original: str
    text: str
    head: str  # the original before its first word (spans and whitespace; the text's own leading whitespace left out)
    tail: str
    sentence: Sentence | None  # the words and the spans between them (markup's atoms), None without such spans
    spans: list[str]  # the texts of all its protected spans (head, between the words, tail), in order

    @classmethod
    def of(cls, original: str, protection: Protection | None) -> Protected:
        spans = find_spans(original, protection)
        if not spans:
            return cls(original, original, "", "", None, [])
        # T: the original without its spans; where[t] the original offset of T's character t
        pieces, where, at = [], [], 0
        for a, b in [*spans, (len(original), len(original))]:
            pieces.append(original[at:a])
            where.extend(range(at, a))
            at = b
        flat = "".join(pieces)
        words = [(m.start(), m.end()) for m in WORD.finditer(flat)]
        if not words:
            return cls(original, "", original.strip(), "", None, [original[a:b] for a, b in spans])
        first, last = where[words[0][0]], where[words[-1][1] - 1] + 1
        starts = [0]
        for piece in pieces[:-1]:
            starts.append(starts[-1] + len(piece))  # each span's place in T
        atoms = []
        for (a, b), p in zip(spans, starts[1:]):
            if first <= a and b <= last:
                spaces = (p > 0 and flat[p - 1].isspace(), p < len(flat) and flat[p].isspace())
                atoms.append(Node("atom", p, p, open=original[a:b], spaces=spaces, protects=original[a:b]))
        text = " ".join(flat[a:b] for a, b in words)
        ids = {id(node) for node in atoms}
        sentence = Sentence(text, words, atoms, ids, set(ids)) if atoms else None
        return cls(original, text, original[:first].lstrip(), original[last:].rstrip(), sentence, [original[a:b] for a, b in spans])

    @property
    def changed(self) -> bool:
        """Whether the model reads something else than the original."""
        return self.text != self.original

    @property
    def needs_alignment(self) -> bool:
        """Whether spans lie between its words: they are placed by the word alignment (COVERING)."""
        return self.sentence is not None

    def restore_text(self, translation: str, alignment: str | None) -> str:
        """A translation of `text` with the spans back: those between the words placed by `alignment` (None: by
        position), the head and tail around it; every span's text cut out of the model's own words first."""
        if not self.changed:
            return translation
        translation, alignment = without(translation, alignment, self.spans)
        if self.sentence is not None:
            middle = render_sentence(self.sentence, translation, alignment, escape=lambda text: text)
        else:
            middle = translation
        if not middle:
            return " ".join(part.strip() for part in (self.head, self.tail) if part.strip())
        return self.head + middle + self.tail

    def restore(self, hyps: Sequence[Translation], keep_alignment: bool) -> list[Translation]:
        """A text's n-best list with the spans back in each; a text that is only spans: itself (log-probability 0:
        nothing for the model to choose). `keep_alignment`: the alignment was asked for (it stays over the words the
        model read and wrote, docs/translating.md); else the one made for placing the spans is dropped."""
        if not self.changed:
            return list(hyps)
        if not self.text:
            return [untranslated(keep_alignment, self.original.strip(), 0.0)]
        return [Translation(self.restore_text(h.text, h.alignment), h.score, h.log_prob, h.tokens,
                            h.alignment if keep_alignment else None, h.confidence) for h in hyps]


def protected_nbest(texts: Iterator[str], protection: Protection | None, keep_alignment: bool,
                    translate: Callable[[Iterator[str], Callable[[int], bool]], Iterable[list[Translation]]]) -> Iterator[list[Translation]]:
    """Each text's n-best list with its protected spans kept: `translate(model_texts, covering)` reads the texts as
    the model is to read them and gives their n-best lists in order; covering(n) says whether the n-th (from 1)
    needs the covering word alignment (its spans lie between words)."""
    pending: deque[Protected] = deque()
    aligned: set[int] = set()

    def model_texts() -> Iterator[str]:
        for number, text in enumerate(texts, start=1):
            p = Protected.of(text, protection)
            pending.append(p)
            if p.needs_alignment:
                aligned.add(number)
            yield p.text

    done = 0
    for hyps in translate(model_texts(), aligned.__contains__):
        done += 1
        aligned.discard(done)
        yield pending.popleft().restore(hyps, keep_alignment)
