"""Batched beam search (sec. 6.1: beam 4, length penalty alpha 0.6, max length input + 50, early stop).

The encoder runs once per batch; the decoder runs one position at a time with cached self-attention
keys/values and encoder-decoder keys/values computed once. Rows are (sentence, beam) pairs
flattened into one batch dimension.

The whole state of the search lives in tensors on the model's device, and a step (`BeamSearch.step`)
updates it with tensor operations only: it never waits for the device, so a GPU runs ahead of the
Python that feeds it, and the step can be captured as a CUDA graph (inference/graphs.py). The host
looks at the state only every `sync_every` steps, to drop the sentences that are decided (on a CPU
every step: there waiting costs nothing and a smaller batch is faster at once).

Target prefixes (`nmt translate --prefix-file`, inference/prefixes.py): a sentence's hypothesis is forced
through the tokens of its prefix, one per step, and the search goes on from there.

A finished hypothesis ranks by its log-probability over the length penalty, plus a brevity penalty where it
has a weight (inference/penalties.py: lp, Brevity).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import torch
from torch import Tensor

from nmtcli.inference.outputs import (Hypothesis, ban, default_leave_fraction, default_sync_every, keep_sentences, leaving, log_normalizer,
                                      log_probs_of, max_output_lengths, never_produced, top_k_per_row)
from nmtcli.inference.penalties import NO_BREVITY, Brevity, expected_lengths, lp
from nmtcli.inference.prefixes import alone, prefix_rows, prefix_tensors
from nmtcli.inference.shortlist import Shortlist, for_batch
from nmtcli.model.incremental import decode_step, select_in_front, start_decoding
from nmtcli.model.transformer import Transformer

_GENERATIONS = itertools.count()  # tells apart the tensors of every search state of the process


class GraphsOff(Exception):
    """The step graphs (inference/graphs.py) failed in a way that leaves the search's state untrusted and
    turned themselves off: the batch is searched again from its start without them."""


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: Tensor,
    beam: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    nbest: int = 1,
    length_penalty: str = "gnmt",
    min_len: int = 0,
    sync_every: int | None = None,
    graphs=None,
    prefixes: Sequence[list[int]] | None = None,
    brevity: Brevity = NO_BREVITY,
    shortlist: Shortlist | None = None,
) -> list[list[Hypothesis]]:
    """src: (B, S) ids ending in EOS, right-padded. Returns the `nbest` best hypotheses of each sentence.
    `prefixes`: token ids each sentence's output must start with ([] for none; see prefix_tensors).
    `brevity`: the brevity penalty finished hypotheses pay (Brevity; none by default).

    A sentence is decided when `nbest` hypotheses have ended and no live one can still beat them:
    log-probabilities only fall as a hypothesis grows, so a live hypothesis's best possible final
    score is its current log-probability divided by the largest penalty it could reach (a brevity penalty
    is never above 0, so it only lowers the finished ones).
    `graphs`: a `StepGraphs` (inference/graphs.py) that replays captured steps on a GPU.
    `shortlist`: the model's lexical shortlist (inference/shortlist.py): each step scores only the target pieces the
    batch's sources can translate to (not with `graphs`, enabled or not: a line's translation must not depend on whether
    the graphs of its batch worked).
    """
    if beam < 1 or nbest < 1 or nbest > beam:
        raise ValueError(f"need 1 <= nbest ({nbest}) <= beam ({beam})")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, not {alpha}")
    lp(1, alpha, length_penalty)  # an unknown kind fails here, before any work
    sync_every = sync_every or default_sync_every(src.device)
    if graphs is not None:  # a GPU's graphed search decodes over the whole vocabulary, also once the graphs turn themselves off
        shortlist = None
    search = BeamSearch(model, src, beam, alpha, max_len_a, max_len_b, nbest, length_penalty, min_len, prefixes, graphs, brevity, shortlist)
    try:
        return search.run(sync_every, graphs, default_leave_fraction(src.device))
    except GraphsOff:
        pass  # outside the handler, the failed search's memory can go before the new search's is taken
    del search
    search = BeamSearch(model, src, beam, alpha, max_len_a, max_len_b, nbest, length_penalty, min_len, prefixes, brevity=brevity,
                        shortlist=shortlist)
    return search.run(sync_every, None, default_leave_fraction(src.device))


def decoder_dtype(memory: Tensor) -> torch.dtype:
    """What the decoder's keys and values are computed in: autocast's dtype where it is on (the encoder's
    output `memory` is float32 under autocast), else memory's."""
    kind = memory.device.type
    return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else memory.dtype


class BeamSearch:
    """The state of a batched beam search, all of it on the model's device (n sentences, K beams, C positions).

    tokens (n, K, C)       the token each beam took at each position, and
    parents (n, K, C)      the beam it continued (position t's hypothesis in beam k is position t-1's in beam
                           parents[k, t], plus tokens[k, t]): a step writes one position of each and never
                           copies a hypothesis; a hypothesis's tokens are read back from its end when it leaves
    scores (n, K)          the live hypotheses' log-probabilities (-inf: no hypothesis)
    finished_* (n, nbest)  the best ended hypotheses so far, best first: score, log-prob, the beam and
                           length they ended in (their last token is at position length - 1 of that beam)
    done (n,)              decided: nothing can beat the finished ones any more
    expected_len (n,)      the length the source predicts (Brevity): finished hypotheses shorter pay for it
    prefix (n, P), prefix_len (n,)  the tokens forced at the first steps (None without prefixes)

    While a sentence is inside its prefix only one of its beams is live (the others are -inf), as at
    the first step: K copies of one hypothesis would otherwise fill the beam and, after the prefix,
    offer the same K candidates K times (CTranslate2 issue 277).

    With step graphs (`graphs`, inference/graphs.py) the search runs in a shape class (memory.shape_class):
    the graphs pad the batch to the class's sentences (an EOS each, decided from the start) and source width,
    give the decoder cache the class's capacity, and make every tensor a step reads or writes a view of their
    Arena, where the previous batch of the class had its own: a graph recorded for the class replays for this
    batch. Decided sentences leave only at class boundaries (_leave_in_class).
    """

    def __init__(self, model: Transformer, src: Tensor, beam: int, alpha: float, max_len_a: float, max_len_b: int,
                 nbest: int, length_penalty: str, min_len: int, prefixes: Sequence[list[int]] | None = None, graphs=None,
                 brevity: Brevity = NO_BREVITY, shortlist: Shortlist | None = None):
        cfg = model.config
        self.model, self.beam, self.nbest, self.alpha, self.length_penalty = model, beam, nbest, alpha, length_penalty
        self.brevity = brevity
        device = src.device
        real = src.size(0)  # the batch's sentences; more rows are padding in a shape class
        self.shape_key = None  # (sentences aside) the shape class the search runs in, with graphs
        self.graphs = graphs if graphs is not None and graphs.enabled and real > 0 else None
        if self.graphs is not None:
            src, prefixes = self.graphs.pad_to_class(cfg, src, prefixes, max_len_a, max_len_b)
        n, K = src.size(0), beam
        self.n_sentences = n
        self.max_len = max_output_lengths(model, src, max_len_a, max_len_b)  # (n,)
        self.prefix = self.prefix_len = None
        if prefixes is not None and any(prefixes):
            self.prefix, self.prefix_len, self.max_len = prefix_tensors(model, prefixes, src, self.max_len)
        self.steps = int(self.max_len[:real].max()) + 1 if n else 0  # every sentence is decided by then (EOS included)
        self.max_penalty = lp(self.max_len.double() + 1, alpha, length_penalty).float()  # EOS included
        self.min_len = torch.tensor(min_len, device=device)
        self.expected_len = expected_lengths(model, src, brevity)
        memory, src_mask = model.encode(src)
        # With a shortlist a step's logits are those of its ids alone: their columns stand for the vocabulary's ids.
        self.output = for_batch(model, shortlist, src, prefixes) if self.graphs is None else None
        width = cfg.vocab_size if self.output is None else len(self.output)
        capacity, alloc = self.steps, None
        if self.graphs is not None:
            capacity, self.prefix, alloc = self.graphs.class_tensors(cfg, src, self.steps, self.prefix, max_len_a, max_len_b)
            self.shape_key = (src.size(1), capacity, 0 if self.prefix is None else self.prefix.size(1), K, nbest, alpha, length_penalty,
                              brevity.weight, decoder_dtype(memory))
        self.state = start_decoding(model, memory, src_mask, K, capacity=capacity, alloc=alloc, reorders=True)
        if 2 * K <= width:  # the first step's one row per sentence offers the 2K candidates a step ranks
            self.state.cache.start_with(n)  # all beams start identical: the first step decodes one row per sentence
        C = self.state.cache.capacity
        self.sentence = torch.arange(n, device=device)  # original index of each sentence still in the batch
        self.last = torch.full((n * K,), cfg.bos_id, dtype=torch.long, device=device)
        self.tokens = torch.zeros((n, K, C), dtype=torch.long, device=device)
        self.parents = torch.zeros((n, K, C), dtype=torch.long, device=device)
        self.scores = torch.full((n, K), float("-inf"), device=device)
        self.scores[:, 0] = 0.0  # all beams start identical: keep one alive so the first step has no duplicates
        self.finished_score = torch.full((n, nbest), float("-inf"), device=device)
        self.finished_log_prob = torch.full((n, nbest), float("-inf"), device=device)
        self.finished_beam = torch.zeros((n, nbest), dtype=torch.long, device=device)
        self.finished_length = torch.zeros((n, nbest), dtype=torch.long, device=device)
        self.done = torch.zeros(n, dtype=torch.bool, device=device)
        self.banned = never_produced(model, device)
        self.eos_column = cfg.eos_id
        self.allowed = None  # with a shortlist (n, S): 0 where a column's id is in the sentence's own list, -inf elsewhere
        if self.output is not None:
            self.allowed = self.output.mask
            self.banned = self.output.columns_among(self.banned)
            self.eos_column = int(self.output.column(torch.tensor(cfg.eos_id, device=device)))
        self.results: list[list[Hypothesis]] = [[] for _ in range(real)]
        self.generation = next(_GENERATIONS)  # new whenever the state gets new tensors (decided sentences leave)
        if self.graphs is not None:
            self.graphs.move_into_arena(self, real)

    # --- one step, on the device ------------------------------------------------------------------

    def step(self) -> None:
        """Extend every live hypothesis by one token and keep the K best; record those that end.

        Tensor operations only, every result written into the state's own tensors: no value comes
        back to the host, so the step can be captured and replayed as a CUDA graph.
        """
        cfg = self.model.config
        n, K = self.scores.shape
        cache = self.state.cache
        R = cache.rows // n  # rows per sentence: K, or 1 in a first step that decodes the one start of all beams
        logits = decode_step(self.model, self.last[: n * R], self.state, None if self.output is None else self.output.project)  # (n * R, V or S)
        if self.allowed is not None:  # each sentence over its own shortlist, normalised over it
            logits = (logits.view(n, R, -1) + self.allowed.unsqueeze(1)).view(n * R, -1)
        generated = cache.position  # tokens generated, EOS included, once this step's token is chosen
        log_probs, top_tokens = self.candidates(logits, generated, R)
        per_row = log_probs.size(1)
        at_max = generated > self.max_len  # (n,)

        candidates = (self.scores[:, :R].unsqueeze(-1) + log_probs.view(n, R, per_row)).view(n, R * per_row)
        cand_scores, cand_index = candidates.topk(2 * K, dim=1)  # each beam ends at most once: K live remain
        cand_beam = cand_index // per_row
        cand_token = top_tokens.view(n, R * per_row).gather(1, cand_index)
        ends = (cand_token == cfg.eos_id) & cand_scores.isfinite() & ~self.done.unsqueeze(1)
        self._record_finished(ends, cand_beam, cand_scores, generated)

        # The K best candidates that did not end continue.
        keep = torch.argsort(ends.to(torch.int8), dim=1, stable=True)[:, :K]
        next_beam = cand_beam.gather(1, keep)
        next_token = cand_token.gather(1, keep)
        next_scores = cand_scores.gather(1, keep)
        best_live = next_scores.max(1).values / self.max_penalty
        self.done |= at_max | (self.finished_score[:, -1] >= best_live)

        self.tokens.index_copy_(2, generated - 1, next_token.unsqueeze(-1))
        self.parents.index_copy_(2, generated - 1, next_beam.unsqueeze(-1))
        self.scores.copy_(next_scores)
        self.last.copy_(next_token.view(-1))
        self.state.reorder((torch.arange(n, device=next_beam.device).unsqueeze(1) * R + next_beam).view(-1))

    def candidates(self, logits: Tensor, generated: Tensor, R: int,
                   normalizer: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        """The tokens each row may add this step and their log-probabilities, best first: (rows, 2K) each (fewer
        for a vocabulary under 2K). `logits` (rows, V), the model's, in its dtype, are masked in place; with a shortlist
        (rows, S), the shortlist's ids' (the tokens returned are the vocabulary's).

        Within a row every candidate shares the row's score, so the 2K best candidates of a sentence are among the
        2K best tokens of each of its rows; and log p = logit - logsumexp(row) keeps the logits' order, so those
        are the row's 2K largest logits. They alone (and EOS, and a prefix's token) become log-probabilities: no
        (rows, V) tensor of log-probabilities is made. `normalizer`: the logits' log_normalizer, where the caller
        took it (before masking more tokens of its own). Tensor operations only.
        """
        cfg = self.model.config
        K = self.scores.size(1)
        if normalizer is None:
            normalizer = log_normalizer(logits)  # of the model's distribution, before any token is masked
        # PAD and BOS never, EOS not before min_len: a -inf logit is a -inf log-probability.
        ban(logits, self.banned)
        eos_column = self.eos_column
        logits[:, eos_column].masked_fill_(generated <= self.min_len, float("-inf"))
        per_row = min(2 * K, logits.size(1))
        top_logits, tokens = top_k_per_row(logits, per_row)
        if self.output is not None:
            tokens = self.output.ids[tokens]
        log_probs = log_probs_of(top_logits, normalizer)
        eos = log_probs_of(logits[:, eos_column : eos_column + 1], normalizer)  # (rows, 1)
        if self.prefix is not None:  # a row inside its prefix offers the prefix's next token alone (at its log-probability)
            forced, token = prefix_rows(self.prefix, self.prefix_len, generated, R)
            column = token if self.output is None else self.output.column(token)  # a prefix's ids are in the shortlist
            token_log_prob = log_probs_of(logits.gather(1, column), normalizer)  # masked: PAD, BOS, EOS too early are -inf
            if cfg.language_tags:  # a multilingual model's first prefix token, the target language's tag, is certain
                token_log_prob = token_log_prob.masked_fill(forced & (generated == 1), 0.0)
            log_probs = torch.where(forced, alone(token_log_prob, per_row), log_probs)
            tokens = torch.where(forced, token, tokens)
        # At its length limit a sentence may only end: its rows offer EOS alone. (No row is inside its prefix
        # there: prefix_tensors keeps every limit at least as long as the prefix.)
        rows_at_max = (generated > self.max_len).repeat_interleave(R)[:, None]
        log_probs = torch.where(rows_at_max, alone(eos, per_row), log_probs)
        tokens = torch.where(rows_at_max, cfg.eos_id, tokens)
        return log_probs, tokens

    def _record_finished(self, ends: Tensor, beam: Tensor, scores: Tensor, generated: Tensor) -> None:
        """Merge this step's ended candidates into the nbest finished hypotheses of each sentence.

        A stable sort keeps earlier hypotheses first among equal scores, so ties go the same way
        whatever the batch.
        """
        new_score = torch.where(ends, self.final_scores(scores, generated), float("-inf"))
        new_log_prob = torch.where(ends, scores, float("-inf"))
        all_score = torch.cat([self.finished_score, new_score], dim=1)
        order = torch.sort(all_score, dim=1, descending=True, stable=True).indices[:, : self.nbest]
        all_beam = torch.cat([self.finished_beam, beam], dim=1)  # an ended candidate's tokens are its beam's so far
        all_length = torch.cat([self.finished_length, (generated - 1).expand_as(beam)], dim=1)
        self.finished_score.copy_(all_score.gather(1, order))
        self.finished_log_prob.copy_(torch.cat([self.finished_log_prob, new_log_prob], dim=1).gather(1, order))
        self.finished_beam.copy_(all_beam.gather(1, order))
        self.finished_length.copy_(all_length.gather(1, order))

    def final_scores(self, scores: Tensor, generated: Tensor) -> Tensor:
        """What hypotheses that end now (log-probabilities `scores` (n, c), `generated` tokens with EOS) rank by:
        log P / lp, plus the brevity penalty where there is one."""
        final = scores / lp(generated.to(torch.float64), self.alpha, self.length_penalty).float()
        if self.brevity.weight:
            final = final + self.brevity.penalty(self.expected_len.unsqueeze(1), generated - 1)
        return final

    # --- the host's part ------------------------------------------------------------------------

    def run(self, sync_every: int = 1, graphs=None, leave_fraction: float = 0.0) -> list[list[Hypothesis]]:
        step = 0
        while self.sentence.numel():
            if step == self.steps:
                raise AssertionError("beam search ran past every sentence's length limit")  # a bug, not bad input
            if graphs is not None and step:  # the first step may change the number of rows: never captured
                graphs.step(self)
            else:
                self.step()
            step += 1
            if step % sync_every == 0 or step == self.steps:
                if self.shape_key is None:
                    self._drop_decided(leave_fraction)
                else:
                    self._leave_in_class()
        return self.results

    def _drop_decided(self, leave_fraction: float = 0.0) -> None:
        """Collect the decided sentences' results and continue with the others only (one sync), once
        more than `leave_fraction` of the sentences are decided (or all of them)."""
        done = self.done.tolist()
        finished = leaving(done, leave_fraction)
        if not finished:
            return
        self._collect(finished)
        if len(finished) == len(done):
            self.sentence = self.sentence[:0]
            return
        names = self._by_sentence()
        kept, (self.last,) = keep_sentences(self.state, done, self.beam, [getattr(self, name) for name in names], [self.last])
        for name, t in zip(names, kept):
            setattr(self, name, t)
        self.generation = next(_GENERATIONS)

    def _leave_in_class(self) -> None:
        """_drop_decided for a search in a shape class: the decided sentences' results are collected at once,
        but the others go on in the smallest class that holds them, compacted into the front rows of the
        same tensors (the same addresses: the smaller class's graphs replay), the decided ones that fill the
        class riding along, masked. Classes are at most a quarter apart (memory.ladder), so at most a fifth
        of a step's rows are decided sentences (on a GPU a step of fewer rows is hardly cheaper), and a class
        reached this way is the class of a batch of that many sentences: its graphs serve both."""
        done, sentence = self.done.tolist(), self.sentence.tolist()
        new = [i for i, d in enumerate(done) if d and sentence[i] >= 0]
        if new:
            self._collect(new)
            self.sentence[new] = -1
        live = [i for i, d in enumerate(done) if not d]
        if not live:
            self.sentence = self.sentence[:0]
            return
        going_on = self.graphs.rows_in_smaller_class(done)
        if going_on is None:
            return
        index = torch.tensor(going_on, device=self.done.device)
        self.state.keep(index, in_place=True)
        for name in ("sentence", *self._INPUTS, *self._STEP_STATE):
            if getattr(self, name, None) is not None and name not in ("last", "min_len", "banned"):
                setattr(self, name, select_in_front(getattr(self, name), index))
        self.last = select_in_front(self.last.view(-1, self.beam), index).view(-1)
        self.generation = next(_GENERATIONS)

    def _by_sentence(self) -> tuple[str, ...]:
        """The state's tensors with one entry per sentence (n, ...): they leave the batch with their sentences."""
        return ("sentence", "max_len", "max_penalty", "expected_len", "tokens", "parents", "scores", "finished_score", "finished_log_prob",
                "finished_beam", "finished_length", "done", *(("prefix", "prefix_len") if self.prefix is not None else ()),
                *(("allowed",) if self.allowed is not None else ()))

    # What a step changes: checked and restored by inference/graphs.py.
    _STEP_STATE = ("last", "tokens", "parents", "scores", "finished_score", "finished_log_prob", "finished_beam",
                   "finished_length", "done")
    # What a step reads and never changes (besides the decoder state's encoder keys/values).
    _INPUTS = ("max_len", "max_penalty", "expected_len", "min_len", "banned", "prefix", "prefix_len")

    def class_key(self) -> tuple:
        """The shape class the next step runs in: a graph recorded for it replays for any search that has it
        (with the same tensors of the Arena current: the caller adds which set of decoder buffers)."""
        return (self.scores.size(0), *self.shape_key)

    def graph_tensors(self) -> dict[str, Tensor]:
        """Every tensor a step reads or writes: a graph replays on them where it recorded them."""
        state = self.state
        tensors = {**self.step_tensors(), "memory_mask": state.memory_mask}
        if state.cache.reads_slots:  # the position a step writes moves; the whole buffers are listed below
            tensors = {name: t for name, t in tensors.items() if not name.startswith(("keys.", "values."))}
        tensors |= {name: getattr(self, name) for name in self._INPUTS if getattr(self, name) is not None}
        for i, (k, v) in enumerate(state.memory_kv):
            tensors[f"memory.keys.{i}"], tensors[f"memory.values.{i}"] = k, v
        cache = state.cache
        _, current, spare, _, _ = cache.host_state()  # both sets' rows in use: the current set, the one a step reorders into
        for name, buffers in (("current", current), ("spare", spare)):
            for kv, layers in zip(("keys", "values"), buffers or ()):
                tensors |= {f"cache.{name}.{kv}.{i}": t[: cache.rows] for i, t in enumerate(layers)}
        if cache.reads_slots:
            tensors["cache.slots"] = cache.slots[: cache.rows]
        return tensors

    def step_tensors(self) -> dict[str, Tensor]:
        """Everything the next step changes: the search state, and of the decoder cache the positions it
        reads (its span: a step writes one of them and reorders them all), as views."""
        cache = self.state.cache
        tensors = {name: getattr(self, name) for name in self._STEP_STATE}
        tensors["position"] = cache.position
        # Read through slots, a step writes one position and the slots; otherwise it reorders its whole span.
        start, end = (cache.length, cache.length + 1) if cache.reads_slots else (0, cache.span())
        for i, (k, v) in enumerate(zip(cache.keys, cache.values)):
            tensors[f"keys.{i}"], tensors[f"values.{i}"] = k[:, :, start:end], v[:, :, start:end]
        if cache.reads_slots:
            tensors["slots"] = cache.slots[: cache.rows]
        return tensors

    def snapshot(self) -> dict[str, Tensor]:
        """Copies of everything the next step changes."""
        return {name: t.clone() for name, t in self.step_tensors().items()}

    def restore(self, snapshot: dict[str, Tensor]) -> None:
        """Back to a snapshot, in place: the tensors keep their addresses."""
        for name, t in self.step_tensors().items():
            t.copy_(snapshot[name])

    def _collect(self, which: list[int]) -> None:
        index = torch.tensor(which, device=self.done.device)
        sentence = self.sentence.index_select(0, index).tolist()
        score = self.finished_score.index_select(0, index).tolist()
        log_prob = self.finished_log_prob.index_select(0, index).tolist()
        length = self.finished_length.index_select(0, index)
        longest = int(length.max()) if length.numel() else 0
        tokens = backtrack(self.tokens.index_select(0, index)[:, :, :longest], self.parents.index_select(0, index)[:, :, :longest],
                           self.finished_beam.index_select(0, index), length).tolist()
        length = length.tolist()
        for i, s in enumerate(sentence):
            self.results[s] = [
                Hypothesis(tokens[i][j][: length[i][j]], score[i][j], log_prob[i][j])
                for j in range(self.nbest) if score[i][j] != float("-inf")
            ]


def backtrack(tokens: Tensor, parents: Tensor, beam: Tensor, length: Tensor) -> Tensor:
    """The tokens of hypotheses that ended in `beam` (n, h) after `length` (n, h) positions, from the beams'
    tokens and parents (n, K, L): read from the last position back, each position's beam the parent of the
    next one's. Returns (n, h, L), each row's first `length` entries its tokens (the rest: padding)."""
    n, hyps, L = beam.size(0), beam.size(1), tokens.size(2)
    out = torch.zeros((n, hyps, L), dtype=tokens.dtype, device=tokens.device)
    at = beam.clone()
    for t in range(L - 1, -1, -1):
        inside = length > t  # a hypothesis shorter than t + 1 has not started reading back yet
        out[:, :, t] = torch.where(inside, tokens[:, :, t].gather(1, at), 0)
        at = torch.where(inside, parents[:, :, t].gather(1, at), at)
    return out
