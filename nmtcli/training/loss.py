"""Label-smoothed cross entropy (sec. 5.4: eps_ls = 0.1), with the backward pass written out by hand.

`output_loss` takes the decoder's hidden states and does the pre-softmax projection with the shared
embedding matrix (sec. 3.4) itself, a chunk of rows at a time, so that neither the tokens x vocabulary
logits nor a float32 buffer of that size ever exists. The smoothed target puts 1 - eps on the reference
token and spreads eps uniformly over the vocabulary: loss = (1 - eps) * NLL + eps * mean_v(-log p_v).
With log p_v = z_v - logsumexp(z), NLL = lse - z_target and mean_v(-log p_v) = lse - mean_v(z), so the
log-probabilities never need to exist either. After each chunk's product, `chunk_terms` does the rest
of the chunk's work (the fp32 log-softmax, the loss terms, the softmax for the gradient in the products'
dtype): on a GPU compiled into one kernel that passes over the logits once (FUSED). The matrix products
stay cuBLAS's. (tests/reference_loss.py computes the same loss over full logits; the tests compare the
two, value and gradients.)
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from nmtcli.errors import NmtError

# Logits computed at once by `output_loss`: on a GPU large chunks keep the matrix products efficient
# and the per-chunk weight-gradient additions few (2^27 logits: a 512 MB float32 chunk); on a CPU,
# chunks that stay near the caches are faster than one pass over the whole tokens x vocabulary block.
CHUNK_LOGITS = {"cuda": 1 << 27, "cpu": 1 << 25}


def output_loss(hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, smoothing: float, pad_id: int,
                tokens: int | None = None, every_row: bool = False) -> tuple[Tensor, Tensor]:
    """The label-smoothed loss of the logits F.linear(hidden, weight, bias), without the logits: (loss, NLL)
    summed over the non-pad target tokens.

    hidden: (..., d) decoder output; weight: (V, d) the shared embedding matrix; bias: Marian's
    final_logits_bias or None; target: (...) ids. Rows whose target is padding are dropped before
    the projection (they carry no loss); `tokens`, the number of non-pad targets when the caller
    knows it (every batch does), lets a GPU find those rows without waiting for the device. With
    `every_row` no row is dropped, padding is weighted 0 instead: every shape then follows from the
    batch's shape alone, not from its values, as a CUDA graph's must (training/graphs.py).

    Under autocast the projection runs in the autocast dtype, as F.linear would, and the softmax
    in float32, chunk by chunk; without autocast in the dtype of `hidden` (float32, or bf16 for bf16
    weights: training/precision.py, bf16-master), the softmax in float32 at least. The gradients with respect
    to hidden, weight and bias are computed in the same pass (the loss is the last node of the
    graph, so its backward only scales them), which costs the three matrix products of an unfused
    linear layer, not four.
    """
    d = hidden.size(-1)
    hidden, target = hidden.reshape(-1, d), target.reshape(-1)
    rows = None if every_row else _target_rows(target != pad_id, tokens)
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


# The per-chunk work after the logits' product (`chunk_terms`): "auto" compiles it on a GPU, where inductor
# fuses it into one reduction kernel per block of rows that reads the logits once and writes the softmax once
# in the compute dtype, and runs it eagerly on a CPU (the same Python: the CPU tests test the GPU's
# algorithm); "off" runs it eagerly everywhere (the GPU's kernels before fusing, for a benchmark to compare);
# "on" compiles it on a CPU too. NMT_FUSED_LOSS sets it for a whole process (`nmt train` included).
FUSED = os.environ.get("NMT_FUSED_LOSS", "auto")
FUSED_MODES = ("auto", "on", "off")
COMPILE_BACKEND = "inductor"  # a test counts the graphs with its own backend
_compiled_chunk_terms = None  # made on first use: torch.compile imports TorchDynamo, seconds nothing else needs


def chunk_terms(z: Tensor, target: Tensor, row_weight: Tensor | None, smoothing: float,
                grad_dtype: torch.dtype | None) -> tuple[Tensor, Tensor, Tensor | None]:
    """One chunk of logits z (rows, V) and its targets (rows,) -> (smoothed loss, NLL, softmax) per row.

    The loss and NLL are float32 (at least); the softmax, the only (rows x V) term of the gradient, is
    written in `grad_dtype` (the products' dtype), with row_weight's zero rows zeroed, or not at all (None:
    no gradient). loss = (1 - eps) * NLL + eps * mean_v(-log p_v), with mean_v(-log p_v) = lse - mean_v(z).
    Compiled, this is one pass over the logits; eagerly, a fused log_softmax, the mean, and exp in place.
    """
    log_p = torch.log_softmax(z, dim=-1, dtype=torch.promote_types(z.dtype, torch.float32))
    nll = -log_p.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    uniform = -log_p.mean(-1)
    loss = (1.0 - smoothing) * nll + smoothing * uniform
    if row_weight is not None:
        loss, nll = loss * row_weight, nll * row_weight
    if grad_dtype is None:
        return loss, nll, None
    p = log_p.exp_()  # softmax, in place of log p (read already)
    if row_weight is not None:
        p = p * row_weight.unsqueeze(-1)
    return loss, nll, p.to(grad_dtype)


def _chunk_terms_for(device_type: str):
    """chunk_terms as FUSED says for this device: compiled (static V, any number of rows) or eager."""
    global _compiled_chunk_terms
    if FUSED not in FUSED_MODES:
        raise NmtError(f"NMT_FUSED_LOSS is {FUSED!r}", f"set it to one of {', '.join(FUSED_MODES)}, or unset it (auto)", exit_code=2)
    if FUSED == "off" or (FUSED == "auto" and (device_type != "cuda" or not _has_triton())):
        return chunk_terms
    if _compiled_chunk_terms is None:
        compiled = torch.compile(chunk_terms, dynamic=False, backend=COMPILE_BACKEND)

        def dynamic_rows(z, target, row_weight, smoothing, grad_dtype):
            # The vocabulary is fixed, the rows are not (the last chunk of every batch differs): rows are
            # symbolic, so one graph serves every chunk (and one more a chunk of one row, which dynamo specializes).
            for t in (z, target, row_weight):
                if t is not None:
                    torch._dynamo.mark_dynamic(t, 0)
            return compiled(z, target, row_weight, smoothing, grad_dtype)

        _compiled_chunk_terms = dynamic_rows
    return _compiled_chunk_terms


def _has_triton() -> bool:
    """Whether inductor can write GPU kernels here (a GPU without Triton runs chunk_terms eagerly)."""
    from torch.utils._triton import has_triton

    return has_triton()


class _ChunkedOutputLoss(torch.autograd.Function):
    """logits = hidden W^T + b for a chunk of rows, then the loss and d loss / d logits of that chunk,
    then d hidden = g W and d W += g^T hidden: per chunk.

    d loss / d z_v = g * (softmax(z)_v - eps / V - (1 - eps) [v = target]) for a token with weight g (0 at
    padding). Only softmax(z) is a (rows x V) term: the constant and the target's term go into the
    products as rank-one and per-row corrections (eps / V * sum_v W_v, (1 - eps) W_target). So the
    logits are written by the projection and read by `chunk_terms`, which writes the softmax in the
    products' dtype: one pass where it is compiled (FUSED), three eagerly (log_softmax, mean, exp).
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, target: Tensor, mask: Tensor | None,
                smoothing: float, needs_grad: bool):
        dtype = _autocast_dtype(hidden.device.type) or hidden.dtype
        exact = torch.promote_types(dtype, torch.float32)  # the softmax and the sums: float32 at least
        eps = smoothing
        terms = _chunk_terms_for(hidden.device.type)
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
                h_sum = torch.zeros(h.size(1), dtype=exact, device=h.device)  # sum of g * h over the rows
                smoothing_row = (eps * w.mean(0, dtype=exact)).to(dtype)  # eps / V * sum_v W_v
            step = max(1, CHUNK_LOGITS.get(h.device.type, CHUNK_LOGITS["cuda"]) // vocab)
            for start in range(0, n, step):
                hc, tc = h[start : start + step], target[start : start + step]
                row_weight = mask[start : start + step].to(exact) if mask is not None else None
                z = F.linear(hc, w, b)
                loss_c, nll_c, p = terms(z, tc, row_weight, eps, dtype if needs_grad else None)
                del z
                loss += loss_c.sum()
                nll += nll_c.sum()
                if not needs_grad:
                    continue
                hg = hc if row_weight is None else hc * row_weight.unsqueeze(-1).to(dtype)  # g * h
                if b is not None:
                    grad_b += p.sum(0, dtype=exact)
                    grad_b.index_add_(0, tc, row_weight if row_weight is not None else
                                      torch.ones(tc.size(0), dtype=exact, device=p.device), alpha=-(1.0 - eps))
                # g W = softmax W - eps / V sum_v W_v - (1 - eps) W_target, in one product with its correction
                correction = w.index_select(0, tc).mul_(-(1.0 - eps)).sub_(smoothing_row)
                out = grad_h[start : start + step]
                if row_weight is not None:
                    correction.mul_(row_weight.unsqueeze(-1).to(dtype))  # p's rows of padding are 0 already
                torch.addmm(correction, p, w, out=out)
                # g^T h = softmax^T (g h) - eps / V (sum of g h) on every row - (1 - eps) (g h) on the target's row
                if dtype == exact:
                    grad_w.addmm_(p.t(), hg)
                else:
                    grad_w += (p.t() @ hg).to(exact)
                grad_w.index_add_(0, tc, hg.to(exact), alpha=-(1.0 - eps))
                h_sum += hg.sum(0, dtype=exact)
            if needs_grad:
                grad_w -= (eps / vocab) * h_sum
                if grad_b is not None:
                    grad_b -= eps / vocab * (mask.sum() if mask is not None else n)
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


UNIGRAM_CHUNK = 1 << 24  # tokens counted at once: 128 MB of int64, whatever the corpus


def unigram_nll(target_tokens: np.ndarray, sentences: int, vocab_size: int, eos_id: int) -> float:
    """The NLL per target token (nats) of a model that ignores its source and predicts every token by its
    frequency in the training targets (EOS once a sentence): a loss that stays there has learned nothing of
    the source, whatever else is wrong (misaligned sides, a learning rate that diverged into this plateau)."""
    counts = np.zeros(vocab_size, dtype=np.float64)
    for start in range(0, len(target_tokens), UNIGRAM_CHUNK):  # a memory-mapped shard, counted a slice at a time
        counts += np.bincount(target_tokens[start : start + UNIGRAM_CHUNK], minlength=vocab_size)
    counts[eos_id] += sentences
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def perplexity(nll_per_token: float) -> float:
    return float(torch.tensor(min(nll_per_token, 100.0)).exp())


# A model still at the unigram level after this many times its warmup steps is not going to learn.
UNIGRAM_GRACE = 2


class LossWatch:
    """The training loss watched without making the host wait for the device: the first step whose loss was not
    finite is kept on the device (`watch`, every step) and read where the host waits anyway (`check`: before a log
    line, a validation or a checkpoint); and once, past twice the warmup, whether the training NLL is still at the
    unigram level (`still_unigram`)."""

    def __init__(self) -> None:
        self.first_bad_step: Tensor | None = None  # on the device: the first step whose loss was not finite
        self.bad_loss: Tensor | None = None
        self.unigram_checked = False  # whether the loss was held against the unigram level (once a run)

    def watch(self, loss_sum: Tensor, step: int) -> None:
        """Remember the first step whose loss was not finite, on the device: reading it every step would
        make the host wait for every step. It is read where the host waits anyway (`check`)."""
        if self.first_bad_step is None:
            self.first_bad_step = torch.zeros((), dtype=torch.long, device=loss_sum.device)
            self.bad_loss = torch.zeros((), dtype=loss_sum.dtype, device=loss_sum.device)
        first = ~torch.isfinite(loss_sum) & (self.first_bad_step == 0)
        self.first_bad_step = torch.where(first, step, self.first_bad_step)
        self.bad_loss = torch.where(first, loss_sum, self.bad_loss)

    def check(self) -> None:
        """Before a log line, a validation or a checkpoint: stop if the loss was not finite since the start."""
        if self.first_bad_step is not None and (step := int(self.first_bad_step)) > 0:
            raise NmtError(f"the loss became {float(self.bad_loss)} at step {step}",
                           "lower --lr-scale, or resume from an earlier checkpoint with another --seed")

    def still_unigram(self, nll: float, step: int, warmup: int, target_tokens: np.ndarray, sentences: int, vocab_size: int,
                      eos_id: int) -> float | None:
        """Once, past UNIGRAM_GRACE times the warmup: the unigram level (unigram_nll: predicting the targets by their
        frequency alone) when the training NLL is still within 5% of it; else None."""
        if self.unigram_checked or step < UNIGRAM_GRACE * warmup:
            return None
        self.unigram_checked = True
        level = unigram_nll(target_tokens, sentences, vocab_size, eos_id)
        return level if nll >= 0.95 * level else None
