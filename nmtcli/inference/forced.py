"""Forced decoding: the model's probabilities of given translations, in one teacher-forced pass.

A search finds a translation one token at a time; scoring a translation that is already known needs
no search. The decoder reads the whole target at once, as in training (sec. 3.1, Figure 1: the
output embeddings "shifted right"), and position t's output distribution gives log P(y_t | y_<t, x):

    log P(y | x) = sum_t log softmax(W h_t)[y_t]       over the target's tokens and the final EOS

which is what beam search adds up step by step (a test checks the two agree). `nmt translate
--forced-decoding` prints it, length-normalized as the search ranks hypotheses (penalties.lp).

The same pass can return the encoder-decoder attention (sec. 3.2.3) of one layer and head, or an
average: what word alignments are read from (inference/alignment.py). The fused attention kernel
does not return its probabilities, so the one layer asked for is computed here in two matrix
products, softmax(Q K^T / sqrt(d_k)) with the source padding masked (sec. 3.2.1); every other layer,
and every pass that wants no attention, runs the model's own modules unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from nmtcli.device import is_out_of_memory, on_device
from nmtcli.errors import NmtError
from nmtcli.inference.penalties import lp
from nmtcli.inference.confidence import confidence
from nmtcli.inference.results import Scored
from nmtcli.model.incremental import memory_keys_values
from nmtcli.model.transformer import DecoderLayer, Transformer

# Rows of the output projection computed at a time: a (rows, V) block of logits, never (tokens, V).
LOGIT_ROWS = 2048


@dataclass(frozen=True)
class AttentionHeads:
    """Which encoder-decoder attention to read: `layer` (0 = the first) or None for the average of all
    layers; `head` or None for the average of the heads."""

    layer: int | None = None
    head: int | None = None


@dataclass
class Forced:
    """One pair's teacher-forced pass.

    log_probs: log P(y_t | y_<t, x) of each target token and then of EOS (length: target tokens + 1).
    attention: (target tokens + 1, source tokens + 1), row t the decoder position that predicts token t
    (its input is token t - 1, or BOS), column s the source token s (the last column is the source's EOS).
    """

    log_probs: list[float]
    attention: Tensor | None = None

    @property
    def log_prob(self) -> float:
        return sum(self.log_probs)


def search_score(forced: Forced, alpha: float, length_penalty: str, brevity: float = 0.0) -> float:
    """`forced`'s score as beam search ranks a hypothesis: log P(y | x) / lp(|y| + 1), plus its `brevity` penalty
    (penalties.Brevity.of)."""
    return forced.log_prob / lp(len(forced.log_probs), alpha, length_penalty) + brevity


def scored(forced: Forced, tokens: list[str], alpha: float, length_penalty: str, brevity: float = 0.0) -> Scored:
    """`forced` as a Scored: its search_score, and its confidence."""
    return Scored(tokens, forced.log_probs, search_score(forced, alpha, length_penalty, brevity),
                  confidence=confidence(forced.log_prob, len(tokens)))


def _rows(seqs: Sequence[list[int]], first: list[int], last: list[int], pad: int) -> Tensor:
    """first + seq + last for each seq, right-padded to one (len(seqs), width) tensor."""
    rows = [first + s + last for s in seqs]
    out = torch.full((len(rows), max(len(r) for r in rows)), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r, dtype=torch.long)
    return out


@torch.inference_mode()
def force_batch(model: Transformer, sources: Sequence[list[int]], targets: Sequence[list[int]],
                heads: AttentionHeads | None = None, log_probs: bool = True) -> list[Forced]:
    """The teacher-forced pass over one batch of (source ids, target ids) pairs, both without EOS.

    log_probs=False: the attention only (alignments of a search's output); the pass stops after the last
    layer read, without the output projection (over a third of the work with a large vocabulary).
    """
    cfg = model.config
    device = model.embedding.tokens.weight.device
    src = _rows(sources, [], [cfg.eos_id], cfg.pad_id).to(device)
    tgt_in = _rows(targets, [cfg.bos_id], [], cfg.pad_id).to(device)  # BOS + target: the output "shifted right"
    tgt_out = _rows(targets, [], [cfg.eos_id], cfg.pad_id).to(device)  # target + EOS: what each position predicts
    memory, src_mask = model.encode(src)
    x = model.embedding(tgt_in)
    layers = model.decoder.layers
    chosen = [] if heads is None else range(len(layers)) if heads.layer is None else [heads.layer]
    attention = None
    for i, layer in enumerate(layers):
        if not log_probs and chosen and i > max(chosen):
            break
        if i in chosen:
            x, probs = _layer_with_attention(layer, x, memory, src_mask)  # (B, h, T, S)
            probs = probs.mean(1) if heads.head is None else probs[:, heads.head]
            attention = probs if attention is None else attention + probs
        else:
            x = layer(x, memory, src_mask)
    if model.decoder.final_norm is not None:
        x = model.decoder.final_norm(x)
    if attention is not None:
        attention = (attention / len(chosen)).float().cpu()
    real = tgt_out != cfg.pad_id
    token_log_probs = _target_log_probs(model, x[real], tgt_out[real]).tolist() if log_probs else []
    out, start = [], 0
    for i, (s, t) in enumerate(zip(sources, targets)):
        n = len(t) + 1
        probs = attention[i, :n, : len(s) + 1] if attention is not None else None
        out.append(Forced(token_log_probs[start : start + n], probs))
        start += n
    return out


def _layer_with_attention(layer: DecoderLayer, x: Tensor, memory: Tensor, src_mask: Tensor) -> tuple[Tensor, Tensor]:
    """DecoderLayer.forward, with its encoder-decoder attention computed in the open: the layer's output
    and the attention probabilities (B, h, T, S). The same sub-layers and weights as the model's."""
    x = layer.sublayer[0](x, lambda y: layer.self_attn(y, causal=True))
    attention = layer.cross_attn
    probs = None

    def cross(y: Tensor) -> Tensor:
        nonlocal probs
        q = attention.split_heads(attention.q_proj(y))
        k, v = memory_keys_values(attention, memory)
        scores = torch.matmul(q, k.transpose(-1, -2)) * q.size(-1) ** -0.5  # Q K^T / sqrt(d_k) (sec. 3.2.1)
        probs = scores.float().masked_fill(~src_mask, float("-inf")).softmax(dim=-1)
        return attention.out_proj(torch.matmul(probs.to(v.dtype), v).transpose(1, 2).flatten(2))

    x = layer.sublayer[1](x, cross)
    return layer.sublayer[2](x, layer.ffn), probs


def _target_log_probs(model: Transformer, hidden: Tensor, tokens: Tensor) -> Tensor:
    """log softmax(logits)[token] of each row of hidden (N, d), LOGIT_ROWS rows of logits at a time."""
    out = torch.empty(tokens.size(0), dtype=torch.float32, device=hidden.device)
    for start in range(0, tokens.size(0), LOGIT_ROWS):
        end = start + LOGIT_ROWS
        log_probs = F.log_softmax(model.logits(hidden[start:end]).float(), dim=-1)  # as the searches compute them
        out[start:end] = log_probs.gather(1, tokens[start:end, None])[:, 0]
    return out


def pair_batches(sources: Sequence[list[int]], targets: Sequence[list[int]], batch_tokens: int) -> Iterator[list[int]]:
    """Indices of the pairs in batches of similar length: sorted by the longer side (with EOS/BOS), cut
    where a batch would exceed `batch_tokens` padded tokens on that side, as translate_ids batches sources."""
    longer = [max(len(s), len(t)) + 1 for s, t in zip(sources, targets)]
    batch: list[int] = []
    for i in sorted(range(len(longer)), key=longer.__getitem__):
        if batch and longer[i] * (len(batch) + 1) > batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def force_ids(model: Transformer, sources: Sequence[list[int]], targets: Sequence[list[int]], batch_tokens: int,
              device: torch.device, autocast: Callable[[], AbstractContextManager] = nullcontext,
              heads: AttentionHeads | None = None, warn: Callable[[str], None] | None = None,
              log_probs: bool = True) -> list[Forced]:
    """The teacher-forced pass of every (source, target) pair (ids without EOS), in input order, batched by
    length; out of memory, a batch is forced in halves. log_probs=False: the attention only (see force_batch)."""
    warn = warn or (lambda message: None)
    results: list[Forced | None] = [None] * len(sources)

    def run(batch: list[int]) -> None:
        try:
            with on_device(device), autocast():
                for i, forced in zip(batch, force_batch(model, [sources[i] for i in batch], [targets[i] for i in batch], heads, log_probs)):
                    results[i] = forced
            return
        except (RuntimeError, MemoryError) as e:
            if not is_out_of_memory(e):
                raise
            if len(batch) == 1:
                raise NmtError(f"out of memory scoring a single pair on {device}", "use a device with more memory") from None
        if device.type == "cuda":
            torch.cuda.empty_cache()
        warn(f"out of memory scoring {len(batch):,} pairs at once; continuing in halves")
        run(batch[: len(batch) // 2])
        run(batch[len(batch) // 2 :])

    for batch in pair_batches(sources, targets, batch_tokens):
        run(batch)
    return results
