"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), section 3.

Each class is one box of the paper's Figure 1. Shapes: B batch, S source length, T target length,
d = d_model, h = heads, d_k = d / h, V vocabulary.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmtcli.model.config import ModelConfig

def sinusoidal_positions(length: int, d_model: int, layout: str = "interleaved") -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)) (sec. 3.5).

    layout "interleaved" places the features as the formula indexes them; "sines_first" (tensor2tensor,
    Marian) holds the same d_model/2 sines in the first half and the cosines in the second.
    """
    # On the CPU, explicitly: under a `meta` device context (see skeleton) the table would have no values.
    position = torch.arange(length, dtype=torch.float64, device="cpu").unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64, device="cpu")
    angle = position / torch.pow(10000.0, two_i / d_model)
    table = torch.zeros(length, d_model, dtype=torch.float64, device="cpu")
    if layout == "sines_first":
        table[:, : d_model // 2] = torch.sin(angle)
        table[:, d_model // 2 :] = torch.cos(angle)
    else:
        table[:, 0::2] = torch.sin(angle)
        table[:, 1::2] = torch.cos(angle)
    return table.float()


def _activation(name: str):
    return {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}[name]


def _load_varlen():
    """PyTorch's flash-attention kernel for packed sequences of different lengths (2.10 and later), or None."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


# Attention over padded sources (encoder self-attention, encoder-decoder attention) with a boolean mask
# keeps scaled_dot_product_attention off its flash kernel. In training on a GPU the real keys of each
# sentence are packed instead and attended through this kernel, which needs no mask (KeyPadding).
# Loaded on first use on a GPU: its module imports TorchDynamo, 1.4 s of every process's start-up.
_UNLOADED = object()
VARLEN_ATTENTION = _UNLOADED


def varlen_attention():
    global VARLEN_ATTENTION
    if VARLEN_ATTENTION is _UNLOADED:
        VARLEN_ATTENTION = _load_varlen()
    return VARLEN_ATTENTION


class KeyPadding(NamedTuple):
    """Where the real (non-pad) source tokens are, for attention with packed keys and no mask.

    order: (B*S,) positions of the flattened (B, S) source, real tokens first (row by row, in order),
    padding after them; starts: (B+1,) int32 offsets of each row's real tokens in that order;
    mask: (B, 1, 1, S) the same as a boolean mask, for the dense kernel. Built on the device without
    waiting for it: the number of real tokens is only ever known there.
    """

    order: Tensor
    starts: Tensor
    mask: Tensor

    @classmethod
    def of(cls, src: Tensor, pad_id: int) -> KeyPadding:
        real = src != pad_id
        order = torch.sort((~real).flatten().to(torch.uint8), stable=True).indices
        starts = F.pad(real.sum(1).cumsum(0), (1, 0)).to(torch.int32)
        return cls(order, starts, real[:, None, None, :])


def packed_attention_applies(model: nn.Module, src: Tensor) -> bool:
    """Whether teacher-forced attention over the source runs packed: on a GPU, in fp16/bf16 (what the
    kernel takes) and without attention dropout (which it does not have)."""
    if not src.is_cuda or (model.training and model.config.attention_dropout > 0) or varlen_attention() is None:
        return False
    dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else model.embedding.tokens.weight.dtype
    return dtype in (torch.float16, torch.bfloat16)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V) (sec. 3.2.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (sec. 3.2.1) runs in
    `scaled_dot_product_attention`, which picks the flash or memory-efficient kernel on a GPU.
    Self-attention projects Q, K and V with one fused matrix; encoder-decoder attention projects Q from
    the decoder and K, V (fused) from the encoder output.
    """

    def __init__(self, config: ModelConfig, self_attention: bool):
        super().__init__()
        d = config.d_model
        self.heads = config.heads
        self.attention_dropout = config.attention_dropout
        self.self_attention = self_attention
        if self_attention:
            self.qkv_proj = nn.Linear(d, 3 * d)
        else:
            self.q_proj = nn.Linear(d, d)
            self.kv_proj = nn.Linear(d, 2 * d)
        self.out_proj = nn.Linear(d, d)

    def _split_heads(self, x: Tensor) -> Tensor:  # (B, L, d) -> (B, h, L, d_k)
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | KeyPadding | None = None,
                causal: bool = False) -> Tensor:
        """x: (B, T, d) queries; memory: (B, S, d) keys/values for encoder-decoder attention, else x.

        mask: boolean, broadcastable to (B, h, T, S), True where attention is allowed; or KeyPadding,
        the source's padding for attention with packed keys (training on a GPU).
        """
        if isinstance(mask, KeyPadding):
            return self._attend_packed(x, x if memory is None else memory, mask)
        if self.self_attention:
            q, k, v = (self._split_heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
        else:
            q = self._split_heads(self.q_proj(x))
            k, v = self.memory_keys_values(memory)
        return self._attend(q, k, v, mask, causal)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
        dropout = self.attention_dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
        return self.out_proj(out.transpose(1, 2).flatten(2))

    def _attend_packed(self, x: Tensor, memory: Tensor, keys: KeyPadding) -> Tensor:
        """Every query position (padding too: its output is never used) against the real keys of its row.

        Queries stay in their (B, T) layout, which the kernel reads as B sequences of T; keys and values
        are gathered real-tokens-first (keys.order) and read through keys.starts. The rows past the real
        keys are never read by the kernel, and their gradient is set to zero, not taken from it.
        """
        b, t, d = x.shape
        if self.self_attention:
            q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
        else:
            q = self.q_proj(x)
            k, v = self.kv_proj(memory).chunk(2, dim=-1)
        real = (torch.arange(keys.order.numel(), device=x.device) < keys.starts[-1])[:, None, None]
        k, v = (torch.where(real, y.reshape(-1, self.heads, d // self.heads).index_select(0, keys.order), 0) for y in (k, v))
        q = q.reshape(b * t, self.heads, d // self.heads)
        query_starts = torch.arange(0, b * t + 1, t, device=x.device, dtype=torch.int32)
        out = varlen_attention()(q, k, v, query_starts, keys.starts, t, memory.size(1))
        return self.out_proj(out.reshape(b, t, d))

    def memory_keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder-decoder attention's keys and values, (B, h, S, d_k) each: computed once per sentence."""
        return tuple(self._split_heads(t) for t in self.kv_proj(memory).chunk(2, dim=-1))

    def step_self(self, x: Tensor, cache: DecoderCache, layer: int) -> Tensor:
        """Self-attention of one new position (N, 1, d) over itself and all earlier ones, kept in `cache`."""
        q, k, v = (self._split_heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
        keys, values = cache.write(layer, k, v)
        return self.out_proj(cached_attention(q, keys, values, cache.mask).transpose(1, 2).flatten(2))

    def step_memory(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """Encoder-decoder attention of one new position for rows grouped by sentence.

        x: (n * beam, 1, d), beams of a sentence adjacent; k, v: (n, h, S, d_k); mask (n, 1, 1, S), additive.
        The beam hypotheses of a sentence are its `beam` queries against one copy of its keys/values, so
        nothing is repeated per beam and beam reordering never touches them.
        """
        rows, n = x.size(0), k.size(0)
        q = self.q_proj(x).view(n, rows // n, self.heads, -1).transpose(1, 2)  # (n, h, beam, d_k)
        out = cached_attention(q, k, v, mask)
        return self.out_proj(out.transpose(1, 2).reshape(rows, 1, -1))


def cached_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k) + mask) V for the few queries of a decoding step (sec. 3.2.1).

    On a CPU two batched matrix products beat `scaled_dot_product_attention`, whose blocked kernel
    is made for long queries (2.7x faster for encoder-decoder attention of 32 sentences x beam 4, 1.2-1.4x
    for self-attention, on the development machine); on a GPU the fused kernel is the right one.
    """
    if q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    weights = torch.matmul(q, k.transpose(-1, -2)).mul_(q.size(-1) ** -0.5)
    if mask is not None:
        weights.add_(mask)
    return torch.matmul(weights.softmax(dim=-1), v)


class DecoderCache:
    """Self-attention keys/values of every row (sentence x beam) at every decoded position.

    Buffers of fixed capacity, (rows, h, capacity, d_k) per layer, are allocated once per batch and
    position t is written in place at step t, so decoding allocates nothing per step. `position` is a
    device tensor, so that a captured step (CUDA graphs) can be replayed at every position.

    Attention reads the first `span` positions. Eager decoding reads exactly the positions written so
    far and needs no mask. A captured step has one span for a range of positions (`fixed_span`) and
    masks the positions beyond the current one.
    """

    def __init__(self, layers: int, rows: int, heads: int, capacity: int, d_k: int, dtype: torch.dtype, device: torch.device):
        # Empty memory: eager steps read only what was written (fixed spans: see clear_unwritten).
        shape = (rows, heads, capacity, d_k)
        self._buffers = ([torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)],
                         [torch.empty(shape, dtype=dtype, device=device) for _ in range(layers)])
        self.keys, self.values = list(self._buffers[0]), list(self._buffers[1])  # the rows in use: views of the buffers
        self.capacity = capacity
        self.position = torch.zeros(1, dtype=torch.long, device=device)  # the position the next step writes
        self.length = 0  # positions written, as the host knows it
        self.fixed_span: int | None = None  # set while a captured step runs
        self.mask: Tensor | None = None  # additive (1, 1, 1, span): -inf beyond `position` in a fixed span
        self._spare: tuple[list[Tensor], list[Tensor]] | None = None  # the second set of whole buffers

    def start_with(self, rows: int) -> None:
        """Use only the first `rows` rows until a reorder says which rows go on (beam search's first
        step: the beams of a sentence are still one hypothesis, decoded once)."""
        if self.length:
            raise ValueError("start_with() is for an empty cache")
        self.keys, self.values = ([b[:rows] for b in buffers] for buffers in self._buffers)

    @property
    def rows(self) -> int:
        return self.keys[0].size(0)

    def span(self) -> int:
        return self.fixed_span if self.fixed_span is not None else self.length + 1

    def clear_unwritten(self) -> None:
        """Zero the positions not written yet. A fixed span reads them (masked; but empty memory can hold
        NaN, and NaN * 0 is NaN): call before fixed-span steps on buffers that are new to them."""
        for buffer in (*self.keys, *self.values):
            buffer[:, :, self.length:].zero_()

    def begin_step(self) -> None:
        if self.fixed_span is not None:
            visible = torch.arange(self.fixed_span, device=self.position.device) <= self.position
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

        Eager: copied into the spare buffers, which are then swapped in; a captured step copies back in
        place, since its buffers must keep their addresses.
        """
        if self.fixed_span is not None:
            if rows.numel() != self.rows:
                raise ValueError("a captured step cannot change the number of rows")
            for buffer in (*self.keys, *self.values):
                buffer[:, :, :self.fixed_span] = buffer[:, :, :self.fixed_span].index_select(0, rows)
            return
        self._swap(rows)

    def keep(self, rows: Tensor) -> None:
        """Only `rows` go on (sentences that are finished leave): compacted into the front of the spare
        buffers, which are swapped in; nothing is allocated."""
        self._swap(rows)

    def _swap(self, rows: Tensor) -> None:
        if self._spare is None:  # the second set of buffers, made at the first reorder
            self._spare = tuple([torch.empty_like(b) for b in buffers] for buffers in self._buffers)
        span, count = self.length, rows.numel()
        # The first `count` rows of a buffer are a contiguous view of it.
        spare_keys, spare_values = ([b[:count] for b in buffers] for buffers in self._spare)
        for old, new in zip((*self.keys, *self.values), (*spare_keys, *spare_values)):
            torch.index_select(old[:, :, :span], 0, rows, out=new[:, :, :span])
        self._buffers, self._spare = self._spare, self._buffers
        self.keys, self.values = spare_keys, spare_values


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (sec. 3.3); the activation is a config switch."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.linear1 = nn.Linear(config.d_model, config.d_ff)
        self.linear2 = nn.Linear(config.d_ff, config.d_model)
        self.activation = _activation(config.activation)
        self.dropout = nn.Dropout(config.activation_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class SublayerConnection(nn.Module):
    """LayerNorm(x + Dropout(Sublayer(x))) (sec. 3.1, 5.4); with norm="pre", x + Dropout(Sublayer(LayerNorm(x)))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.norm = nn.LayerNorm(config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.pre_norm = config.norm == "pre"

    def forward(self, x: Tensor, sublayer) -> Tensor:
        if self.pre_norm:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    """Multi-head self-attention, then a position-wise feed-forward network (sec. 3.1)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, self_attention=True)
        self.ffn = FeedForward(config)
        self.sublayer = nn.ModuleList(SublayerConnection(config) for _ in range(2))

    def forward(self, x: Tensor, src_mask: Tensor | KeyPadding) -> Tensor:
        x = self.sublayer[0](x, lambda y: self.self_attn(y, mask=src_mask))
        return self.sublayer[1](x, self.ffn)


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention over the encoder output, feed-forward (sec. 3.1)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(config, self_attention=True)
        self.cross_attn = MultiHeadAttention(config, self_attention=False)
        self.ffn = FeedForward(config)
        self.sublayer = nn.ModuleList(SublayerConnection(config) for _ in range(3))

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | KeyPadding) -> Tensor:
        x = self.sublayer[0](x, lambda y: self.self_attn(y, causal=True))
        x = self.sublayer[1](x, lambda y: self.cross_attn(y, memory, mask=src_mask))
        return self.sublayer[2](x, self.ffn)

    def step(self, x: Tensor, state: DecoderState, layer: int) -> Tensor:
        """The same layer for one new position per row (incremental decoding)."""
        x = self.sublayer[0](x, lambda y: self.self_attn.step_self(y, state.cache, layer))
        x = self.sublayer[1](x, lambda y: self.cross_attn.step_memory(y, *state.memory_kv[layer], state.memory_mask))
        return self.sublayer[2](x, self.ffn)


class Embedding(nn.Module):
    """Learned embeddings times sqrt(d_model) (sec. 3.4) plus sinusoidal positions (sec. 3.5), then dropout (sec. 5.4).

    One matrix serves the source embedding, the target embedding and the pre-softmax projection
    (the joint vocabulary of sec. 5.1 makes this possible).
    """

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_id)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.config = config
        self.reset_positions()
        self.dropout = nn.Dropout(config.dropout)

    def reset_positions(self) -> None:
        """(Re)compute the table: it is not stored with the weights, and a model built on the meta device has none."""
        cfg = self.config
        device = self.tokens.weight.device if self.tokens.weight.device.type != "meta" else None
        table = sinusoidal_positions(cfg.max_positions, cfg.d_model, cfg.positions).to(device)
        self.register_buffer("positions", table, persistent=False)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (B, L) ids at positions 0 .. L - 1."""
        length = tokens.size(1)
        if length > self.positions.size(0):
            raise ValueError(f"sequence of {length} positions exceeds max_positions={self.positions.size(0)}")
        return self.dropout(self.tokens(tokens) * self.scale + self.positions[:length])

    def at(self, tokens: Tensor, position: Tensor) -> Tensor:
        """tokens: (N,) ids all at `position`, a device tensor of one element -> (N, 1, d) (no dropout: inference)."""
        return (self.tokens(tokens) * self.scale + self.positions.index_select(0, position)).unsqueeze(1)


class Encoder(nn.Module):
    """N encoder layers over the embedded source (Figure 1, left)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm == "pre" else None

    def forward(self, x: Tensor, src_mask: Tensor | KeyPadding) -> Tensor:
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.final_norm(x) if self.final_norm is not None else x


class Decoder(nn.Module):
    """N decoder layers over the embedded target, attending to the encoder output (Figure 1, right)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm == "pre" else None

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor | KeyPadding) -> Tensor:
        for layer in self.layers:
            x = layer(x, memory, src_mask)
        return self.final_norm(x) if self.final_norm is not None else x

    def step(self, x: Tensor, state: DecoderState) -> Tensor:
        state.cache.begin_step()
        for i, layer in enumerate(self.layers):
            x = layer.step(x, state, i)
        state.cache.end_step()
        return self.final_norm(x) if self.final_norm is not None else x


class Transformer(nn.Module):
    """Encoder-decoder Transformer (Figure 1). `forward` returns logits (B, T, V) for teacher forcing."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embedding = Embedding(config)  # one matrix for source, target and output (sec. 3.4)
        self.encoder = Encoder(config)
        self.decoder = Decoder(config)
        # Marian learns a bias on the output logits; the paper's model has none (sec. 3.4).
        self.final_logits_bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.final_logits_bias else None
        # Set by inference code that keeps the output projection in another form: packed for a CPU
        # (inference/cpu.py) or a half-precision copy (inference/precision.py).
        self.packed_output: nn.Module | None = None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # Xavier-uniform projections and N(0, d^-1/2) embeddings: with the sqrt(d) scale of sec. 3.4 the
        # embedded tokens start at unit variance, the same scale as the positional encodings.
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)
        nn.init.normal_(self.embedding.tokens.weight, mean=0.0, std=self.config.d_model**-0.5)
        with torch.no_grad():
            self.embedding.tokens.weight[self.config.pad_id].zero_()

    def source_mask(self, src: Tensor) -> Tensor:
        """(B, 1, 1, S), True at real tokens: no query attends to source padding."""
        return (src != self.config.pad_id)[:, None, None, :]

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        src_mask = self.source_mask(src)
        return self.encoder(self.embedding(src), src_mask), src_mask

    def logits(self, hidden: Tensor) -> Tensor:
        """The pre-softmax linear transformation, sharing the embedding matrix (sec. 3.4)."""
        if self.packed_output is not None:
            return self.packed_output(hidden)
        return F.linear(hidden, self.embedding.tokens.weight, self.final_logits_bias)

    def forward(self, src: Tensor, tgt_in: Tensor, hidden: bool = False) -> Tensor:
        """src: (B, S) source ids ending in EOS; tgt_in: (B, T) BOS followed by the target shifted right.

        Returns the logits (B, T, V), or with hidden=True the decoder output (B, T, d) before the
        output projection: training projects it inside the loss, a chunk at a time (training/loss.py).
        """
        if packed_attention_applies(self, src):
            src_mask = KeyPadding.of(src, self.config.pad_id)
            memory = self.encoder(self.embedding(src), src_mask)
        else:
            memory, src_mask = self.encode(src)
        # Target padding sits after the real tokens, so the causal mask alone keeps real positions from
        # seeing it; what padded positions compute is excluded from the loss.
        out = self.decoder(self.embedding(tgt_in), memory, src_mask)
        return out if hidden else self.logits(out)

    def start_decoding(self, memory: Tensor, src_mask: Tensor, beam: int = 1, capacity: int | None = None) -> DecoderState:
        """State for decoding `beam` rows per sentence of `memory` (n, S, d), one position at a time,
        for at most `capacity` positions (default: as many as the position table holds)."""
        cfg = self.config
        capacity = min(capacity or cfg.max_positions, cfg.max_positions)
        # Contiguous once, not copied by every step's matrix product.
        memory_kv = [tuple(t.contiguous() for t in layer.cross_attn.memory_keys_values(memory)) for layer in self.decoder.layers]
        dtype = memory_kv[0][0].dtype  # what the projections compute in (bf16 under autocast)
        # An additive mask, made once: -inf at source padding.
        memory_mask = torch.zeros(src_mask.shape, dtype=dtype, device=memory.device).masked_fill_(~src_mask, float("-inf"))
        cache = DecoderCache(cfg.layers, memory.size(0) * beam, cfg.heads, capacity, cfg.d_k, dtype, memory.device)
        return DecoderState(memory_kv, memory_mask, beam, cache)

    def decode_step(self, tokens: Tensor, state: DecoderState) -> Tensor:
        """One step of incremental decoding: the newest token of each row (N,) -> next-token logits (N, V)."""
        x = self.embedding.at(tokens, state.cache.position)
        return self.logits(self.decoder.step(x, state))[:, 0]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def count_parameters(config: ModelConfig) -> int:
    """Parameters of the model `config` describes, counted without allocating them (shared matrix once)."""
    return skeleton(config).num_parameters()


_INITIALIZERS = ("normal_", "uniform_", "xavier_uniform_", "kaiming_uniform_", "zeros_", "ones_", "constant_")


def skeleton(config: ModelConfig) -> Transformer:
    """The model `config` describes on the `meta` device: shapes without memory, to count or to load into.

    Its initializers are skipped: there is nothing to fill, and PyTorch runs `normal_` of a meta tensor
    through code that imports TorchDynamo, 1.4 s of the start-up of every command that loads a model.
    """
    saved = {name: getattr(nn.init, name) for name in _INITIALIZERS}
    try:
        for name in _INITIALIZERS:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        with torch.device("meta"):
            return Transformer(config)
    finally:
        for name, initializer in saved.items():
            setattr(nn.init, name, initializer)


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

    def keep(self, sentences: Tensor) -> None:
        """Only these sentences (indices into the current ones) go on decoding, with all their rows."""
        rows = (sentences[:, None] * self.beam + torch.arange(self.beam, device=sentences.device)).view(-1)
        self.cache.keep(rows)
        self.memory_kv = [(k.index_select(0, sentences), v.index_select(0, sentences)) for k, v in self.memory_kv]
        self.memory_mask = self.memory_mask.index_select(0, sentences)
