"""Attention over a padded source with no mask: the real keys of each sentence packed for a flash kernel.

The encoder self-attention and the encoder-decoder attention attend over a right-padded source. With
a boolean padding mask, `scaled_dot_product_attention` cannot use its flash kernel. In training on a
GPU (fp16/bf16, no attention dropout), where SOURCE_ATTENTION says "varlen", each sentence's real keys
and values are gathered into one packed tensor instead and attended through PyTorch's varlen flash kernel
(`torch.nn.attention.varlen`, 2.10 and later), which needs no mask; queries keep their padded layout.

Training swaps it in where the attention runs: `MultiHeadAttention` (transformer.py) asks `applies` and
hands its source mask to `attend`, so the Figure-1 classes pass the one boolean mask, as in inference.
Where to gather from is worked out from that mask in each call, on the device, so nothing waits for the
GPU: a few B x S operations, layers + decoder_layers of them a forward (the attention itself is B x h x T x S).
The CPU, fp32 and inference keep the masked kernel.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _load_varlen():
    """PyTorch's flash-attention kernel for packed sequences of different lengths (2.10 and later), or None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


# Loaded on first use on a GPU, not at import: the kernel's module imports TorchDynamo, which would
# add over a second to the start-up of every command, most of which never train on a GPU.
_UNLOADED = object()
VARLEN_ATTENTION = _UNLOADED


def varlen_attention():
    """The varlen kernel (loaded on the first call), or None where this PyTorch has none."""
    global VARLEN_ATTENTION
    if VARLEN_ATTENTION is _UNLOADED:
        VARLEN_ATTENTION = _load_varlen()
    return VARLEN_ATTENTION


def key_order(mask: Tensor) -> tuple[Tensor, Tensor]:
    """Where the real (non-pad) source tokens are, for attention with packed keys and no mask.

    mask: (B, 1, 1, S) boolean, True at real tokens. Returns order, (B*S,) positions of the flattened
    (B, S) source, real tokens first (row by row, in order), padding after them; and starts, (B+1,) int32
    offsets of each row's real tokens in that order. Computed on the device without waiting for it: the
    number of real tokens is only ever known there.
    """
    real = mask[:, 0, 0, :]
    flat = real.flatten()
    position = torch.arange(flat.numel(), device=flat.device)
    # Each token's place in the order: a real one's rank among the real ones; a pad's after all of them.
    # (Counts and a scatter, not a sort: no cast, and cheaper than sorting.)
    real_before = flat.cumsum(0)
    place = torch.where(flat, real_before - 1, real_before[-1:] + position - real_before)
    order = torch.empty_like(place).scatter_(0, place, position)
    starts = F.pad(real.sum(1, dtype=torch.int32).cumsum(0, dtype=torch.int32), (1, 0))
    return order, starts


# How teacher-forced attention over a padded source runs on a GPU, by compute dtype (issue 34): "varlen" packs
# each sentence's real keys for the varlen flash kernel (this module); the others give
# scaled_dot_product_attention a padding mask, with its backend chosen ("efficient", "cudnn", "math") or
# left to PyTorch ("sdpa"). fp32 is always masked (the flash kernels take half precision only).
# Measured by benchmarks/gpu_check.py's micro stage (train_throughput.py --variants attention=..., a whole
# training step of 1000 x 25 + 1000 x 25 tokens, bf16 autocast, H200, torch 2.11, 2026-11-26), target tokens/s:
#   base: varlen 393,685, sdpa (cuDNN) 479,146, efficient 520,100, cudnn 479,752, math 435,935
#   big:  varlen 211,298, sdpa (cuDNN) 237,529, efficient 262,745, cudnn 236,095, math 218,002
# The varlen kernel's backward took 729 us a call on 25-token sentences; the memory-efficient kernel with a
# padding mask is the fastest at both sizes (+32% and +24% over varlen).
SOURCE_ATTENTION: dict[torch.dtype, str] = {torch.bfloat16: "efficient", torch.float16: "efficient"}
MASKED_KERNELS = {"efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION", "math": "MATH"}  # SDPBackend names


def compute_dtype(weight: Tensor) -> torch.dtype:
    """What a forward pass with `weight` computes its matrix products in: autocast's dtype where it is on (for
    the device the weight is on), else the weight's."""
    kind = weight.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else weight.dtype


def applies(attention: nn.Module, x: Tensor) -> bool:
    """Whether a MultiHeadAttention over the padded source runs packed on queries x: in training, on a GPU,
    in fp16/bf16 (what the kernel takes), without attention dropout (which it does not have), where
    SOURCE_ATTENTION says so."""
    if not (x.is_cuda and attention.training) or attention.attention_dropout > 0 or varlen_attention() is None:
        return False
    return SOURCE_ATTENTION.get(compute_dtype(attention.out_proj.weight)) == "varlen"


def masked_kernels(dtype: torch.dtype, device: torch.device):
    """The sdpa_kernel context that SOURCE_ATTENTION chooses for a masked attention over the source on a GPU,
    or None (PyTorch's own choice)."""
    kind = SOURCE_ATTENTION.get(dtype) if device.type == "cuda" else None
    if kind not in MASKED_KERNELS:
        return None
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([getattr(SDPBackend, MASKED_KERNELS[kind])])


def attend(attention: nn.Module, x: Tensor, memory: Tensor, mask: Tensor) -> Tensor:
    """A MultiHeadAttention's output for every query position (padding too: its output is never used)
    against the real keys of its row; x: (B, T, d) queries, memory: (B, S, d) keys/values (x itself
    for self-attention), mask: (B, 1, 1, S) the source's padding mask, True at real tokens.

    Queries stay in their (B, T) layout, which the kernel reads as B sequences of T; keys and values
    are gathered real-tokens-first (`key_order`) and read through each row's start. The rows past the
    real keys are never read by the kernel, and their gradient is set to zero, not taken from it.
    """
    b, t, d = x.shape
    heads = attention.heads
    if attention.self_attention:
        q, k, v = attention.qkv_proj(x).chunk(3, dim=-1)
    else:
        q = attention.q_proj(x)
        k, v = attention.kv_proj(memory).chunk(2, dim=-1)
    order, starts = key_order(mask)
    real = (torch.arange(order.numel(), device=x.device) < starts[-1])[:, None, None]
    k, v = (torch.where(real, y.reshape(-1, heads, d // heads).index_select(0, order), 0) for y in (k, v))
    q = q.reshape(b * t, heads, d // heads)
    query_starts = torch.arange(0, b * t + 1, t, device=x.device, dtype=torch.int32)
    out = varlen_attention()(q, k, v, query_starts, starts, t, memory.size(1))
    return attention.out_proj(out.reshape(b, t, d))
