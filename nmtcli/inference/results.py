"""What a translation is once it is text: `Translation`, and the JSON record every output writes of it.

Kept apart from translator.py, and free of torch, so that `from nmtcli import Translation` (the Python API,
nmtcli/api.py) is cheap: a program can hold, type and build translations without loading a model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class Translation:
    """One translation of one text.

    text: the detokenized translation ("" for an empty or blank text).
    score: log_prob over the length penalty: what the search ranks by (None: nothing was translated).
    log_prob: the model's log-probability of the translation, EOS included (None: nothing was translated).
    tokens: the output's sentencepiece pieces.
    alignment: Pharaoh "i-j ..." source-target links, when asked for ("" for a text with nothing translated).
    confidence: in [0, 1], how good the translation is likely to be: the sentence chrF / 100 that
        translations with these scores reached on held-out data (nmtcli/inference/confidence.py,
        docs/python-api.md); None where nothing was translated.
    nbest: the n-best list, best first (the first equals this translation, without its own nbest);
        empty where nothing was translated, and in the entries of an n-best list.
    sentences: with split_sentences, each sentence's translation (its text, scores, confidence, n-best).
    """

    text: str
    score: float | None
    log_prob: float | None
    tokens: list[str] = field(default_factory=list)
    alignment: str | None = None
    confidence: float | None = None
    nbest: list[Translation] = field(default_factory=list)
    sentences: list[Translation] = field(default_factory=list)

    def record(self) -> dict:
        """The JSON record `nmt translate --output-format json` writes and /nmt/translate answers for this text
        (nbest_record of its n-best list; an alignment "" says one was asked for)."""
        return nbest_record(self.nbest, self.alignment is not None)


def kth_best(hyps: Sequence[Translation], k: int) -> Translation | None:
    """The k-th best translation of a line; its last where the search found fewer; None for an empty line
    (no translations). Joined texts (sentences, HTML) take each part's k-th best this way."""
    return hyps[min(k, len(hyps) - 1)] if hyps else None


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


def untranslated(alignment: bool, text: str = "", log_prob: float | None = None) -> Translation:
    """The translation of a text the model had nothing to read in (empty, blank, or only protected spans: `text`, kept
    as it is, with `log_prob` as its score): no tokens, and the alignment "" where one was asked for, so that its record
    has the keys of every translated line's record (a program reading the JSON lines finds "alignment" in each)."""
    return Translation(text, log_prob, log_prob, alignment="" if alignment else None)


def _entry(h: Translation) -> dict:
    return {"translation": h.text, "score": _rounded(h.score), "log_prob": _rounded(h.log_prob), "tokens": h.tokens,
            "confidence": _rounded(h.confidence), **({"alignment": h.alignment} if h.alignment is not None else {})}


def nbest_record(hyps: Sequence[Translation], alignment: bool = False) -> dict:
    """One line's result as `nmt translate --output-format json` writes it and `nmt serve` answers it:
    the best translation's fields plus the n-best list; an empty line's (no translations) those of `untranslated`
    (`alignment`: whether the alignment was asked for)."""
    entries = [_entry(h) for h in hyps]
    best = entries[0] if entries else _entry(untranslated(alignment))
    return {**best, "nbest": entries}


def best_of(hyps: Sequence[Translation], alignment: bool = False) -> Translation:
    """A line's n-best list as one Translation: the best, with the list in `nbest`; an empty line's is empty
    (`untranslated`; `alignment`: whether the alignment was asked for)."""
    if not hyps:
        return untranslated(alignment)
    first = hyps[0]
    return Translation(first.text, first.score, first.log_prob, first.tokens, first.alignment, first.confidence, list(hyps))


@dataclass
class Scored:
    """A given translation's score (forced decoding, `nmt translate --score-only`): its pieces, the log-probability
    of each and of the final EOS, that total over the length penalty as the search ranks (penalties.lp,
    |Y| counting EOS), the confidence those probabilities give (inference/confidence.py), and its alignment to
    the source when asked for."""

    tokens: list[str]
    token_log_probs: list[float]
    score: float
    alignment: str | None = None
    confidence: float | None = None

    @property
    def log_prob(self) -> float:
        return sum(self.token_log_probs)

    def record(self) -> dict:
        """What `--score-only --output-format json` writes for the pair."""
        n = len(self.token_log_probs)
        record = {"score": round(self.score, 6), "log_prob": round(self.log_prob, 6), "per_token": round(self.log_prob / n, 6),
                  "length": n, "tokens": self.tokens, "token_log_probs": [round(p, 6) for p in self.token_log_probs],
                  "confidence": _rounded(self.confidence)}
        return {**record, "alignment": self.alignment} if self.alignment is not None else record
