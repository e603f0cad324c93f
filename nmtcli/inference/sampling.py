"""Sampling (`--sampling`): each output token drawn from the model's distribution instead of searched for.

For back-translation, Edunov et al. (2018, "Understanding Back-Translation at Scale") found that sources
sampled from a target-to-source model train a better forward model than beam search's, once the
monolingual data is large: beam output is too regular to teach much. They sample from the whole
distribution ("unrestricted sampling") and from the 10 most probable tokens (top-k 10):

    full      every token, with the model's probability
    topk:K    the K most probable tokens, renormalized (Fan et al. 2018)
    topp:P    the nucleus: the fewest most probable tokens whose probability reaches P (Holtzman et al. 2020)

A temperature T divides the logits first (softmax(z / T)), then the filter applies: T < 1 sharpens the
distribution, T > 1 flattens it. PAD and BOS are never drawn (as in the searches). A sample's score and
log_prob are both the model's own log-probability of its tokens, EOS included: at temperature 1 and
before any filter, so they compare with a beam search's log_prob and with a forced-decoding score.

Batched like the searches: rows are (sentence, sample), the samples of a sentence adjacent (the
incremental decoder's beam layout: one copy of a sentence's encoder keys/values for all its samples).
A sentence leaves the batch once all its samples have ended. Output length is at most a*|x| + b tokens
before EOS, as in the searches.

Random numbers are counter-based (cf. Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2,
3"): the number that picks token t of sample j of line L is a hash of (seed, L, j, t). No generator state
is carried, so a line gets the same samples whatever batch or window it is translated in and whatever
is translated beside it, on any device, and sample j is the same whatever the number of samples. The
token is found by inverse transform sampling: the first token whose cumulative probability exceeds u.
(A batch of another shape can change a probability in its last bits; that moves a draw only where u
falls within that much of the boundary between two tokens.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from nmtcli.errors import NmtError
from nmtcli.inference.outputs import default_leave_fraction, default_sync_every, max_output_lengths, top_k_per_row
from nmtcli.inference.outputs import Hypothesis, TokenRows, ban, never_produced
from nmtcli.model.incremental import decode_step, start_decoding
from nmtcli.model.transformer import Transformer

SAMPLING_FORMS = "full, topk:K (K >= 1) or topp:P (0 < P <= 1)"
DEFAULT_SEED = 1  # as fairseq's --seed: the same input gives the same samples unless a seed is asked for


@dataclass(frozen=True)
class Sampling:
    """What `--sampling` names: the whole distribution, its `k` most probable tokens, or its nucleus of mass `p`."""

    kind: str  # full, topk or topp
    k: int = 0
    p: float = 1.0


def parse_sampling(spec: str) -> Sampling:
    """`full`, `topk:K` or `topp:P` -> Sampling; ValueError saying what is wrong with anything else."""
    kind, colon, value = spec.strip().partition(":")
    if kind == "full" and not colon:
        return Sampling("full")
    if kind == "topk" and colon:
        if value.strip().isdigit() and int(value) >= 1:
            return Sampling("topk", k=int(value))
        raise ValueError(f"K must be a whole number >= 1, not {value!r}")
    if kind == "topp" and colon:
        try:
            p = float(value)
        except ValueError:
            p = float("nan")
        if 0 < p <= 1:
            return Sampling("topp", p=p)
        raise ValueError(f"P must be a number above 0 and at most 1, not {value!r}")
    raise ValueError(f"not one of {SAMPLING_FORMS}")


def check_sampling(spec: str | None, temperature: float, seed: int) -> None:
    """Refuse sampling settings that cannot work, as `nmt translate`'s flags (one error line, exit 2)."""
    if spec is None:
        return
    try:
        parse_sampling(spec)
    except ValueError as e:
        raise NmtError(f"--sampling {spec!r}: {e}", f"use {SAMPLING_FORMS}; e.g. --sampling topk:10", exit_code=2) from None
    if not 0 < temperature < math.inf:
        raise NmtError(f"--temperature {temperature:g} is not above 0", "use a positive number; 1 samples from the model's own distribution",
                       exit_code=2)
    if not 0 <= seed < 2**63:
        raise NmtError(f"--seed {seed} is out of range", "use a whole number from 0 to 2^63 - 1", exit_code=2)


# --- random numbers --------------------------------------------------------------------------------

_LOW32 = 0xFFFFFFFF


def _mix32(x: Tensor) -> Tensor:
    """lowbias32 (C. Wellons, "hash-prospector"): a bijection of 32-bit integers in which every output bit
    depends on every input bit. x: int64 holding values below 2^32. The second multiplier is taken as
    its value minus 2^32 (the same modulo 2^32), so that no product leaves the int64 range."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _LOW32
    x = x ^ (x >> 15)
    x = (x * (0x846CA68B - 2**32)) & _LOW32
    return x ^ (x >> 16)


def _hash(*parts: Tensor | int) -> Tensor:
    """A 32-bit hash of non-negative 64-bit integers (tensors broadcast together), both halves of each."""
    h = torch.zeros((), dtype=torch.long)
    for part in parts:
        part = torch.as_tensor(part, dtype=torch.long)
        h = h.to(part.device)
        for half in (part & _LOW32, (part >> 32) & _LOW32):
            h = _mix32(h ^ half)
    return h


def row_keys(seed: int, lines: Tensor, samples: int) -> Tensor:
    """The key of each row (line L, sample j), lines' samples adjacent: what every draw of the row hashes."""
    j = torch.arange(samples, device=lines.device)
    return _hash(seed, lines.repeat_interleave(samples), j.repeat(lines.numel()))


def uniforms(keys: Tensor, step: int) -> Tensor:
    """The uniform number in [0, 1) of each row at `step`: 32 bits of a hash, in float64."""
    return _mix32(_mix32(keys ^ _hash(step)) ^ 0x5BD1E995).double() / 2**32


# --- one draw ----------------------------------------------------------------------------------------


def draw(log_probs: Tensor, sampling: Sampling, u: Tensor, allowed: Tensor) -> Tensor:
    """One token per row of `log_probs` (rows, V): the distribution to draw from (at the temperature), -inf
    at the tokens never drawn, whose probability mass is `allowed` (rows,); u (rows,): uniform numbers."""
    if sampling.kind == "topk" and sampling.k < log_probs.size(1):
        values, ids = top_k_per_row(log_probs, sampling.k)
        return ids.gather(1, _pick(values.double().exp(), u)[:, None])[:, 0]
    if sampling.kind == "topp" and sampling.p < 1:
        return _nucleus_draw(log_probs, sampling.p, u, allowed)
    return _blocked_draw(log_probs, u)


def _pick(probs: Tensor, u: Tensor) -> Tensor:
    """Per row of probs (rows, C), float64 and >= 0, the first column whose cumulative probability exceeds
    u * their total: inverse transform sampling. A column of probability 0 spans an empty interval and is
    never picked; u < 1 has 32 bits, so u * total < total and the pick is a column."""
    cdf = probs.cumsum(1)
    return torch.searchsorted(cdf, (u * cdf[:, -1]).unsqueeze(1), right=True)[:, 0]


def _blocked_draw(log_probs: Tensor, u: Tensor, block: int = 64) -> Tensor:
    """Inverse transform sampling over the whole vocabulary in two levels: a block of `block` tokens by the
    blocks' masses, then a token within it. Exact to float64 where it counts, at the cost of one float32
    pass over the probabilities (a cumulative sum over 58k tokens would cost several, and lose precision
    in float32)."""
    rows, V = log_probs.shape
    probs = log_probs.new_zeros((rows, -(-V // block) * block))  # the last block padded with zeros
    torch.exp(log_probs, out=probs[:, :V])
    blocks = probs.view(rows, -1, block)
    mass = blocks.sum(-1).double()  # (rows, blocks)
    b = _pick(mass, u)
    r = u * mass.sum(1) - (mass.cumsum(1) - mass).gather(1, b[:, None])[:, 0]  # u's place within block b
    inside = blocks[torch.arange(rows, device=b.device), b].double()  # (rows, block)
    cdf = inside.cumsum(1)
    j = torch.searchsorted(cdf, r.unsqueeze(1), right=True)[:, 0]
    # Rounding can put r at the block's end: then its last token of positive probability.
    last = torch.where(inside > 0, torch.arange(block, device=b.device), -1).amax(1)
    return b * block + torch.minimum(j, last)


def _nucleus_draw(log_probs: Tensor, p: float, u: Tensor, allowed: Tensor) -> Tensor:
    """Top-p: the most probable tokens until their mass reaches p of `allowed`, drawn from in proportion.

    Sorting 58k log-probabilities per row is slow on a CPU, and a nucleus is mostly small: the 64, then
    1,024 most probable tokens are tried first, and only rows whose nucleus is larger are sorted whole.
    On a GPU sorting is fast, and looking at which rows are done would wait for the device.
    """
    rows, V = log_probs.shape
    token = torch.empty(rows, dtype=torch.long, device=log_probs.device)
    todo = torch.arange(rows, device=log_probs.device)
    widths = (64, 1024, V) if log_probs.device.type == "cpu" else (V,)
    for width in (w for w in widths if w <= V):
        lp = log_probs if todo.numel() == rows else log_probs.index_select(0, todo)
        values, ids = lp.sort(dim=1, descending=True) if width == V else top_k_per_row(lp, width)
        probs = values.double().exp()
        before = probs.cumsum(1) - probs  # the mass of the more probable tokens: the first is always kept
        reach = p * allowed.index_select(0, todo)
        found = (before[:, -1] + probs[:, -1] >= reach) if width < V else torch.ones_like(todo, dtype=torch.bool)
        probs.masked_fill_(before >= reach[:, None], 0.0)
        pick = ids.gather(1, _pick(probs, u.index_select(0, todo))[:, None])[:, 0]
        if width == V or bool(found.all()):
            token[todo] = pick
            break
        token[todo[found]] = pick[found]
        todo = todo[~found]
    return token


# --- the batched loop ------------------------------------------------------------------------------


@torch.inference_mode()
def sample(
    model: Transformer,
    src: Tensor,
    sampling: Sampling,
    temperature: float = 1.0,
    seed: int = DEFAULT_SEED,
    lines: Tensor | None = None,
    samples: int = 1,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    min_len: int = 0,
    sync_every: int | None = None,
) -> list[list[Hypothesis]]:
    """src: (n, S) ids ending in EOS, right-padded. Returns `samples` sampled translations of each sentence,
    in the order drawn (sample j is the same whatever `samples`). `lines` (n,): the numbers that key each
    sentence's random numbers (default 1..n; nmt translate passes the input line numbers). `min_len`:
    tokens before EOS may be drawn (EOS banned before: for timing equal lengths)."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, not {temperature}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, not {samples}")
    device = src.device
    n, N = src.size(0), samples
    lines = torch.arange(1, n + 1, device=device) if lines is None else lines.to(device)
    sync_every = sync_every or default_sync_every(device)
    leave_fraction = default_leave_fraction(device)
    max_len = max_output_lengths(model, src, max_len_a, max_len_b).repeat_interleave(N)  # per row
    steps = int(max_len.max()) + 1 if n else 0
    memory, src_mask = model.encode(src)
    state = start_decoding(model, memory, src_mask, N, capacity=steps)  # N rows per sentence
    rows = TokenRows(model, state, max_len, steps, N, carried={"keys": row_keys(seed, lines, N)})
    banned, banned_eos = never_produced(model, device), never_produced(model, device, eos=True)
    results: list[list[Hypothesis]] = [[] for _ in range(n)]
    for step in range(steps):
        logits = decode_step(model, rows.last, state).float()
        log_probs = torch.log_softmax(logits, dim=-1)  # the model's: what a sample's log_prob sums
        tempered = log_probs if temperature == 1.0 else torch.log_softmax(logits.div_(temperature), dim=-1)
        never = banned_eos if step < min_len else banned
        allowed = 1.0 - tempered.index_select(1, never).double().exp().sum(1)  # the mass drawn from
        token = rows.limited(step, draw(ban(tempered, never), sampling, uniforms(rows.carried["keys"], step), allowed))
        rows.add(step, token, log_probs.gather(1, token[:, None])[:, 0])
        if (step + 1) % sync_every and step + 1 < steps:
            continue
        if rows.collect(results, leave_fraction):  # a sentence is decided when all its samples have ended
            break
    return results
