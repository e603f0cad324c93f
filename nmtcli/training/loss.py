"""Label-smoothed cross entropy (sec. 5.4: eps_ls = 0.1)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def label_smoothed_loss(logits: Tensor, target: Tensor, smoothing: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed over non-pad target tokens: (smoothed loss to optimize, plain NLL for perplexity).

    The smoothed target puts 1 - eps on the reference token and spreads eps uniformly over the
    vocabulary: loss = (1 - eps) * NLL + eps * mean_v(-log p_v).
    """
    log_probs = F.log_softmax(logits.float(), dim=-1)
    mask = target != pad_id
    nll = -log_probs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs.mean(dim=-1)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    return loss.masked_select(mask).sum(), nll.masked_select(mask).sum().detach()


def perplexity(nll_per_token: float) -> float:
    return float(torch.tensor(min(nll_per_token, 100.0)).exp())
