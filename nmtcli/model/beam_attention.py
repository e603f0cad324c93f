"""A beam search step's attention on a GPU, in two Triton kernels made for its few queries (issue 33).

On an H200 a warm bf16 beam search spent 30% of its GPU time in PyTorch's memory-efficient attention: a
kernel made for long queries, given one query a row (self-attention) or `beam` a sentence (encoder-decoder
attention), fills one of the 64 rows of its tiles and pays for all of them. These kernels give each program
one row's head (self) or one sentence's head with all its beam queries (encoder-decoder), and read each key
and value once, as the step needs.

Self-attention also reads its cache through slots, so that beam search never reorders it. A survivor of a
step continues a parent row; the plain way (DecoderCache.reorder) copies the parent's keys and values of
every earlier position into the survivor's row, every step. Here row r's key and value for position p stay
where the row that computed them wrote them, and `slots[r, p]` says which beam (0..K-1) of r's sentence
that was: a reorder copies the parents' slots (int32), not their keys and values, as FasterTransformer's
masked attention reads its `cache_indirection`. The kernel reads how many positions to attend to from the
cache's position tensor on the device, not from a shape, so one CUDA graph of a step serves every position
of a batch (no span, no second set of buffers): one graph per shape class where there were one per class,
span and buffer set.

On a CPU the tests run these same kernels through Triton's interpreter (TRITON_INTERPRET=1), against their
PyTorch twins, which the CPU tests of whole searches run.
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import Tensor


def available(device: torch.device) -> bool:
    """Whether the kernel runs on `device`: a GPU with Triton (a CPU reads through slots with
    `gathered_attention`, the kernel's twin, where a test asks it to)."""
    if device.type != "cuda":
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def works(device: torch.device, dtype: torch.dtype, beam: int, d_k: int) -> bool:
    """Whether both kernels compile and run on `device` for this dtype, beam and head size: launched once on tiny
    tensors (the compiled kernels are the search's own: the same constants). Where they do not (a GPU or dtype
    Triton has no code for), one warning line, and beam search reorders its cache instead."""
    try:
        q = torch.zeros(beam, 1, 1, d_k, device=device, dtype=dtype)
        cache = torch.zeros(beam, 1, 2, d_k, device=device, dtype=dtype)
        slots = torch.zeros(beam, 2, device=device, dtype=torch.int32)
        kernel_attention(q, cache, cache, slots, torch.zeros(1, device=device, dtype=torch.long), beam)
        kernel_source_attention(q.view(1, beam, 1, d_k).transpose(1, 2), cache[:1], cache[:1],
                                torch.zeros(1, 1, 1, 2, device=device, dtype=dtype))
        return True
    except Exception as e:  # noqa: BLE001 - any failure of Triton's compiler or launch: the plain path works
        logging.getLogger("nmtcli").warning(
            f"nmt: warning: the beam search kernels do not run on this GPU in {str(dtype).removeprefix('torch.')} "
            f"({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}); beam search reorders its cache instead")
        return False


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    # Strides are not specialized: a class of another size would compile the kernel again.
    @triton.jit(do_not_specialize=["q_row", "q_head", "k_row", "k_head", "k_pos", "slot_row", "out_row", "out_head"])
    def beam_attention_kernel(q_ptr, k_ptr, v_ptr, slot_ptr, position_ptr, out_ptr,
                              q_row, q_head, k_row, k_head, k_pos, slot_row, out_row, out_head,
                              scale, BEAM: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
        # One program: one row's one head. softmax(q k_p / sqrt(d_k)) over positions p <= position,
        # with an online softmax (running maximum m and sum l) over blocks of positions.
        row = tl.program_id(0).to(tl.int64)  # offsets in int64: a class's cache passes 2^31 elements
        head = tl.program_id(1).to(tl.int64)
        length = tl.load(position_ptr) + 1  # this step's own position included
        d = tl.arange(0, D)
        q = tl.load(q_ptr + row * q_row + head * q_head + d).to(tl.float32) * scale
        first_row = (row // BEAM) * BEAM  # the sentence's first row: slots count from there
        m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), 0)
        l = tl.sum(tl.zeros([BLOCK], tl.float32), 0)
        acc = tl.zeros([D], tl.float32)
        for start in range(0, length, BLOCK):
            p = start + tl.arange(0, BLOCK)
            valid = p < length
            slot = tl.load(slot_ptr + row * slot_row + p, mask=valid, other=0).to(tl.int64)
            at = (first_row + slot)[:, None] * k_row + head * k_head + p[:, None].to(tl.int64) * k_pos + d[None, :]
            k = tl.load(k_ptr + at, mask=valid[:, None], other=0.0).to(tl.float32)
            s = tl.where(valid, tl.sum(k * q[None, :], 1), float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 0))
            correction = tl.exp(m - m_new)
            e = tl.exp(s - m_new)
            v = tl.load(v_ptr + at, mask=valid[:, None], other=0.0).to(tl.float32)
            l = l * correction + tl.sum(e, 0)
            acc = acc * correction + tl.sum(e[:, None] * v, 0)
            m = m_new
        tl.store(out_ptr + row * out_row + head * out_head + d, (acc / l).to(out_ptr.dtype.element_ty))

    return beam_attention_kernel


def beam_attention(q: Tensor, keys: Tensor, values: Tensor, slots: Tensor, position: Tensor, beam: int) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) V (sec. 3.2.1) of one new position a row over positions 0..position,
    each read from the row its slot names.

    q: (N, h, 1, d_k); keys, values: (N, h, span, d_k) with span > position, contiguous in d_k, the same
    strides; slots: (N', C) int32, N' >= N, C >= span, the beam within the row's sentence (rows `beam` a
    sentence, adjacent) whose row holds each position; position: (1,) the position this step wrote.
    Returns (N, h, 1, d_k). The Triton kernel on a GPU, its twin elsewhere.
    """
    if q.is_cuda:
        return kernel_attention(q, keys, values, slots, position, beam)
    return gathered_attention(q, keys, values, slots, position, beam)


def gathered_attention(q: Tensor, keys: Tensor, values: Tensor, slots: Tensor, position: Tensor, beam: int) -> Tensor:
    """What the kernel computes, in PyTorch operations: each row's keys/values gathered through its slots
    (a copy: what the kernel exists to avoid), the positions past `position` masked."""
    rows, span = q.size(0), keys.size(2)
    at = torch.arange(span, device=q.device)
    holder = (torch.arange(rows, device=q.device) // beam * beam).unsqueeze(1) + slots[:rows, :span].long()  # (N, span)
    k, v = (t[holder, :, at].transpose(1, 2) for t in (keys, values))  # (N, h, span, d_k)
    weights = torch.matmul(q, k.transpose(-1, -2)).mul_(q.size(-1) ** -0.5)
    weights.masked_fill_((at > position).view(1, 1, 1, span), float("-inf"))
    return torch.matmul(weights.softmax(dim=-1), v)


# Positions a program reads at a time, and its warps, by kernel: measured by benchmarks/gpu_check.py's
# beam_attention stage (H200, torch 2.11, Triton 3.6, 2026-11-26; 8,192 rows x 8 heads x 64; ms a call, bf16):
#   self, span 16:  block 16 / 32 / 64 with 1 warp 0.245 / 0.295 / 0.429, 2 warps 0.269 / 0.566 / 2.18
#   self, span 48:  1 warp 0.666 / 0.584 / 0.559, 2 warps 0.697 / 1.147 / 2.47; reorder + efficient: 1.22 (16), 2.07 (48)
#   source of 48:   1 warp 0.205 / 0.227 / 0.347, 2 warps 0.398 / 0.550 / 0.602; efficient: 0.224 (fp32: 0.617)
# (fp32 alike). One warp everywhere; 32 positions a block for self-attention, whose spans grow to 100 and more.
BLOCK, WARPS = 32, 1
SOURCE_BLOCK = 16


def kernel_attention(q: Tensor, keys: Tensor, values: Tensor, slots: Tensor, position: Tensor, beam: int,
                     block: int | None = None, warps: int | None = None) -> Tensor:
    """beam_attention by the Triton kernel (on a CPU: through Triton's interpreter, TRITON_INTERPRET=1 set
    before the kernel is first made)."""
    rows, heads, _, d_k = q.shape
    if keys.stride() != values.stride() or keys.stride(-1) != 1 or q.stride(-1) != 1:
        raise ValueError("keys and values need the same strides, each contiguous in d_k")
    out = torch.empty_like(q)
    _kernel()[(rows, heads)](
        q, keys, values, slots, position, out,
        q.stride(0), q.stride(1), keys.stride(0), keys.stride(1), keys.stride(2), slots.stride(0), out.stride(0), out.stride(1),
        d_k ** -0.5, BEAM=beam, D=d_k, BLOCK=block or BLOCK, num_warps=warps or WARPS)
    return out


@functools.cache
def _source_kernel():
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["q_sentence", "q_head", "q_beam", "k_sentence", "k_head", "k_pos", "mask_sentence",
                                   "out_sentence", "out_head", "out_beam", "length"])
    def source_attention_kernel(q_ptr, k_ptr, v_ptr, mask_ptr, out_ptr,
                                q_sentence, q_head, q_beam, k_sentence, k_head, k_pos, mask_sentence,
                                out_sentence, out_head, out_beam, length, scale,
                                BEAM: tl.constexpr, QUERIES: tl.constexpr, D: tl.constexpr, BLOCK: tl.constexpr):
        # One program: one sentence's one head, its BEAM queries (QUERIES: BEAM rounded up to a power of two)
        # against its source, each key and value read once for all of them; an online softmax over blocks.
        sentence = tl.program_id(0).to(tl.int64)
        head = tl.program_id(1).to(tl.int64)
        b = tl.arange(0, QUERIES)
        d = tl.arange(0, D)
        real = b < BEAM
        q = tl.load(q_ptr + sentence * q_sentence + head * q_head + b[:, None] * q_beam + d[None, :],
                    mask=real[:, None], other=0.0).to(tl.float32) * scale  # (QUERIES, D)
        m = tl.full([QUERIES], float("-inf"), tl.float32)
        l = tl.zeros([QUERIES], tl.float32)
        acc = tl.zeros([QUERIES, D], tl.float32)
        for start in range(0, length, BLOCK):
            p = start + tl.arange(0, BLOCK)
            valid = p < length
            at = sentence * k_sentence + head * k_head + p[:, None].to(tl.int64) * k_pos + d[None, :]
            k = tl.load(k_ptr + at, mask=valid[:, None], other=0.0).to(tl.float32)  # (BLOCK, D)
            bias = tl.load(mask_ptr + sentence * mask_sentence + p, mask=valid, other=float("-inf")).to(tl.float32)
            s = tl.sum(q[:, None, :] * k[None, :, :], 2) + bias[None, :]  # (QUERIES, BLOCK)
            m_new = tl.maximum(m, tl.max(s, 1))
            # A block of padding alone leaves m at -inf: no correction, no weight (not NaN).
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            correction = tl.exp(m - m_safe)
            e = tl.exp(s - m_safe[:, None])
            v = tl.load(v_ptr + at, mask=valid[:, None], other=0.0).to(tl.float32)
            l = l * correction + tl.sum(e, 1)
            acc = acc * correction[:, None] + tl.sum(e[:, :, None] * v[None, :, :], 1)
            m = m_new
        out = acc / l[:, None]
        tl.store(out_ptr + sentence * out_sentence + head * out_head + b[:, None] * out_beam + d[None, :],
                 out.to(out_ptr.dtype.element_ty), mask=real[:, None])

    return source_attention_kernel


def kernel_source_attention(q: Tensor, keys: Tensor, values: Tensor, mask: Tensor, block: int | None = None,
                            warps: int | None = None) -> Tensor:
    """Encoder-decoder attention of a step by the Triton kernel: q (n, h, beam, d_k), a sentence's beam queries
    against its keys and values (n, h, S, d_k) under an additive mask (n, 1, 1, S) (-inf at source padding) ->
    (n, h, beam, d_k). Its twin elsewhere is incremental.cached_attention, the same call with its two products."""
    n, heads, beam, d_k = q.shape
    if keys.stride() != values.stride() or keys.stride(-1) != 1 or q.stride(-1) != 1 or mask.stride(-1) != 1:
        raise ValueError("keys and values need the same strides, each (and the queries and mask) contiguous in the last")
    out = torch.empty_like(q)
    _source_kernel()[(n, heads)](
        q, keys, values, mask, out,
        q.stride(0), q.stride(1), q.stride(2), keys.stride(0), keys.stride(1), keys.stride(2), mask.stride(0),
        out.stride(0), out.stride(1), out.stride(2), keys.size(2), d_k ** -0.5,
        BEAM=beam, QUERIES=max(2, 1 << (beam - 1).bit_length()), D=d_k, BLOCK=block or SOURCE_BLOCK, num_warps=warps or WARPS)
    return out
