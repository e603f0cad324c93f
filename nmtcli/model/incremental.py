"""Incremental decoding: the Transformer's decoder one target position at a time (beam and greedy search).

Teacher forcing (transformer.py) runs the decoder over a whole target at once. A search knows one
new token per row at each step, so the decoder runs the same layers on that one position, reading the
keys/values of the earlier positions from a cache instead of recomputing them:

    state = start_decoding(model, memory, src_mask, beam, capacity)   # once per batch
    logits = decode_step(model, tokens, state)                       # once per position
    state.reorder(rows) / state.keep(sentences)                      # beam search between steps

Rows are sentences x beam, the beams of a sentence adjacent. The functions here compute what the
modules of transformer.py compute, with those modules' own weights; the model classes have no
decoding code.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from nmtcli.errors import NmtError
from nmtcli.model import beam_attention
from nmtcli.model.transformer import DecoderLayer, Embedding, MultiHeadAttention, Transformer

# alloc(role, shape, dtype) -> an empty tensor for one part of the decoding state (see start_decoding)
Alloc = Callable[[str, tuple[int, ...], torch.dtype], Tensor]


class DecoderCache:
    """Self-attention keys/values of every row (sentence x beam) at every decoded position.

    Buffers of fixed capacity, (rows, h, capacity, d_k) per layer, are allocated once per batch and
    position t is written in place at step t, so decoding allocates nothing per step. `position` is a
    device tensor, so that a captured step (CUDA graphs) can be replayed at every position.

    Attention reads the first `span` positions. Eager decoding reads exactly the positions written so
    far and needs no mask. A captured step has one span for a range of positions (`fixed_span`) and
    masks the positions beyond the current one.

    With `beam` set (model/beam_attention.py), the keys/values never move when the beam reorders: `slots`
    (rows, capacity), int32, says for each row and position which beam of the row's sentence holds that
    position, a reorder copies the slots of the parents, and attention reads through them. Then there is
    one set of buffers (no spare set to reorder into), and a captured step reads up to the position on the
    device, so one graph serves a whole batch (StepGraphs takes the whole capacity as its span).
    """

    def __init__(self, layers: int, rows: int, heads: int, capacity: int, d_k: int, dtype: torch.dtype, device: torch.device,
                 alloc: Alloc | None = None, beam: int | None = None):
        # Empty memory: eager steps read only what was written (fixed spans: see clear_unwritten).
        self._alloc = alloc or (lambda role, shape, dtype: torch.empty(shape, dtype=dtype, device=device))
        self._shape, self._dtype, self._layers = (rows, heads, capacity, d_k), dtype, layers
        self._buffers = self._buffer_set(0)
        self.keys, self.values = list(self._buffers[0]), list(self._buffers[1])  # the rows in use: views of the buffers
        self.capacity = capacity
        self.position = self._alloc("position", (1,), torch.long).zero_()  # the position the next step writes
        self.length = 0  # positions written, as the host knows it
        self.fixed_span: int | None = None  # set while a captured step runs
        self.mask: Tensor | None = None  # additive (1, 1, 1, span): -inf beyond `position` in a fixed span
        self._spare: tuple[list[Tensor], list[Tensor]] | None = None  # the second set of whole buffers
        self.beam = beam
        self.slots = None if beam is None else self._alloc("cache.slots", (rows, capacity), torch.int32).zero_()

    def _buffer_set(self, which: int) -> tuple[list[Tensor], list[Tensor]]:
        return tuple([self._alloc(f"cache.{which}.{kv}.{i}", self._shape, self._dtype) for i in range(self._layers)]
                     for kv in ("keys", "values"))

    def start_with(self, rows: int) -> None:
        """Use only the first `rows` rows until a reorder says which rows go on (beam search's first
        step: the beams of a sentence are still one hypothesis, decoded once)."""
        if self.length:
            raise ValueError("start_with() is for an empty cache")
        self.keys, self.values = ([b[:rows] for b in buffers] for buffers in self._buffers)

    @property
    def reads_slots(self) -> bool:
        return self.slots is not None

    def _own_slots(self, rows: int) -> Tensor:
        """(rows, 1): each row's own beam within its sentence, what a step writes into the slots of its
        position. Made by the step (a captured step makes it in its graph, not read from a batch's tensor)."""
        return (torch.arange(rows, device=self.position.device, dtype=torch.int32) % self.beam).unsqueeze(1)

    @property
    def rows(self) -> int:
        return self.keys[0].size(0)

    def span(self) -> int:
        return self.fixed_span if self.fixed_span is not None else self.length + 1

    def clear_unwritten(self) -> None:
        """Zero the positions not written yet, in both sets of buffers. A fixed span reads them (masked; but
        empty memory can hold NaN, and NaN * 0 is NaN): call before fixed-span steps on buffers that are
        new to them, and not within a captured step (the spare set may be made here)."""
        if self._spare is None and not self.reads_slots:
            self._spare = self._buffer_set(1)
        for buffers in (self._buffers, self._spare) if self._spare is not None else (self._buffers,):
            for buffer in (*buffers[0], *buffers[1]):
                buffer[: self.rows, :, self.length:].zero_()

    def host_state(self) -> tuple:
        """What the host knows of the cache: the positions written and which set of buffers is current.
        A captured step changes it as it runs; a replay does not (see advance)."""
        return self.length, self._buffers, self._spare, self.keys, self.values

    def set_host_state(self, state: tuple) -> None:
        self.length, self._buffers, self._spare, self.keys, self.values = state

    def advance(self) -> None:
        """What a fixed-span step does on the host, for a replay of it: one position more, and the set
        the step reordered into is the current one (with slots there is one set)."""
        self.length += 1
        if not self.reads_slots:
            self._use_spare(self.rows)

    def begin_step(self) -> None:
        if self.reads_slots:  # every row holds its own key/value of this position; attention reads up to it
            self.slots[: self.rows].index_copy_(1, self.position, self._own_slots(self.rows))
            self.mask = None
        elif self.fixed_span is not None:
            # (1, 1, 1, span), as every attention kernel takes a mask: broadcastable to (rows, h, 1, span).
            # (A 1-d mask broadcasts in the math but not in the backends' checks: cuDNN's reads size(-2).)
            visible = (torch.arange(self.fixed_span, device=self.position.device) <= self.position).view(1, 1, 1, -1)
            self.mask = torch.zeros(visible.shape, dtype=self.keys[0].dtype, device=visible.device).masked_fill_(~visible, float("-inf"))
        else:
            self.mask = None

    def write(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store this step's (rows, h, 1, d_k) keys/values of `layer`; return all positions attention reads."""
        span = self.span()
        keys, values = self.keys[layer], self.values[layer]
        keys.index_copy_(2, self.position, k)
        values.index_copy_(2, self.position, v)
        return keys[:, :, :span], values[:, :, :span]

    def end_step(self) -> None:
        self.position.add_(1)
        self.length += 1

    def reorder(self, rows: Tensor) -> None:
        """Continue with `rows` of the current rows (beam search: each survivor's parent); after
        start_with, more rows than there were.

        Copied into the spare buffers, which are then swapped in: each key/value byte moves once. A
        captured step copies its whole span and keeps the number of rows, so the two sets take turns
        (two graphs per span, one for each set: inference/graphs.py).
        """
        if self.fixed_span is not None and rows.numel() != self.rows:
            raise ValueError("a captured step cannot change the number of rows")
        if self.reads_slots and rows.numel() == self.rows:  # the parents' slots, not their keys/values
            slots = self.slots[: self.rows]
            slots.copy_(slots.index_select(0, rows))
            return
        if self.fixed_span is not None:
            self._swap(rows, self.fixed_span)
            return
        self._swap(rows)

    def keep(self, rows: Tensor) -> None:
        """Only `rows` go on (sentences that are finished leave): compacted into the front of the spare
        buffers, which are swapped in; nothing is allocated."""
        self._swap(rows)

    def _swap(self, rows: Tensor, span: int | None = None) -> None:
        """Rows `rows` of the first `span` positions (default: those written) into the spare set, swapped in."""
        if self.reads_slots:
            self._move_rows(rows)
            return
        if self._spare is None:  # the second set of buffers, made at the first reorder
            self._spare = self._buffer_set(1)
        span = self.length if span is None else span
        count = rows.numel()
        # The first `count` rows of a buffer are a contiguous view of it.
        for old, new in zip((*self.keys, *self.values), (*self._spare[0], *self._spare[1])):
            torch.index_select(old[:, :, :span], 0, rows, out=new[:count, :, :span])
        self._use_spare(count)

    def _move_rows(self, rows: Tensor) -> None:
        """With slots, rows `rows` (whole sentences, or the first step's one row a sentence into its `beam`)
        into the front rows of the one set of buffers, through a copy of the positions written; each now holds
        its own positions. Only between steps that change the rows: never in a captured step."""
        count, span = rows.numel(), self.length
        for buffer in (*self._buffers[0], *self._buffers[1]):
            buffer[:count, :, :span].copy_(buffer[:, :, :span].index_select(0, rows))
        self.slots[:count].copy_(self._own_slots(count).expand(-1, self.capacity) if count > self.rows else self.slots.index_select(0, rows))
        self.keys, self.values = ([b[:count] for b in buffers] for buffers in self._buffers)

    def _use_spare(self, rows: int) -> None:
        self._buffers, self._spare = self._spare, self._buffers
        self.keys, self.values = ([b[:rows] for b in buffers] for buffers in self._buffers)


class DecoderState:
    """What incremental decoding keeps between steps: the self-attention cache of every row (rows =
    sentences x beam, beams of a sentence adjacent) and, computed once, the encoder-decoder keys/values
    of every sentence with its additive source mask."""

    def __init__(self, memory_kv: list[tuple[Tensor, Tensor]], memory_mask: Tensor, beam: int, cache: DecoderCache):
        self.memory_kv = memory_kv
        self.memory_mask = memory_mask
        self.beam = beam
        self.cache = cache

    def reorder(self, rows: Tensor) -> None:
        """Beam search: row i continues from row rows[i] (the same number of rows)."""
        self.cache.reorder(rows)

    def keep(self, sentences: Tensor, in_place: bool = False) -> None:
        """Only these sentences (indices into the current ones) go on decoding, with all their rows.
        `in_place`: into the front of the tensors they are in (which keep their addresses; for CUDA graphs)."""
        rows = (sentences[:, None] * self.beam + torch.arange(self.beam, device=sentences.device)).view(-1)
        self.cache.keep(rows)
        select = select_in_front if in_place else lambda t, index: t.index_select(0, index)
        self.memory_kv = [(select(k, sentences), select(v, sentences)) for k, v in self.memory_kv]
        self.memory_mask = select(self.memory_mask, sentences)


def select_in_front(t: Tensor, index: Tensor) -> Tensor:
    """t's rows `index`, written into its first len(index) rows: a view of t (the same address)."""
    front = t[: index.numel()]
    front.copy_(t.index_select(0, index))
    return front


def start_decoding(model: Transformer, memory: Tensor, src_mask: Tensor, beam: int = 1, capacity: int | None = None,
                   alloc: Alloc | None = None, reorders: bool = False) -> DecoderState:
    """State for decoding `beam` rows per sentence of `memory` (n, S, d), the encoder output, one
    position at a time, for at most `capacity` positions (default: as many as the position table holds).
    `alloc(role, shape, dtype)`: where the state's tensors go (default: new ones; CUDA graphs: tensors
    kept from batch to batch, inference/graphs.py's Arena). `reorders`: the search continues rows from other
    rows (beam search), so its cache may be read through slots (reads_slots) instead of reordered."""
    cfg = model.config
    capacity = min(capacity or cfg.max_positions, cfg.max_positions)
    # Contiguous once, not copied by every step's matrix product.
    own = (lambda role, t: t.contiguous()) if alloc is None else (lambda role, t: alloc(role, t.shape, t.dtype).copy_(t))
    memory_kv = [tuple(own(f"memory.{kv}.{i}", t) for kv, t in zip(("keys", "values"), memory_keys_values(layer.cross_attn, memory)))
                 for i, layer in enumerate(model.decoder.layers)]
    dtype = memory_kv[0][0].dtype  # what the projections compute in (bf16 under autocast)
    # An additive mask, made once: -inf at source padding.
    memory_mask = own("memory_mask", torch.zeros(src_mask.shape, dtype=dtype, device=memory.device).masked_fill_(~src_mask, float("-inf")))
    slots = beam if reorders and reads_slots(memory.device, beam, dtype, cfg.d_k) else None
    cache = DecoderCache(cfg.decoder_layers, memory.size(0) * beam, cfg.heads, capacity, cfg.d_k, dtype, memory.device, alloc, slots)
    return DecoderState(memory_kv, memory_mask, beam, cache)


# How a beam search's self-attention cache follows the beam (NMT_BEAM_CACHE): "slots" reads it through slots
# and never moves it (model/beam_attention.py), "reorder" copies the parents' keys/values at every step,
# "auto" reads through slots where the kernel runs (a GPU with Triton).
BEAM_CACHES = ("auto", "slots", "reorder")


def reads_slots(device: torch.device, beam: int, dtype: torch.dtype | None = None, d_k: int | None = None) -> bool:
    """Whether a search of `beam` rows a sentence keeps its cache in place and reads it through slots (auto: where
    the kernels run, for `dtype` and `d_k` when given: beam_attention.works)."""
    choice = os.environ.get("NMT_BEAM_CACHE", "auto")
    if choice not in BEAM_CACHES:
        raise NmtError(f"NMT_BEAM_CACHE is {choice!r}", f"set it to one of {', '.join(BEAM_CACHES)}, or unset it (auto)", exit_code=2)
    if beam < 2 or choice == "reorder":  # one row a sentence never reorders
        return False
    if choice == "slots":
        return True
    return device.type == "cuda" and beam_attention.available(device) and (
        dtype is None or beam_attention.works(device, dtype, beam, d_k))


# The attention kernels a decoding step may use on a GPU, by the dtype its keys and values are in (issue 33).
# A step's queries are one position a row (or `beam` a sentence) against a fixed span or the source, always
# under a mask, so flash is out. Measured by benchmarks/gpu_check.py's decode_attention stage (4,096 rows
# against a span of 48, and 1,024 sentences x 4 beams against a source of 48; H200, torch 2.11, 2026-11-26),
# ms a call at one shape / with a new shape every call:
#   bf16 self:  PyTorch's choice (cuDNN) 0.40 / 52.2, efficient 0.42 / 0.50, cuDNN 0.40 / 0.43, math 1.44 / 1.46
#   bf16 cross: PyTorch's choice (cuDNN) 0.21 / 66.4, efficient 0.11 / 0.14, cuDNN 0.21 / 0.32, math 0.42 / 0.43
#   fp32 self:  PyTorch's choice (efficient) 1.18 / 1.37, efficient 1.17 / 1.36, math 0.85 / 0.87
#   fp32 cross: PyTorch's choice (efficient) 0.30 / 0.63, efficient 0.30 / 0.36, math 0.25 / 0.45
# Left to itself PyTorch takes cuDNN for bf16, which builds a plan on the host for every new shape (50-66 ms),
# and eager decoding makes a new shape nearly every step (the span grows, rows leave): bf16 decoding was
# slower than fp32. bf16 and fp16 take the memory-efficient kernel (math where it refuses a shape); fp32,
# which cuDNN never takes, the two matrix products of math, faster than the efficient kernel at one query a row.
DECODING_KERNELS = {torch.float32: (SDPBackend.MATH,),
                    torch.bfloat16: (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH),
                    torch.float16: (SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH)}


def decoding_kernels(dtype: torch.dtype, device: torch.device):
    """The context a decoding step's attention runs in: DECODING_KERNELS[dtype] where the step attends
    through scaled_dot_product_attention (a GPU), nothing on a CPU (two matrix products there)."""
    if not fused_attention(device):
        return contextlib.nullcontext()
    return sdpa_kernel(list(DECODING_KERNELS[dtype]))


def decode_step(model: Transformer, tokens: Tensor, state: DecoderState, project: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """One step of incremental decoding: the newest token of each row (N,) -> next-token logits (N, V), or (N, S)
    through `project`, the output projection restricted to a shortlist's S ids (inference/shortlist.py)."""
    x = embed_at(model.embedding, tokens, state.cache.position)
    state.cache.begin_step()
    with decoding_kernels(state.cache.keys[0].dtype, x.device):
        for i, layer in enumerate(model.decoder.layers):
            x = decoder_layer_step(layer, x, state, i)
    state.cache.end_step()
    if model.decoder.final_norm is not None:
        x = model.decoder.final_norm(x)
    return (project or model.logits)(x)[:, 0]


def embed_at(embedding: Embedding, tokens: Tensor, position: Tensor) -> Tensor:
    """Embedding's output for tokens (N,) all at `position`, a device tensor of one element -> (N, 1, d)
    (no dropout: inference)."""
    return (embedding.tokens(tokens) * embedding.scale + embedding.positions.index_select(0, position)).unsqueeze(1)


def decoder_layer_step(layer: DecoderLayer, x: Tensor, state: DecoderState, i: int) -> Tensor:
    """DecoderLayer i for one new position per row, x: (N, 1, d)."""
    x = layer.sublayer[0](x, lambda y: self_attention_step(layer.self_attn, y, state.cache, i))
    x = layer.sublayer[1](x, lambda y: memory_attention_step(layer.cross_attn, y, *state.memory_kv[i], state.memory_mask,
                                                             few_queries=state.cache.reads_slots))
    return layer.sublayer[2](x, layer.ffn)


def memory_keys_values(attention: MultiHeadAttention, memory: Tensor) -> tuple[Tensor, Tensor]:
    """Encoder-decoder attention's keys and values, (B, h, S, d_k) each: computed once per sentence."""
    return tuple(attention.split_heads(t) for t in attention.kv_proj(memory).chunk(2, dim=-1))


def self_attention_step(attention: MultiHeadAttention, x: Tensor, cache: DecoderCache, layer: int) -> Tensor:
    """Self-attention of one new position (N, 1, d) over itself and all earlier ones, kept in `cache`."""
    q, k, v = (attention.split_heads(t) for t in attention.qkv_proj(x).chunk(3, dim=-1))
    keys, values = cache.write(layer, k, v)
    if cache.reads_slots:
        out = beam_attention.beam_attention(q, keys, values, cache.slots, cache.position, cache.beam)
    else:
        out = cached_attention(q, keys, values, cache.mask)
    return attention.out_proj(out.transpose(1, 2).flatten(2))


def memory_attention_step(attention: MultiHeadAttention, x: Tensor, k: Tensor, v: Tensor, mask: Tensor,
                          few_queries: bool = False) -> Tensor:
    """Encoder-decoder attention of one new position for rows grouped by sentence.

    x: (n * beam, 1, d), beams of a sentence adjacent; k, v: (n, h, S, d_k); mask (n, 1, 1, S), additive.
    The beam hypotheses of a sentence are its `beam` queries against one copy of its keys/values, so
    nothing is repeated per beam and beam reordering never touches them. `few_queries`: on the kernel made
    for a step's few queries (model/beam_attention.py), where the search reads its cache through slots.
    """
    rows, n = x.size(0), k.size(0)
    q = attention.q_proj(x).view(n, rows // n, attention.heads, -1).transpose(1, 2)  # (n, h, beam, d_k)
    few_queries &= q.is_cuda  # elsewhere the two products of cached_attention are the kernel's twin
    out = beam_attention.kernel_source_attention(q, k, v, mask) if few_queries else cached_attention(q, k, v, mask)
    return attention.out_proj(out.transpose(1, 2).reshape(rows, 1, -1))


def fused_attention(device: torch.device) -> bool:
    """Whether a decoding step's attention runs in `scaled_dot_product_attention` (a GPU) or in two
    matrix products (a CPU). The tests switch it on for a CPU, to run the GPU's calls there."""
    return device.type != "cpu"


def cached_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k) + mask) V for the few queries of a decoding step (sec. 3.2.1).

    q: (B, h, Lq, d_k), k and v: (B, h, Lk, d_k); mask: additive, 4-d, broadcastable to (B, h, Lq, Lk).
    On a CPU two batched matrix products are faster than `scaled_dot_product_attention`, whose blocked
    kernel is made for long queries, not for the one query per row (or `beam` per sentence) of a step;
    on a GPU the fused kernel is the right one.
    """
    if fused_attention(q.device):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    weights = torch.matmul(q, k.transpose(-1, -2)).mul_(q.size(-1) ** -0.5)
    if mask is not None:
        weights.add_(mask)
    return torch.matmul(weights.softmax(dim=-1), v)
