"""Texts in, translations out: the one document path of the Python API, `nmt translate` and `nmt serve`.

A text goes to the model whole, or cut into sentences (split_sentences: sentences.py, no sentence boundary
inside a protected span); the protected spans of what the model is to read are taken out and put back into
each of its translations (protect.py); a split text's translation is its sentences' joined back with the
text's own whitespace, its k-th best each sentence's k-th (joined_translation). The model is reached through
one callable, `translate(lines, covering)`: each line's n-best list, in order, read as it goes (an engine's
translate_nbest, a window at a time; `covering(n)`, from 1: whether line n needs the word alignment that places
protected spans). One text in, one Translated out, in order: nothing is dropped or reordered.

`translate_texts` streams any iterable of texts through that callable. `Split` is the same cutting and joining
for a list of texts whose sentences are translated in one call that answers later (`nmt serve` counts a
request's sentences before any is translated, and awaits its batcher). `Pages` is that for HTML documents
(markup.py's parse): their sentences in one call, each document rendered with the k-th best of each.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from nmtcli.documents.markup import Document
from nmtcli.documents.protect import Protection, find_spans, protected_nbest
from nmtcli.documents.sentences import Span, join_sentences, joined_over, sentence_spans
from nmtcli.inference.confidence import joined_confidence
from nmtcli.inference.results import Translation, best_of, kth_best

# translate(lines, covering): each line's n-best list (best first; [] for an empty line), in order.
TranslateLines = Callable[[Iterator[str], "Callable[[int], bool] | None"], Iterable[list[Translation]]]


@dataclass(frozen=True)
class Translated:
    """A text and its translation; `spans`: where its sentences were (None: it was translated whole)."""

    source: str
    translation: Translation
    spans: list[Span] | None = None

    @classmethod
    def joined(cls, text: str, spans: list[Span], results: Sequence[Sequence[Translation]], alignment: bool = False) -> Translated:
        """A text translated sentence by sentence, from each sentence's n-best list (`alignment`: it was asked for)."""
        return cls(text, joined_translation(text, spans, results, alignment), spans)

    def record(self) -> dict:
        """The JSON record of `nmt translate --output-format json` and /nmt/translate: a whole text's is its n-best
        list's (results.nbest_record). A split text's: "translation" the joined best; "nbest" the joined k-th best
        (each sentence's k-th, or its last where its list is shorter); "score" and "log_prob" sums over the sentences
        (the log-probability of the joined text: the sentences are translated independently); "confidence" the
        estimator over all the sentences' tokens (joined_confidence); "sentences" each sentence's record (its n-best
        list, tokens, alignment, confidence) with its "source" text and "start"/"end" offsets in the text. A sentence
        of no tokens has no translations, and is "" in the joined text."""
        t = self.translation
        if self.spans is None:
            return t.record()
        entries = [{"translation": h.text, "score": _rounded(h.score), "log_prob": _rounded(h.log_prob),
                    "confidence": _rounded(h.confidence)} for h in t.nbest]
        best = entries[0] if entries else {"translation": t.text, "score": None, "log_prob": None, "confidence": None}
        sentences = [{"source": self.source[a:b], "start": a, "end": b, **s.record()} for (a, b), s in zip(self.spans, t.sentences)]
        return {**best, "nbest": entries, "sentences": sentences}

    def kth(self, k: int) -> str:
        """The text of the k-th best translation (kth_best: the last where there are fewer); a text without
        translations (no words in it) comes back as its translation ("" for a whole text, its whitespace for a split one)."""
        chosen = kth_best(self.translation.nbest, k)
        return chosen.text if chosen is not None else self.translation.text


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def joined_translation(text: str, spans: Sequence[Span], results: Sequence[Sequence[Translation]], alignment: bool = False) -> Translation:
    """A text translated sentence by sentence as one Translation: the joined best, score and log_prob summed over the
    sentences (None where an engine gives none), their tokens in order, the confidence over all of them; its `nbest`
    the joined k-th best; `sentences` each sentence's best with its n-best list (best_of: `alignment` asked for)."""
    joined = []
    for k in range(max((len(hyps) for hyps in results), default=0)):
        chosen = [kth_best(hyps, k) for hyps in results]
        found = [h for h in chosen if h is not None]
        joined.append(Translation(join_sentences(text, spans, [h.text if h else "" for h in chosen]), _sum(h.score for h in found),
                                  _sum(h.log_prob for h in found), [t for h in found for t in h.tokens],
                                  confidence=joined_confidence(found)))
    sentences = [best_of(hyps, alignment) for hyps in results]
    if not joined:
        return Translation(join_sentences(text, spans, [""] * len(spans)), None, None, sentences=sentences)
    best = joined[0]
    return Translation(best.text, best.score, best.log_prob, best.tokens, confidence=best.confidence, nbest=joined, sentences=sentences)


def _sum(values: Iterable[float | None]) -> float | None:
    """The sum, or None where a part has no value (CTranslate2's translations carry no scores)."""
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def split_spans(text: str, language: str, protection: Protection | None = None) -> list[Span]:
    """The sentences of `text` by `language`'s rules, those on both sides of a protected span joined."""
    spans = sentence_spans(text, language)
    return spans if protection is None else joined_over(spans, find_spans(text, protection))


@dataclass(frozen=True)
class Split:
    """Texts cut into sentences for one translation call (`sentences`: all texts' in order), and put back
    together from the sentences' n-best lists (`joined`)."""

    texts: list[str]
    spans: list[list[Span]]  # each text's sentences

    @classmethod
    def of(cls, texts: Sequence[str], language: str, protection: Protection | None = None) -> Split:
        return cls(list(texts), [split_spans(text, language, protection) for text in texts])

    @property
    def sentences(self) -> list[str]:
        return [text[a:b] for text, spans in zip(self.texts, self.spans) for a, b in spans]

    def joined(self, results: Sequence[list[Translation]], alignment: bool = False) -> list[Translated]:
        """Each text's translation, from one n-best list per sentence of `sentences` (`alignment`: it was asked for)."""
        if len(results) != len(self.sentences):
            raise ValueError(f"{len(results)} results for {len(self.sentences)} sentences")
        out, start = [], 0
        for text, spans in zip(self.texts, self.spans):
            out.append(Translated.joined(text, spans, results[start:start + len(spans)], alignment))
            start += len(spans)
        return out


class Pages:
    """HTML documents (markup.parse) translated together: `sentences`, every sentence of all of them, go to one
    translation call (word alignments on, COVERING: the tags are placed by them); `rendered` puts each document
    back with the k-th best translation of each of its sentences. The Python API translates one document so,
    `nmt serve` the documents of a request."""

    def __init__(self, documents: Sequence[Document]):
        self.documents = list(documents)

    @property
    def sentences(self) -> list[str]:
        return [sentence for document in self.documents for sentence in document.sentences]

    def by_document(self, results: Sequence[list[Translation]]) -> list[list[list[Translation]]]:
        """The n-best lists of `sentences` (`results`, in order) cut into each document's."""
        if len(results) != len(self.sentences):
            raise ValueError(f"{len(results)} results for {len(self.sentences)} sentences")
        out, start = [], 0
        for document in self.documents:
            out.append(list(results[start:start + len(document.sentences)]))
            start += len(document.sentences)
        return out

    def rendered(self, results: Sequence[list[Translation]], nbest: int = 1) -> list[list[str]]:
        """Each document with the k-th best of each of its sentences put back, for k < nbest."""
        return [[document.render_kth(hyps, k) for k in range(nbest)] for document, hyps in zip(self.documents, self.by_document(results))]


def translate_texts(texts: Iterable[str], translate: TranslateLines, *, language: str | None = None,
                    protection: Protection | None = None, keep_alignment: bool = False,
                    numbers: dict[int, tuple[int, int]] | None = None) -> Iterator[Translated]:
    """Each text of `texts` translated, in order, streamed: whole (`language` None), or cut into sentences by
    `language`'s rules, the sentences of all texts read by one `translate` call, and each text given back as soon as
    its last sentence is translated. `protection`: the spans kept. `keep_alignment`: the alignment was asked for (it
    stays on the translations with spans kept, and a text with nothing to translate gets ""). `numbers` (split only, if given) maps each sentence's number, as the engine counts
    the lines it reads from 1, to (its text's number, its place in the text) while it is in flight: a warning about
    "line N" can name the text and the sentence instead."""
    if protection is not None:
        inner = translate

        def translate(lines: Iterator[str], covering=None) -> Iterable[list[Translation]]:
            return protected_nbest(lines, protection, keep_alignment, inner)

    if language is None:
        yield from _whole(texts, translate, keep_alignment)
    else:
        yield from _split(texts, translate, language, protection, {} if numbers is None else numbers, keep_alignment)


def _whole(texts: Iterable[str], translate: TranslateLines, alignment: bool) -> Iterator[Translated]:
    read: deque[str] = deque()  # texts read by the engine, not yet given back

    def reading() -> Iterator[str]:
        for text in texts:
            read.append(text)
            yield text

    for hyps in translate(reading(), None):
        yield Translated(read.popleft(), best_of(hyps, alignment))


def _split(texts: Iterable[str], translate: TranslateLines, language: str, protection: Protection | None,
           numbers: dict[int, tuple[int, int]], alignment: bool) -> Iterator[Translated]:
    plans: deque[tuple[str, list[Span]]] = deque()  # texts whose sentences are read, not yet given back
    read = written = 0  # sentence numbers, as the engine counts them

    def sentences() -> Iterator[str]:
        nonlocal read
        for text_number, text in enumerate(texts, start=1):
            spans = split_spans(text, language, protection)
            plans.append((text, spans))
            for place, (a, b) in enumerate(spans, start=1):
                read += 1
                numbers[read] = (text_number, place)
                yield text[a:b]

    done: list[list[Translation]] = []  # the n-best lists of the sentences of the texts in `plans`, in order

    def finished() -> Iterator[Translated]:
        nonlocal written
        while plans and len(done) >= len(plans[0][1]):
            text, spans = plans.popleft()
            own = done[:len(spans)]
            del done[:len(spans)]
            for _ in spans:
                written += 1
                del numbers[written]
            yield Translated.joined(text, spans, own, alignment)

    for result in translate(sentences(), None):
        done.append(result)
        yield from finished()
    yield from finished()  # texts without a sentence after the last one
