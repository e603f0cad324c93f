"""Paragraphs into sentences and back.

The model is trained on sentences: given a paragraph as one sequence it translates the first
sentence and drops most of what follows (issue 22 measured BLEU 9.5 for three-sentence paragraphs
against 39.3 for the same sentences one by one). So a text is cut into sentences, each is translated
on its own, and the translations are put back where the sentences were, with the text's own spaces,
tabs and line breaks between them.

The cutting is sentencex's (Wikimedia's rule-based segmenter, the language's abbreviations, numbers,
quotes and ellipses; benchmarks/sentence_split.py measured it against pysbd, blingfire and punkt).
A line break always ends a sentence. A language sentencex does not know falls back along MediaWiki's
language fallback chains (gsw -> de, ...), and from there to English rules.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import sentencex

from nmtcli.inference.confidence import joined_confidence
from nmtcli.inference.results import Translation, best_of, kth_best, nbest_record

Span = tuple[int, int]  # [start, end) character offsets of a sentence in its text
T = TypeVar("T")

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
    sentences (benchmarks/sentence_split.py passes each candidate segmenter here). Each piece it returns is
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


@dataclass(frozen=True)
class SplitTexts:
    """Texts cut into sentences for one translation call (`sentences`, all texts' in order), and put back
    together from the sentences' translations (`join`)."""

    texts: list[str]
    spans: list[list[Span]]  # each text's sentences

    @classmethod
    def of(cls, texts: Sequence[str], language: str, keep_whole: Callable[[str], list[Span]] | None = None) -> SplitTexts:
        """`keep_whole(text)`: spans no sentence boundary may cut (protected spans)."""
        if keep_whole is None:
            return cls(list(texts), [sentence_spans(text, language) for text in texts])
        return cls(list(texts), [joined_over(sentence_spans(text, language), keep_whole(text)) for text in texts])

    @property
    def sentences(self) -> list[str]:
        return [text[a:b] for text, spans in zip(self.texts, self.spans) for a, b in spans]

    def grouped(self, results: Sequence[T]) -> Iterator[tuple[str, list[Span], list[T]]]:
        """(text, its spans, its sentences' results) for each text, from one result per sentence of `sentences`."""
        if len(results) != sum(len(spans) for spans in self.spans):
            raise ValueError(f"{len(results)} results for {sum(len(spans) for spans in self.spans)} sentences")
        start = 0
        for text, spans in zip(self.texts, self.spans):
            yield text, spans, list(results[start:start + len(spans)])
            start += len(spans)

    def join(self, translations: Sequence[str]) -> list[str]:
        """Each text with its sentences replaced by their `translations` (one per sentence of `sentences`)."""
        return [join_sentences(text, spans, group) for text, spans, group in self.grouped(translations)]


def joined_record(text: str, spans: Sequence[Span], results: Sequence[Sequence[Translation]]) -> dict:
    """The JSON record of a text translated sentence by sentence (`nmt translate --split-sentences
    --output-format json`, /nmt/translate with "split_sentences"): "translation" is the joined best; "nbest"
    the joined k-th best (each sentence's k-th, or its last where its list is shorter); "score" and
    "log_prob" sums over the sentences (the log-probability of the joined text: the sentences are
    translated independently); "confidence" the estimator over all the sentences' tokens (joined_confidence);
    "sentences" the record of each sentence (nbest_record: its n-best list, tokens, alignment, confidence)
    with its "source" text and "start"/"end" offsets in `text`. A sentence of no tokens has no translations,
    and is "" in the joined text."""
    joined = joined_translation(text, spans, results)
    entries = [{"translation": t.text, "score": round(t.score, 6), "log_prob": round(t.log_prob, 6),
                "confidence": None if t.confidence is None else round(t.confidence, 6)} for t in joined.nbest]
    best = entries[0] if entries else {"translation": joined.text, "score": None, "log_prob": None, "confidence": None}
    sentences = [{"source": text[a:b], "start": a, "end": b, **nbest_record(list(hyps))} for (a, b), hyps in zip(spans, results)]
    return {**best, "nbest": entries, "sentences": sentences}


def joined_translation(text: str, spans: Sequence[Span], results: Sequence[Sequence[Translation]]) -> Translation:
    """A text translated sentence by sentence as one Translation (the Python API's, with split_sentences): the joined
    best, score and log_prob summed over the sentences, their tokens in order, the confidence over all of them; its
    `nbest` the joined k-th best; `sentences` each sentence's best with its n-best list. (joined_record's fields.)"""
    joined = []
    for k in range(max((len(hyps) for hyps in results), default=0)):
        chosen = [kth_best(hyps, k) for hyps in results]
        found = [h for h in chosen if h is not None]
        joined.append(Translation(join_sentences(text, spans, [h.text if h else "" for h in chosen]), sum(h.score for h in found),
                                  sum(h.log_prob for h in found), [t for h in found for t in h.tokens],
                                  confidence=joined_confidence(found)))
    sentences = [best_of(hyps) for hyps in results]
    if not joined:
        return Translation(join_sentences(text, spans, [""] * len(spans)), None, None, sentences=sentences)
    best = joined[0]
    return Translation(best.text, best.score, best.log_prob, best.tokens, confidence=best.confidence, nbest=joined, sentences=sentences)


def translate_paragraphs(lines: Iterable[str], language: str, translate: Callable[[Iterator[str]], Iterable[list[Translation]]],
                         numbers: dict[int, tuple[int, int]] | None = None,
                         keep_whole: Callable[[str], list[Span]] | None = None) -> Iterator[tuple[str, list[Span], list[list[Translation]]]]:
    """Texts translated sentence by sentence, streamed: each text of `lines` cut into sentences (`language`'s rules), the
    sentences of all texts read by one `translate` call (a translator's translate_nbest: it reads them a window at a
    time and yields each one's n-best list in order), and each text given back as (text, its spans, its sentences'
    n-best lists) as soon as its last sentence is translated. `numbers` (if given) maps each sentence's number, as
    the translator counts them from 1, to (its text's number, its place in the text) while it is in flight: a
    warning about "line N" can name the text and sentence instead. `keep_whole(text)`: spans of a text no sentence
    boundary may cut (protected spans): the sentences on both sides are one."""
    plans: deque[tuple[str, list[Span]]] = deque()  # texts whose sentences are read, not yet given back
    numbers = {} if numbers is None else numbers
    read = written = 0  # sentence numbers, as the translator counts them

    def sentences() -> Iterator[str]:
        nonlocal read
        for line_number, line in enumerate(lines, start=1):
            spans = sentence_spans(line, language)
            if keep_whole is not None:
                spans = joined_over(spans, keep_whole(line))
            plans.append((line, spans))
            for place, (a, b) in enumerate(spans, start=1):
                read += 1
                numbers[read] = (line_number, place)
                yield line[a:b]

    done: list[list[Translation]] = []  # the translations of the sentences of the texts in `plans`, in order

    def finished() -> Iterator[tuple[str, list[Span], list[list[Translation]]]]:
        nonlocal written
        while plans and len(done) >= len(plans[0][1]):
            line, spans = plans.popleft()
            own = done[:len(spans)]
            del done[:len(spans)]
            for _ in spans:
                written += 1
                del numbers[written]
            yield line, spans, own

    for result in translate(sentences()):
        done.append(result)
        yield from finished()
    yield from finished()  # texts without a sentence after the last one
