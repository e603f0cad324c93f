"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017), section 3.

Each class is one box of the paper's Figure 1, in the order a reader meets them. Shapes: B batch,
S source length, T target length, d = d_model, h = heads, d_k = d / h, V vocabulary.

Decoding one position at a time (beam and greedy search) is in incremental.py; attention over a
padded source with packed keys (training on a GPU) in packed_attention.py.
"""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from nmtcli.model import packed_attention
from nmtcli.model.config import ModelConfig


def sinusoidal_positions(length: int, d_model: int, layout: str = "interleaved", offset: int = 0) -> Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)) (sec. 3.5).

    layout "interleaved" places the features as the formula indexes them; "sines_first" (tensor2tensor,
    Marian) holds the same d_model/2 sines in the first half and the cosines in the second; "fairseq"
    (M2M-100, NLLB) does too, with the frequencies 10000^(-i/(d_model/2 - 1)), i < d_model/2. Row p is
    position p + `offset` (fairseq counts positions from pad_id + 1).
    """
    # On the CPU, explicitly: under a `meta` device context (see skeleton) the table would have no values.
    position = torch.arange(offset, offset + length, dtype=torch.float64, device="cpu").unsqueeze(1)
    if layout == "fairseq":  # float32 as fairseq computes it: the table must be its table, bit for bit
        half = d_model // 2
        frequency = torch.exp(torch.arange(half, device="cpu").float() * -(math.log(10000) / (half - 1)))
        angle = torch.arange(offset, offset + length, device="cpu").float().unsqueeze(1) * frequency.unsqueeze(0)
        return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)
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

    def split_heads(self, x: Tensor) -> Tensor:  # (B, L, d) -> (B, h, L, d_k)
        return x.unflatten(-1, (self.heads, -1)).transpose(1, 2)

    def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
                causal: bool = False) -> Tensor:
        """x: (B, T, d) queries; memory: (B, S, d) keys/values for encoder-decoder attention, else x.

        mask: boolean, broadcastable to (B, h, T, S), True where attention is allowed. Over the source in
        training on a GPU, the real keys may be packed for a flash kernel instead (packed_attention.py).
        """
        if mask is not None and packed_attention.applies(self, x):
            return packed_attention.attend(self, x, x if memory is None else memory, mask)
        if self.self_attention:
            q, k, v = (self.split_heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
        else:
            q = self.split_heads(self.q_proj(x))
            k, v = (self.split_heads(t) for t in self.kv_proj(memory).chunk(2, dim=-1))
        return self._attend(q, k, v, mask, causal)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, causal: bool = False) -> Tensor:
        dropout = self.attention_dropout if self.training else 0.0
        kernels = packed_attention.masked_kernels(q.dtype, q.device) if mask is not None and self.training else None
        with kernels if kernels is not None else contextlib.nullcontext():
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal)
        return self.out_proj(out.transpose(1, 2).flatten(2))


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

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
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

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        x = self.sublayer[0](x, lambda y: self.self_attn(y, causal=True))
        x = self.sublayer[1](x, lambda y: self.cross_attn(y, memory, mask=src_mask))
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
        table = sinusoidal_positions(cfg.max_positions, cfg.d_model, cfg.positions, cfg.position_offset).to(device)
        self.register_buffer("positions", table, persistent=False)

    def forward(self, tokens: Tensor) -> Tensor:
        """tokens: (B, L) ids at positions 0 .. L - 1."""
        length = tokens.size(1)
        if length > self.positions.size(0):
            raise ValueError(f"sequence of {length} positions exceeds max_positions={self.positions.size(0)}")
        return self.dropout(self.tokens(tokens) * self.scale + self.positions[:length])


class Encoder(nn.Module):
    """A stack of N = `layers` encoder layers over the embedded source (sec. 3.1; Figure 1, left)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.layers))
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm == "pre" else None

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, src_mask)
        return self.final_norm(x) if self.final_norm is not None else x


class Decoder(nn.Module):
    """A stack of N = `decoder_layers` decoder layers over the embedded target, attending to the encoder output
    (sec. 3.1; Figure 1, right). The paper's N is the encoder's; a student's decoder is shallower."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.decoder_layers))
        self.final_norm = nn.LayerNorm(config.d_model) if config.norm == "pre" else None

    def forward(self, x: Tensor, memory: Tensor, src_mask: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x, memory, src_mask)
        return self.final_norm(x) if self.final_norm is not None else x


class Transformer(nn.Module):
    """Encoder-decoder Transformer (sec. 3, Figure 1). `forward` returns logits (B, T, V) for teacher forcing."""

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
        memory, src_mask = self.encode(src)
        # Target padding sits after the real tokens, so the causal mask alone keeps real positions from
        # seeing it; what padded positions compute is excluded from the loss.
        out = self.decoder(self.embedding(tgt_in), memory, src_mask)
        return out if hidden else self.logits(out)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def count_parameters(config: ModelConfig) -> int:
    """Parameters of the model `config` describes, counted without allocating them (shared matrix once)."""
    return skeleton(config).num_parameters()


def skeleton(config: ModelConfig) -> Transformer:
    """The model `config` describes on the `meta` device: shapes without memory, to count or to load into.

    Its initializers are skipped: there is nothing to fill, and PyTorch runs `normal_` of a meta tensor
    through code that imports TorchDynamo, over a second of start-up for every command that loads a model.
    """
    with torch.device("meta"), _SkipInitializers():
        return Transformer(config)


class _SkipInitializers(TorchFunctionMode):
    """Within `with`, in this thread only: the initializers of `torch.nn.init` that dispatch on their
    tensor (normal_, uniform_, constant_, kaiming_uniform_: what nn.Embedding and nn.Linear call) return
    it untouched. The others (xavier_uniform_, zeros_) fill meta tensors through tensor methods, which
    imports nothing; every other function runs as usual."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        return func(*args, **kwargs)
