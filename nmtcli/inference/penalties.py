"""What a search ranks finished hypotheses by, besides their log-probability: the length penalty (sec. 6.1, GNMT's
lp(Y), or fairseq's |Y|^alpha) and the brevity penalty (Sockeye's), off unless a model or the caller gives it a weight.

A brevity penalty adds to a finished hypothesis's score the log of BLEU's brevity penalty against the length the
source predicts: a model that ends sentences early (a small corpus of short strings) is held to the length its
training data had. Beam search ranks by both (inference/beam.py), and forced decoding scores by them
(inference/forced.py), so a translation and its forced score agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmtcli.inference.outputs import source_lengths
from nmtcli.model.transformer import Transformer

LENGTH_PENALTIES = ("gnmt", "power")


def lp(length: int | Tensor, alpha: float, kind: str = "gnmt"):
    """The length penalty lp(Y) a hypothesis's log-probability is divided by, of the kind `--length-penalty` names:
    "gnmt" (Wu et al. 2016, whose lp the paper uses): ((5 + |Y|) / 6)^alpha; "power" (fairseq, CTranslate2): |Y|^alpha.

    |Y| counts the generated tokens including the final EOS.
    """
    if kind == "gnmt":
        return ((5 + length) / 6) ** alpha
    if kind == "power":
        return length**alpha
    raise ValueError(f"length penalty must be one of {LENGTH_PENALTIES}, not {kind!r}")


@dataclass(frozen=True)
class Brevity:
    """Sockeye's brevity penalty (Hieber et al. 2020), the log of BLEU's: a finished hypothesis Y of source X scores
    log P(Y|X) / lp(Y) + weight * min(0, 1 - ratio * |X| / |Y|), where ratio * |X| is the length Y should have (ratio:
    the training data's target pieces per source piece) and |X|, |Y| count pieces without EOS. Only hypotheses
    shorter than that pay, by how much shorter; weight 0 is the paper's search."""

    weight: float = 0.0
    ratio: float = 1.0

    def penalty(self, expected: Tensor, length: Tensor) -> Tensor:
        """weight * min(0, 1 - expected / length): `expected` (n, 1) the lengths the sources predict, `length` the
        hypotheses' (without EOS; a hypothesis of EOS alone counts as one piece)."""
        return self.weight * torch.clamp(1.0 - expected / length.clamp(min=1).to(expected.dtype), max=0.0)

    def of(self, source_pieces: int, length: int) -> float:
        """The penalty of one hypothesis of `length` pieces (no EOS) for a source of `source_pieces` (forced scores)."""
        return float(self.penalty(torch.tensor(self.ratio * source_pieces), torch.tensor(length)))


NO_BREVITY = Brevity()


def expected_lengths(model: Transformer, src: Tensor, brevity: Brevity) -> Tensor:
    """(n,) ratio * |X|: the length in pieces each source predicts for its translation."""
    return brevity.ratio * source_lengths(model, src).to(torch.float32)
