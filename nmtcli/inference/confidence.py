"""How good a translation is likely to be, from the model's own probabilities: a number in [0, 1].

Estimators nmt can compute without a second model were measured on held-out data against sentence chrF
with the references (studies/confidence.py; the table is in docs/python-api.md): the length-normalised
log-probability, the lowest token probability, the agreement among the 4-best list and among 4 samples,
and fitted mixes. The length-normalised log-probability ranked translations best of the single estimators
(Spearman 0.58 on the demo corpus' test split) and costs nothing (the search computes it); the best mix (all
four: 0.62) needs a forced pass and four sampled decodings more, the free mix (with the 4-best) 0.60 a
wider n-best list, and on the second set neither mix beat it clearly. So a confidence is

    sigmoid(slope * log P(y|x) / (|y| + 1) + intercept)

with the curve fitted (fractional logistic regression: cross-entropy against sentence chrF / 100) on the valid
splits of the two held-out sets, so that a confidence reads as the chrF / 100 to expect. On the demo corpus'
test split translations with confidence >= 0.8 had a mean chrF of 75 (79% of them 50 or more), those below it
39. Another model's log-probabilities are on its own scale: treat the number as a ranking first, and re-fit the
curve on your own held-out data (studies/confidence.py prints the line) where a threshold matters.

Torch-free: it reads only the numbers a search returns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nmtcli.inference.results import Translation


def mean_log_prob(log_prob: float, tokens: int) -> float:
    """The length-normalised log-probability: log P(y | x) over the output's tokens and its EOS."""
    return log_prob / (tokens + 1)


@dataclass(frozen=True)
class Calibration:
    """confidence = sigmoid(slope * mean_log_prob + intercept): a logistic curve fitted to sentence chrF / 100 of
    held-out translations (studies/confidence.py)."""

    slope: float
    intercept: float

    def __call__(self, mean_log_prob: float) -> float:
        z = self.slope * mean_log_prob + self.intercept
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


# Fitted by studies/confidence.py on the valid splits of the demo corpus (the quickstart's model: 8 minutes of
# `nmt quickstart` on a shared 2-core CPU, BLEU 15.0 on its test split) and of the tests' synthetic corpus (their
# trained_model, BLEU ~96): one model alone spans too little of the range. docs/python-api.md has the table.
CALIBRATION = Calibration(slope=4.2417, intercept=2.0036)


def confidence(log_prob: float, tokens: int, calibration: Calibration = CALIBRATION) -> float:
    """The confidence of one translation of `tokens` pieces (EOS not counted) and log-probability `log_prob`."""
    return calibration(mean_log_prob(log_prob, tokens))


def joined_confidence(parts: Sequence[Translation], calibration: Calibration = CALIBRATION) -> float | None:
    """The confidence of a text translated sentence by sentence: the estimator over all its sentences' tokens
    together (their log-probabilities add: they are translated independently); None where none was translated."""
    found = [p for p in parts if p is not None and p.log_prob is not None]
    if not found:
        return None
    return calibration(sum(p.log_prob for p in found) / sum(len(p.tokens) + 1 for p in found))
