"""GNMT's coverage penalty (Wu et al. 2016, sec. 7): rank translations that leave source words unattended lower.

A model trained on a small corpus of short strings ends long sentences early: a prefix of the translation that
looks like a whole string gets a high P(EOS), and the search, which ranks by the model's probability, keeps the
short hypothesis (docs/training.md, "Short outputs"). The coverage penalty adds what the probability does not
see, how much of the source the hypothesis attended to:

    s(Y, X) = log P(Y | X) / lp(Y) + cp(X; Y)      cp(X; Y) = beta * sum_i log(min(sum_j p_ij, 1.0))

where p_ij is the encoder-decoder attention of target position j on source token i (here the mean over all
layers and heads, the alignments' DEFAULT_HEADS), i runs over the source's tokens (not its EOS, nor a
multilingual model's language tag) and j over the target's positions, its EOS included. A source token
attended to with a total weight of 1 or more costs nothing; one never attended to costs beta * log(tiny).

Applied as GNMT applies it to finished hypotheses: the beam's finished hypotheses (all `beam` of them) are
reranked by s(Y, X) after the search (Translator._rerank), their attention read in one teacher-forced pass over
them, the pass the word alignments read too (inference/forced.py). The hypotheses' `score` is s(Y, X), what they
are ranked by.
"""

from __future__ import annotations

import torch
from torch import Tensor

# The smallest coverage counted: a source token no position attended to costs beta * log(1e-6), not -inf.
FLOOR = 1e-6


def coverage_penalty(attention: Tensor, beta: float, first: int = 0) -> float:
    """cp(X; Y) of one hypothesis: `attention` (target positions + 1, source tokens + 1), as force_batch returns it
    (the last column the source's EOS); `first` source tokens (a language tag) are left out."""
    covered = attention[:, first:-1].float().sum(0).clamp(min=FLOOR, max=1.0)
    return beta * float(torch.log(covered).sum())
