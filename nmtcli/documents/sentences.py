"""Paragraphs into sentences and back.

The model is trained on sentences: given a paragraph as one sequence it translates the first
sentence and drops most of what follows (issue 22 measured BLEU 9.5 for three-sentence paragraphs
against 39.3 for the same sentences one by one). So a text is cut into sentences, each is translated
on its own, and the translations are put back where the sentences were, with the text's own spaces,
tabs and line breaks between them.

The cutting is sentencex's (Wikimedia's rule-based segmenter, the language's abbreviations, numbers,
quotes and ellipses; studies/sentence_split.py measured it against pysbd, blingfire and punkt).
A line break always ends a sentence. A language sentencex does not know falls back along MediaWiki's
language fallback chains (gsw -> de, ...), and from there to English rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

import sentencex

Span = tuple[int, int]  # [start, end) character offsets of a sentence in its text

# A list item's number or letter ("1.", "2.)", "b)", "iv.", "• 9.") is no sentence of its own, but segmenters cut
# after it ("1. The first item." -> "1." + "The first item."): it stays with the sentence that follows it.
LIST_MARKER = re.compile(r"(?:[•‣⁃◦*-]\s*)?(?:\d{1,3}|[A-Za-z]|[ivx]{1,5}|[IVX]{1,5})(?:\.\)|[.)])")

DEFAULT_LANGUAGE = "en"  # sentencex's own last resort, named here for the docs and the empty code


def sentence_spans(text: str, language: str) -> list[Span]:
    """(start, end) of each sentence of `text`, in order: no span holds a line break or starts or ends
    with whitespace, and everything between spans is whitespace (kept verbatim by `join_sentences`).
    `language` is an ISO 639 code ("en", "de", "pt-BR": its primary subtag is used)."""
    code = segmenter_language(language)
    return spans_of(text, lambda line: sentencex.segment(code, line))


def spans_of(text: str, split_line: Callable[[str], Iterable[str]]) -> list[Span]:
    """The spans of `sentence_spans`, with `split_line(line)` cutting one line (no line break in it) into
    sentences (studies/sentence_split.py passes each candidate segmenter here). Each piece it returns is
    found in the line from where the last one ended, so the spans follow the line's characters whatever the
    segmenter does with whitespace; a piece it changed (or text it skipped) ends the cutting there, and the
    rest of the line is one sentence. A list marker cut off on its own joins the sentence after it."""
    spans: list[Span] = []
    offset = 0
    for line in text.splitlines(keepends=True):  # Python's line breaks: LF, CRLF, CR, U+2028, ...
        content = line.splitlines()[0] if line.strip() else ""
        pieces: list[Span] = []
        cursor = 0
        for piece in split_line(content) if content else ():
            piece = piece.strip()
            if not piece:
                continue
            at = content.find(piece, cursor)
            if at < 0 or content[cursor:at].strip():
                break
            if pieces and pieces[-1][1] - pieces[-1][0] <= 9 and LIST_MARKER.fullmatch(content[slice(*pieces[-1])]):
                pieces[-1] = (pieces[-1][0], at + len(piece))
            else:
                pieces.append((at, at + len(piece)))
            cursor = at + len(piece)
        rest = content[cursor:]
        if rest.strip():  # whatever the segmenter left out or changed stays text to translate
            pieces.append((cursor + len(rest) - len(rest.lstrip()), len(content.rstrip())))
        spans += [(offset + a, offset + b) for a, b in pieces]
        offset += len(line)
    return spans


def segmenter_language(language: str) -> str:
    """The code sentencex is asked for: the primary subtag of an ISO 639 / BCP 47 code, lower case."""
    code = language.strip().lower().replace("_", "-").split("-")[0]
    return code or DEFAULT_LANGUAGE


def sentences(text: str, language: str) -> list[str]:
    """The sentences of `text` as strings (what `sentence_spans` points at)."""
    return [text[a:b] for a, b in sentence_spans(text, language)]


def joined_over(spans: list[Span], whole: Sequence[Span]) -> list[Span]:
    """Sentences joined where one of `whole` would be cut between them."""
    out: list[Span] = []
    for s, e in spans:
        if out and any(p < out[-1][1] and q > s for p, q in whole):
            out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def join_sentences(text: str, spans: Sequence[Span], translations: Sequence[str]) -> str:
    """`text` with each span replaced by its translation; everything between spans is kept as it is."""
    if len(spans) != len(translations):
        raise ValueError(f"{len(translations)} translations for {len(spans)} sentences")
    parts, end = [], 0
    for (a, b), translation in zip(spans, translations):
        parts += [text[end:a], translation]
        end = b
    parts.append(text[end:])
    return "".join(parts)
