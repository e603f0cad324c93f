"""The learning-rate schedule of sec. 5.3 (eq. 3)."""

from __future__ import annotations


def inverse_sqrt_lr(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5): linear warmup, then 1/sqrt(step) decay.

    `step` counts from 1. `scale` multiplies the whole curve (1.0 is the paper).
    """
    step = max(step, 1)
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def peak_scale(d_model: int, warmup: int, peak: float | None) -> float:
    """The factor that makes eq. 3's curve peak at `peak` (`--lr`), at step = warmup; its own peak is
    d_model^-0.5 * warmup^-0.5. None: 1.0, the paper's curve. The shape (linear warmup, then 1/sqrt(step))
    is unchanged: Marian's and fairseq's inverse-sqrt schedule with a given peak."""
    return 1.0 if peak is None else peak * (d_model * warmup) ** 0.5
