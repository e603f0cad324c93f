"""What every search (beam, greedy, sampling) does around its choice of tokens.

A search ranks a step's tokens on the logits themselves: within a row log p(v) = logit(v) - logsumexp(row),
so the tokens' order is their logits' order, and only the few tokens chosen become log-probabilities
(`log_normalizer`, `log_probs_of`); a row's best tokens are found by blocks (`top_k_per_row`). PAD and BOS
are never produced; at its length limit (a * |x| + b: `max_output_lengths`) a row may only end (EOS); a row
ends at its EOS; and the host, looking at the state every `sync_every` steps, takes the decided sentences'
outputs and continues with the others only (once more than `leave_fraction` of the batch is decided, or all of it).
Beam search (inference/beam.py) chooses among candidates and keeps its own n-best lists, so it uses the
banned tokens and the host's part; greedy search and sampling add one token to each row per step, and
share `TokenRows` whole.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import Tensor

from nmtcli.errors import NmtError
from nmtcli.model.incremental import DecoderState
from nmtcli.model.transformer import Transformer


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # log-probability divided by the length penalty: what the search ranks by
    log_prob: float
    alignment: str | None = None  # Pharaoh links to the source, when asked for (inference/alignment.py)
    text: str | None = None  # its text where that is not its tokens decoded (a glossary term the vocabulary cannot spell)


def source_lengths(model: Transformer, src: Tensor) -> Tensor:
    """(n,) |x|: each source's pieces, without its EOS and padding (every row of `src` ends in EOS)."""
    return (src != model.config.pad_id).sum(1) - 1


def max_output_lengths(model: Transformer, src: Tensor, max_len_a: float, max_len_b: int) -> Tensor:
    """Tokens before EOS each sentence may have: a * |x| + b (|x| without EOS), within the position table."""
    cfg = model.config
    return (max_len_a * source_lengths(model, src).double() + max_len_b).floor().long().clamp(min=0, max=cfg.max_positions - 2)


def default_sync_every(device: torch.device) -> int:
    """Steps between looks at the search's state from the host: every step on a CPU, where it costs
    nothing; on a GPU each look stalls the queue of work, so only every few steps."""
    return 1 if device.type == "cpu" else 8


def default_leave_fraction(device: torch.device) -> float:
    """The share of a batch's sentences that must be decided before they leave it. On a CPU a step
    costs in proportion to its rows, so decided sentences leave at once. On a GPU a step of fewer
    rows is hardly cheaper, while new, smaller tensors mean new CUDA graphs to record: decided
    sentences ride along (masked) until a quarter of the batch is decided."""
    return 0.0 if device.type == "cpu" else 0.25


# Columns per block of top_k_per_row, by device (measured: a CPU, and an H200 at 520-8,192 rows x 32k words,
# where 128 beat 64 and 32 and plain topk; see the CHANGELOG).
TOP_K_BLOCK = {"cpu": 64, "cuda": 128}


def top_k_per_row(x: Tensor, k: int, block: int | None = None) -> tuple[Tensor, Tensor]:
    """`x.topk(k, dim=1)` of a contiguous (rows, V) tensor, faster for a large V: 4x on a CPU (58k words), 1.9x on
    an H200 (8,192 rows x 32k bf16 logits: 1.03 ms against 1.93).

    The k largest values of a row lie in the k blocks of `block` columns that have the largest
    maxima (a value outside them has k blocks with a larger maximum above it), and block maxima take
    one vectorized pass where topk's selection over V values is slow. Equal values may come in
    another order than topk's (which promises none).
    """
    rows, width = x.shape
    block = block or TOP_K_BLOCK.get(x.device.type, TOP_K_BLOCK["cuda"])
    whole = width // block * block
    if whole < 4 * k * block:
        return x.topk(k, dim=1)
    chosen = x[:, :whole].view(rows, -1, block).amax(-1).topk(k, dim=1).indices  # (rows, k)
    columns = (chosen.unsqueeze(-1) * block + torch.arange(block, device=x.device)).view(rows, -1)
    if whole < width:  # the last, partial block is always looked at
        columns = torch.cat([columns, torch.arange(whole, width, device=x.device).expand(rows, -1)], dim=1)
    values, index = x.gather(1, columns).topk(k, dim=1)
    return values, columns.gather(1, index)

def never_produced(model: Transformer, device: torch.device, eos: bool = False) -> Tensor:
    """The ids a search never produces: PAD and BOS (and EOS, where it is not allowed yet). A decoder that starts
    from EOS (fairseq's M2M-100 and NLLB) may of course end with it."""
    cfg = model.config
    ids = {cfg.pad_id, *([cfg.bos_id] if cfg.bos_id != cfg.eos_id else []), *([cfg.eos_id] if eos else [])}
    return torch.tensor(sorted(ids), device=device)


def ban(scores: Tensor, banned: Tensor) -> Tensor:
    """In place: -inf at the `banned` ids of every row of (rows, V) logits or log-probabilities."""
    return scores.index_fill_(1, banned, float("-inf"))


# How a step's rows are normalised (`log_normalizer`): "off" (the default) eagerly, a few rows of log-softmax at a
# time, on every device: the GPU runs the Python the CPU tests run, and on a CPU the values are log_softmax's to
# the bit. "on" compiles `row_terms`, which inductor makes one reduction that reads the logits once in their own
# dtype: on an H200 (bf16, 8,192 rows x 32k words, in a CUDA graph) 0.25 ms where the eager path takes ~2 ms,
# but a process pays for its compilation (once a dtype): 3.4 s with an empty inductor cache, 1.0 s from a warm
# one, more than it saves on a few thousand lines (worth it for `nmt serve` and long jobs). NMT_FUSED_NORMALIZER
# sets it for a whole process.
FUSED = os.environ.get("NMT_FUSED_NORMALIZER", "off")
FUSED_MODES = ("off", "on")
COMPILE_BACKEND = "inductor"  # a test counts the graphs with its own backend
_compiled_row_terms = None  # made on first use: torch.compile imports TorchDynamo, seconds nothing else needs

# Bytes of float32 the eager normaliser's log-softmax is computed in at once. The whole (rows, V) at once would
# be 1 GB at a GPU's 8,192 rows x 32k words (the float32 copy of bf16 logits as much again). A CPU's chunk stays
# in its cache (on the development machine, one thread, 128 rows x 58k words: 12-14 ms, as one log_softmax over
# all of them, whose 30 MB output is fresh memory every step).
NORMALIZER_CHUNK_BYTES = {"cpu": 512 << 10, "cuda": 64 << 20}


def log_normalizer(logits: Tensor) -> tuple[Tensor, Tensor]:
    """(shift, log_sum) of each row of the model's logits (rows, V), in any dtype: float32 (rows, 1) each, such
    that `log_probs_of` a row's logits, (logit - shift) - log_sum, is its log-softmax. Take it before any token
    is masked: it normalises the model's distribution.

    shift is the row's largest logit and log_sum the log of sum(exp(logit - shift)). Eagerly they are the ones
    `torch.log_softmax` computes in float32 and subtracts in this order, so the values are its own to the bit
    (log_sum read back from its output: at the largest logit it is 0 - log_sum); it runs on a few rows at a
    time (NORMALIZER_CHUNK_BYTES), so neither the float32 log-probabilities of the whole (rows, V) nor a float32
    copy of half-precision logits is made. Compiled (FUSED "on"), `row_terms` reads the logits once and
    writes nothing of their size. Either way a fixed sequence of tensor operations: nothing waits for the
    device, and shapes depend on shapes only (a CUDA graph records it).
    """
    fused = _row_terms_for(logits.device.type)
    if fused is not None:
        return fused(logits)
    rows, V = logits.shape
    shift, log_sum = (logits.new_empty((rows, 1), dtype=torch.float32) for _ in range(2))
    per_chunk = max(1, NORMALIZER_CHUNK_BYTES.get(logits.device.type, NORMALIZER_CHUNK_BYTES["cuda"]) // (4 * V))
    for start in range(0, rows, per_chunk):
        part = slice(start, start + per_chunk)
        chunk = torch.log_softmax(logits[part], dim=1, dtype=torch.float32)
        shift[part] = logits[part].amax(1, keepdim=True)  # the chunk's logits once more, while they are in cache
        torch.neg(chunk.amax(1, keepdim=True), out=log_sum[part])
    return shift, log_sum


def row_terms(logits: Tensor) -> tuple[Tensor, Tensor]:
    """log_normalizer's (shift, log_sum) as one expression, for inductor to fuse into one pass over the logits.
    Float32 arithmetic, but summed in an order of its own: log_sum within 1e-6 of log_softmax's (H200, bf16)."""
    shift = logits.amax(1, keepdim=True).float()
    return shift, (logits.float() - shift).exp().sum(1, keepdim=True).log()


def _row_terms_for(device_type: str):
    """row_terms compiled (any number of rows) where FUSED says so for this device, else None (eager)."""
    global _compiled_row_terms
    if FUSED not in FUSED_MODES:
        raise NmtError(f"NMT_FUSED_NORMALIZER is {FUSED!r}", f"set it to one of {', '.join(FUSED_MODES)}, or unset it (off)",
                       exit_code=2)
    if FUSED == "off" or (device_type == "cuda" and not _has_triton()):
        return None
    if _compiled_row_terms is None:
        compiled = torch.compile(row_terms, dynamic=False, backend=COMPILE_BACKEND)

        def dynamic_rows(logits: Tensor) -> tuple[Tensor, Tensor]:
            # The vocabulary is fixed, the rows are not (every shape class has its own): rows are symbolic, so
            # one graph serves every batch (and one more a single row, which dynamo specializes).
            torch._dynamo.mark_dynamic(logits, 0)
            return compiled(logits)

        _compiled_row_terms = dynamic_rows
    return _compiled_row_terms


def _has_triton() -> bool:
    """Whether inductor can write GPU kernels here (without Triton a GPU normalises eagerly, whatever FUSED says)."""
    from torch.utils._triton import has_triton

    return has_triton()


def log_probs_of(logits: Tensor, normalizer: tuple[Tensor, Tensor]) -> Tensor:
    """The log-probabilities of some of each row's logits (rows, k), under the row's `log_normalizer`: float32,
    -inf where the logit is (masked)."""
    shift, log_sum = normalizer
    return (logits.float() - shift) - log_sum


def leaving(decided: list[bool], leave_fraction: float = 0.0) -> list[int]:
    """The sentences that leave the batch now: the decided ones, once more than `leave_fraction` of the batch
    is decided (or all of it); [] before."""
    which = [i for i, d in enumerate(decided) if d]
    if len(which) < len(decided) and len(which) <= leave_fraction * len(decided):
        return []
    return which


def keep_sentences(state: DecoderState, decided: list[bool], per_sentence: int, by_sentence: list[Tensor],
                   by_row: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """Only the sentences not `decided` go on: the decoder state keeps their rows, and so does every tensor of the
    search's own, `by_sentence` (n, ...) or `by_row` (n * per_sentence, ...): the new tensors, in that order."""
    live = torch.tensor([i for i, d in enumerate(decided) if not d], device=state.memory_mask.device)
    state.keep(live)  # with all their rows
    rows = (live[:, None] * per_sentence + torch.arange(per_sentence, device=live.device)).view(-1)
    return [t.index_select(0, live) for t in by_sentence], [t.index_select(0, rows) for t in by_row]


class TokenRows:
    """The output of a search that adds one token to every row per step (greedy search, sampling), on the
    device: rows are (sentence, sample), the `per_sentence` rows of a sentence adjacent.

    tokens (rows, steps), length (rows,)  what each row produced, EOS included, and its length before EOS
    log_prob (rows,)                      the model's log-probability of the row's tokens, EOS included
    done (rows,)                          the row has ended (its EOS)
    max_len (rows,)                       tokens before EOS a row may have: the limit forces EOS
    carried                               the search's own tensors by row (prefixes, random keys): they leave with the rows
    """

    def __init__(self, model: Transformer, state: DecoderState, max_len: Tensor, steps: int, per_sentence: int = 1,
                 carried: dict[str, Tensor] | None = None):
        cfg = model.config
        device = max_len.device
        rows = max_len.numel()
        self.state, self.per_sentence, self.eos_id = state, per_sentence, cfg.eos_id
        self.sentence = torch.arange(rows // per_sentence, device=device)  # original index of each sentence still in the batch
        self.max_len = max_len
        self.last = torch.full((rows,), cfg.bos_id, dtype=torch.long, device=device)
        self.tokens = torch.zeros((rows, max(steps, 1)), dtype=torch.long, device=device)
        self.length = torch.zeros(rows, dtype=torch.long, device=device)
        self.log_prob = torch.zeros(rows, device=device)
        self.done = torch.zeros(rows, dtype=torch.bool, device=device)
        self.carried = dict(carried or {})

    def limited(self, step: int, token: Tensor) -> Tensor:
        """The token each row (rows,) takes at `step`: its own, or EOS where the row is at its length limit."""
        return torch.where(step >= self.max_len, self.eos_id, token)

    def add(self, step: int, token: Tensor, log_prob: Tensor) -> None:
        """This step's token of every row (`limited`), with its log-probability under the model (rows,), counted
        while the row is live; a row ends at its EOS."""
        self.log_prob += torch.where(self.done, 0.0, log_prob)
        self.tokens[:, step] = token
        ended = (token == self.eos_id) & ~self.done
        self.length = torch.where(ended, step, self.length)
        self.done |= ended
        self.last = token

    def collect(self, results: list, leave_fraction: float = 0.0) -> bool:
        """The host's look: the hypotheses of the sentences whose rows have all ended into `results` (by original
        index), and those sentences out of the batch (see `leaving`). True when no sentence is left."""
        N = self.per_sentence
        decided = self.done.view(-1, N).all(1).tolist()
        which = leaving(decided, leave_fraction)
        if not which:
            return False
        rows = (torch.tensor(which, device=self.done.device)[:, None] * N + torch.arange(N, device=self.done.device)).view(-1)
        counts, row_log_prob = self.length[rows].tolist(), self.log_prob[rows].tolist()
        row_tokens = self.tokens[rows, : max(counts) + 1].tolist()
        for i, s in enumerate(self.sentence[which].tolist()):
            results[s] = [Hypothesis(row_tokens[r][: counts[r]], row_log_prob[r], row_log_prob[r]) for r in range(i * N, (i + 1) * N)]
        if len(which) == len(decided):
            return True
        names = list(self.carried)
        (self.sentence,), kept = keep_sentences(self.state, decided, N, [self.sentence],
                                                [self.max_len, self.last, self.tokens, self.length, self.log_prob, self.done,
                                                 *self.carried.values()])
        self.max_len, self.last, self.tokens, self.length, self.log_prob, self.done = kept[:6]
        self.carried = dict(zip(names, kept[6:]))
        return False
