"""The loss over full logits: the reference `nmtcli/training/loss.py: output_loss` is tested against.

Label-smoothed cross entropy (sec. 5.4) of logits that already exist, with its backward written out by
hand as training's loss was before it learned to project the decoder output itself a chunk at a time.
tests/test_training.py compares the two (value and gradients, fp32 and bf16 autocast), and
benchmarks/train_throughput.py --full-logits and benchmarks/gpu_check.py measure against it.
"""

from __future__ import annotations

import torch
from torch import Tensor


def label_smoothed_loss(logits: Tensor, target: Tensor, smoothing: float, pad_id: int) -> tuple[Tensor, Tensor]:
    """Summed over non-pad target tokens: (smoothed loss to optimize, plain NLL for perplexity).

    The smoothed target puts 1 - eps on the reference token and spreads eps uniformly over the
    vocabulary: loss = (1 - eps) * NLL + eps * mean_v(-log p_v). With log p_v = z_v - logsumexp(z),
    NLL = lse - z_target and mean_v(-log p_v) = lse - mean_v(z), so the (tokens x vocabulary)
    log-probabilities never need to exist.
    """
    vocab = logits.size(-1)
    loss, nll = _SmoothedCrossEntropy.apply(logits.reshape(-1, vocab), target.reshape(-1), target.reshape(-1) != pad_id, smoothing)
    return loss, nll


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Forward reads the logits twice (logsumexp, mean); backward writes the gradient in one buffer.

    d loss / d z_v = g * (softmax(z)_v - eps / V - (1 - eps) [v = target]) for a token with weight g
    (0 at padding). Autograd through log_softmax, mean, gather and masking would make several
    tokens-x-vocabulary temporaries; at a 37k vocabulary those passes over memory cost as much as a
    few layers of the model on a CPU.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, mask: Tensor, smoothing: float):
        z = logits.float()
        lse = torch.logsumexp(z, dim=-1)
        weight = mask.to(lse.dtype)
        nll = (lse - z.gather(-1, target.unsqueeze(-1)).squeeze(-1)) * weight
        uniform = (lse - z.mean(dim=-1)) * weight
        loss = ((1.0 - smoothing) * nll + smoothing * uniform).sum()
        ctx.save_for_backward(logits, lse, target, weight)
        ctx.smoothing = smoothing
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)
        return loss, nll_sum

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        logits, lse, target, weight = ctx.saved_tensors
        eps, vocab = ctx.smoothing, logits.size(-1)
        g = (grad_loss * weight).unsqueeze(-1)
        grad = torch.sub(logits, lse.unsqueeze(-1)).exp_()  # softmax, in float32
        grad.mul_(g).sub_(g * (eps / vocab))
        grad.scatter_add_(-1, target.unsqueeze(-1), (g * -(1.0 - eps)).to(grad.dtype))
        return grad.to(logits.dtype), None, None, None
