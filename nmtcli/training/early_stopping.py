"""Early stopping's rule: which validation counts as progress, so that patience starts again.

A validation resets patience only where it beats the one that last reset it by more than `min_delta`:
BLEU points where BLEU decides, else the percent by which perplexity fell. A run of gains each smaller
than that (BLEU on a few hundred lines moves by tenths of a point from noise alone) still ends; the
best validation is still the one kept (checkpoints/best/), however small its lead.
"""

from __future__ import annotations

import math


def gain(metric: str, value: float, reference: float) -> float:
    """How far `value` improves on `reference`: BLEU points (valid_bleu), or the % by which perplexity,
    exp(valid_nll), fell."""
    if metric == "valid_bleu":
        return value - reference
    return 100 * (1 - math.exp(value - reference))


def resets_patience(metric: str, value: float, reference: float | None, min_delta: float) -> bool:
    """Whether this validation is progress: the first, or more than `min_delta` past the `reference` (the
    validation that last reset patience). With min_delta 0, exactly a new best."""
    return reference is None or gain(metric, value, reference) > min_delta


def validations_without_progress(validations: list[dict], min_delta: float) -> int:
    """Validations since the last that reset patience, replayed from a run's metrics (its "valid" lines)."""
    reference, metric, count = None, None, 0
    for entry in validations:
        current = "valid_bleu" if "valid_bleu" in entry else "valid_nll"
        if current not in entry:
            count += 1
            continue
        if metric != current:  # the first validation, or the metric changed: a fresh start, as the trainer's
            reference = None
        metric = current
        if resets_patience(current, entry[current], reference, min_delta):
            reference, count = entry[current], 0
        else:
            count += 1
    return count
