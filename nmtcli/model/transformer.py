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
    position = torch.arange(length, dtype=torch.float64).unsqueeze(1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / torch.pow(10000.0, two_i / d_model)
    table = torch.zeros(length, d_model, dtype=torch.float64)
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
VARLEN_ATTENTION = _load_varlen()


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
    if VARLEN_ATTENTION is None or not src.is_cuda or (model.training and model.config.attention_dropout > 0):
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
        out = VARLEN_ATTENTION(q, k, v, query_starts, keys.starts, t, memory.size(1))
        return self.out_proj(out.reshape(b, t, d))

    def memory_keys_values(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Encoder-decoder attention's keys and values, (B, h, S, d_k) each: computed once per sentence."""
        return tuple(self._split_heads(t) for t in self.kv_proj(memory).chunk(2, dim=-1))

    def step_self(self, x: Tensor, past: KeyValues) -> Tensor:
        """Self-attention of one new position (N, 1, d) over all earlier ones, appending to `past`."""
        q, k, v = (self._split_heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
        k, v = past.append(k, v)
        return self._attend(q, k, v)

    def step_memory(self, x: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
        """Encoder-decoder attention of one new position for rows grouped by sentence.

        x: (n * beam, 1, d), beams of a sentence adjacent; k, v: (n, h, S, d_k); mask (n, 1, 1, S). The beam
        hypotheses of a sentence are its `beam` queries against one copy of its keys/values, so nothing
        is repeated per beam and beam reordering never touches them.
        """
        rows, n = x.size(0), k.size(0)
        q = self.q_proj(x).view(n, rows // n, self.heads, -1).transpose(1, 2)  # (n, h, beam, d_k)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(out.transpose(1, 2).reshape(rows, 1, -1))


class KeyValues:
    """Self-attention keys/values of every decoded position of every row, (N, h, t, d_k) each.

    Beam search reorders rows between steps; `select(rows)` records the reordering and the next
    `append` applies it while copying the history into the grown tensors: one copy per step.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None
        self.rows: Tensor | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k, self.v = self._grow(self.k, k), self._grow(self.v, v)
        self.rows = None
        return self.k, self.v

    def _grow(self, past: Tensor, new: Tensor) -> Tensor:
        t = past.size(2)
        grown = new.new_empty(new.size(0), new.size(1), t + 1, new.size(3))
        if self.rows is None:
            grown[:, :, :t] = past
        else:
            torch.index_select(past, 0, self.rows, out=grown[:, :, :t])
        grown[:, :, t:] = new
        return grown


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

    def step(self, x: Tensor, past: KeyValues, memory_kv: tuple[Tensor, Tensor], src_mask: Tensor) -> Tensor:
        """The same layer for one new position per row (incremental decoding)."""
        x = self.sublayer[0](x, lambda y: self.self_attn.step_self(y, past))
        x = self.sublayer[1](x, lambda y: self.cross_attn.step_memory(y, *memory_kv, src_mask))
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
        table = sinusoidal_positions(config.max_positions, config.d_model, config.positions)
        self.register_buffer("positions", table, persistent=False)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, tokens: Tensor, start: int = 0) -> Tensor:
        """tokens: (B, L) ids at positions start .. start + L - 1."""
        length = tokens.size(1)
        if start + length > self.positions.size(0):
            raise ValueError(f"sequence of {start + length} positions exceeds max_positions={self.positions.size(0)}")
        x = self.tokens(tokens) * self.scale + self.positions[start : start + length]
        return self.dropout(x)


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
        for layer, past, memory_kv in zip(self.layers, state.past, state.memory_kv):
            x = layer.step(x, past, memory_kv, state.src_mask)
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
        # Set by inference code that packs the output projection for speed (nmtcli/inference/cpu.py).
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

    def start_decoding(self, memory: Tensor, src_mask: Tensor, beam: int = 1) -> DecoderState:
        """State for decoding `beam` rows per sentence of `memory` (n, S, d), one position at a time."""
        memory_kv = [layer.cross_attn.memory_keys_values(memory) for layer in self.decoder.layers]
        return DecoderState(memory_kv, src_mask, beam, [KeyValues() for _ in self.decoder.layers])

    def decode_step(self, tokens: Tensor, state: DecoderState) -> Tensor:
        """One step of incremental decoding: the newest token of each row (N,) -> next-token logits (N, V)."""
        x = self.embedding(tokens[:, None], start=state.length)
        state.length += 1
        return self.logits(self.decoder.step(x, state))[:, 0]

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def count_parameters(config: ModelConfig) -> int:
    """Parameters of the model `config` describes, counted without allocating them (shared matrix once)."""
    with torch.device("meta"):
        return Transformer(config).num_parameters()


class DecoderState:
    """What incremental decoding keeps between steps: per layer the self-attention history of every
    row (rows = sentences x beam, beams of a sentence adjacent) and the encoder-decoder keys/values of
    every sentence, computed once."""

    def __init__(self, memory_kv: list[tuple[Tensor, Tensor]], src_mask: Tensor, beam: int, past: list[KeyValues]):
        self.memory_kv = memory_kv
        self.src_mask = src_mask
        self.beam = beam
        self.past = past
        self.length = 0  # positions decoded so far

    def select(self, rows: Tensor, sentences: Tensor | None = None) -> None:
        """Continue with `rows` of the current rows (reordered beams); `sentences`: those still decoding."""
        for past in self.past:
            past.rows = rows
        if sentences is not None:
            self.memory_kv = [(k.index_select(0, sentences), v.index_select(0, sentences)) for k, v in self.memory_kv]
            self.src_mask = self.src_mask.index_select(0, sentences)
