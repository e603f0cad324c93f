"""Corpus scores through sacreBLEU, with the signatures that make them comparable across papers.

`nmt score` prints each metric exactly as `sacrebleu REF -i HYP -m METRIC -f text` does, so the
numbers agree to the last digit.
"""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF, TER

from nmtcli.errors import NmtError

METRICS = {"bleu": BLEU, "chrf": CHRF, "ter": TER}


@dataclass(frozen=True)
class Score:
    name: str  # "BLEU", "chrF2", "TER"
    score: float  # full precision
    signature: str
    formatted: str  # sacreBLEU's own one-line text form


def score(hypotheses: list[str], references: list[str], metrics: list[str], width: int = 1) -> list[Score]:
    """Score `hypotheses` against one reference each, with sacreBLEU's default settings per metric."""
    if len(hypotheses) != len(references):
        raise NmtError(
            f"the hypothesis has {len(hypotheses)} lines but the reference has {len(references)}",
            "they must be aligned line by line; was a translation cut short?",
        )
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise NmtError(f"unknown metric {', '.join(unknown) or '(none)'}", f"choose from {', '.join(METRICS)}", exit_code=2)
    results = []
    for name in metrics:
        metric = METRICS[name]()
        result = metric.corpus_score(hypotheses, [references])
        signature = metric.get_signature().format()
        results.append(Score(result.name, result.score, signature, result.format(width, False, signature)))
    return results
