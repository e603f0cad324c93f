"""Label-smoothed cross entropy (sec. 5.4: eps_ls = 0.1), with the backward pass written out by hand.

`output_loss` takes the decoder's hidden states and does the pre-softmax projection with the shared
embedding matrix (sec. 3.4) itself, a chunk of rows at a time, so that neither the tokens x vocabulary
logits nor a float32 buffer of that size ever exists. The smoothed target puts 1 - eps on the reference
token and spreads eps uniformly over the vocabulary: loss = (1 - eps) * NLL + eps * mean_v(-log p_v).
With log p_v = z_v - logsumexp(z), NLL = lse - z_target and mean_v(-log p_v) = lse - mean_v(z), so the
log-probabilities never need to exist either. (tests/reference_loss.py computes the same loss over full
logits; the tests compare the two, value and gradients.)
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# Logits computed at once by `output_loss`: on a GPU large chunks keep the matrix products efficient
# and the per-chunk weight-gradient additions few (2^27 logits: a 512 MB float32 chunk); on a CPU,
# chunks that stay near the caches are faster than one pass over the whole tokens x vocabulary block.
CHUNK_LOGITS = {"cuda": 1 << 27, "cpu": 1 << 25}


def output_loss(hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, smoothing: float, pad_id: int,
                tokens: int | None = None) -> tuple[Tensor, Tensor]:
    """The label-smoothed loss of the logits F.linear(hidden, weight, bias), without the logits: (loss, NLL)
    summed over the non-pad target tokens.

    hidden: (..., d) decoder output; weight: (V, d) the shared embedding matrix; bias: Marian's
    final_logits_bias or None; target: (...) ids. Rows whose target is padding are dropped before
    the projection (they carry no loss); `tokens`, the number of non-pad targets when the caller
    knows it (every batch does), lets a GPU find those rows without waiting for the device.

    Under autocast the projection runs in the autocast dtype, as F.linear would, and the softmax
    in float32, chunk by chunk; without autocast everything is float32. The gradients with respect
    to hidden, weight and bias are computed in the same pass (the loss is the last node of the
    graph, so its backward only scales them), which costs the three matrix products of an unfused
    linear layer, not four.
    """
    d = hidden.size(-1)
    hidden, target = hidden.reshape(-1, d), target.reshape(-1)
    rows = _target_rows(target != pad_id, tokens)
    if rows is not None:
        hidden, target = hidden.index_select(0, rows), target.index_select(0, rows)
        mask = None
    else:
        mask = target != pad_id
    needs_grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    return _ChunkedOutputLoss.apply(hidden, weight, bias, target, mask, smoothing, needs_grad)


def _target_rows(mask: Tensor, tokens: int | None) -> Tensor | None:
    """Indices of the True rows of `mask`, in order; None where finding them would stall a GPU."""
    if mask.device.type == "cpu":
        return mask.nonzero().squeeze(1)
    if tokens is None:
        return None  # counting them would wait for the device: keep every row, weighted by the mask
    return first_true(mask, tokens)


def first_true(mask: Tensor, count: int) -> Tensor:
    """`mask.nonzero()` for a 1-d mask with `count` True entries, without waiting for the device:
    a stable sort puts the True positions first, in order, and the host knows how many there are."""
    return torch.sort((~mask).to(torch.uint8), stable=True).indices[:count]


def _autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype autocast gives matrix products on this device type right now, or None when it is off."""
    return torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else None


class _ChunkedOutputLoss(torch.autograd.Function):
    """logits = hidden W^T + b for a chunk of rows, then the loss and d loss / d logits of that chunk,
    then d hidden = g W and d W += g^T hidden: per chunk.

    d loss / d z_v = g * (softmax(z)_v - eps / V - (1 - eps) [v = target]) for a token with weight g (0 at
    padding): one buffer the size of the chunk's logits, where autograd through log_softmax, mean, gather
    and masking would make several.
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, mask: Tensor | None,
                smoothing: float, needs_grad: bool):
        dtype = _autocast_dtype(hidden.device.type) or hidden.dtype
        exact = torch.promote_types(dtype, torch.float32)  # the softmax and the sums: float32 at least
        with torch.autocast(hidden.device.type, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)
            b = bias.to(dtype) if bias is not None else None
            n, vocab = h.size(0), w.size(0)
            loss = torch.zeros((), dtype=exact, device=h.device)
            nll = torch.zeros((), dtype=exact, device=h.device)
            if needs_grad:
                grad_h = torch.empty_like(h)
                grad_w = torch.zeros(w.shape, dtype=exact, device=w.device)
                grad_b = torch.zeros(vocab, dtype=exact, device=w.device) if b is not None else None
            step = max(1, CHUNK_LOGITS.get(h.device.type, CHUNK_LOGITS["cuda"]) // vocab)
            for start in range(0, n, step):
                hc, tc = h[start : start + step], target[start : start + step].unsqueeze(-1)
                z = F.linear(hc, w, b).to(exact)  # no copy when the product is already float32
                lse = torch.logsumexp(z, dim=-1)
                nll_c = lse - z.gather(-1, tc).squeeze(-1)
                uniform_c = lse - z.mean(dim=-1)
                row_weight = mask[start : start + step].to(lse.dtype) if mask is not None else None
                if row_weight is not None:
                    nll_c, uniform_c = nll_c * row_weight, uniform_c * row_weight
                loss += ((1.0 - smoothing) * nll_c + smoothing * uniform_c).sum()
                nll += nll_c.sum()
                if not needs_grad:
                    continue
                g = z.sub_(lse.unsqueeze(-1)).exp_().sub_(smoothing / vocab)  # d loss / d z, in place of z
                g.scatter_add_(-1, tc, torch.full(tc.shape, -(1.0 - smoothing), dtype=g.dtype, device=g.device))
                if row_weight is not None:
                    g.mul_(row_weight.unsqueeze(-1))
                if b is not None:
                    grad_b += g.sum(0)
                g = g.to(dtype)
                torch.mm(g, w, out=grad_h[start : start + step])
                if dtype == exact:
                    grad_w.addmm_(g.t(), hc)
                else:
                    grad_w += (g.t() @ hc).to(exact)
        ctx.mark_non_differentiable(nll)
        if needs_grad:
            ctx.save_for_backward(grad_h, grad_w, grad_b)
            ctx.dtypes = (hidden.dtype, weight.dtype, bias.dtype if bias is not None else None)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor):
        grad_h, grad_w, grad_b = ctx.saved_tensors
        h_dtype, w_dtype, b_dtype = ctx.dtypes
        # Scaled in float32 (the gradient of hidden is held in the compute dtype, as autocast's linear makes it).
        grad_hidden = (grad_h.to(h_dtype) * grad_loss).to(h_dtype) if ctx.needs_input_grad[0] else None
        grad_weight = (grad_w * grad_loss).to(w_dtype) if ctx.needs_input_grad[1] else None
        grad_bias = (grad_b * grad_loss).to(b_dtype) if grad_b is not None and ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias, None, None, None, None


def perplexity(nll_per_token: float) -> float:
    return float(torch.tensor(min(nll_per_token, 100.0)).exp())
