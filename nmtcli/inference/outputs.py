"""What every search (beam, greedy, sampling) does around its choice of tokens.

PAD and BOS are never produced; at its length limit a row may only end (EOS); a row ends at its EOS;
and the host, looking at the state every `sync_every` steps, takes the decided sentences' outputs and
continues with the others only (once more than `leave_fraction` of the batch is decided, or all of it).
Beam search (inference/beam.py) chooses among candidates and keeps its own n-best lists, so it uses the
banned tokens and the host's part; greedy search and sampling add one token to each row per step, and
share `TokenRows` whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmtcli.model.incremental import DecoderState
from nmtcli.model.transformer import Transformer


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # log-probability divided by the length penalty: what the search ranks by
    log_prob: float
    alignment: str | None = None  # Pharaoh links to the source, when asked for (inference/alignment.py)


def never_produced(model: Transformer, device: torch.device, eos: bool = False) -> Tensor:
    """The ids a search never produces: PAD and BOS (and EOS, where it is not allowed yet). A decoder that starts
    from EOS (fairseq's M2M-100 and NLLB) may of course end with it."""
    cfg = model.config
    ids = {cfg.pad_id, *([cfg.bos_id] if cfg.bos_id != cfg.eos_id else []), *([cfg.eos_id] if eos else [])}
    return torch.tensor(sorted(ids), device=device)


def ban(log_probs: Tensor, banned: Tensor) -> Tensor:
    """In place: -inf at the `banned` ids of every row of (rows, V) log-probabilities."""
    return log_probs.index_fill_(1, banned, float("-inf"))


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

    def add(self, step: int, token: Tensor, log_probs: Tensor) -> None:
        """This step's token of every row (EOS where the row is at its length limit), its log-probability under
        `log_probs` (the model's) counted while the row is live; a row ends at its EOS."""
        token = torch.where(step >= self.max_len, self.eos_id, token)  # the limit forces EOS
        self.log_prob += torch.where(self.done, 0.0, log_probs.gather(1, token[:, None])[:, 0])
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
