"""Token ids in, n-best lists out, in batches: the search every translation goes through (`translate_ids`).

A window's sentences are sorted by length (which keeps padding low), cut into batches of at most a budget of
padded source tokens (`BatchBudget`, `length_sorted_batches`), padded, searched (beam search, greedy search or
sampling), and put back in input order. A GPU that runs out of memory halves the batch (with a warning) and
keeps the smaller budget for every later batch. `nmt translate`, `nmt serve` and validation BLEU during
training all translate through here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import torch

from nmtcli import faults
from nmtcli.device import is_out_of_memory, on_device
from nmtcli.errors import NmtError
from nmtcli.inference.beam import Hypothesis, beam_search
from nmtcli.inference.graphs import StepGraphs
from nmtcli.inference.greedy import greedy_search
from nmtcli.inference.shortlist import Shortlist
from nmtcli.inference.sampling import parse_sampling, sample
from nmtcli.inference.settings import SearchSettings
from nmtcli.model.transformer import Transformer

# warn(message): the CLI prints it on stderr; the core only reports.
Warn = Callable[[str], None]


@dataclass
class BatchBudget:
    """Padded source tokens per search batch, and on a GPU sentences per batch (inference/memory.py);
    running out of memory lowers them for every later batch."""

    tokens: int
    sentences: int | None = None


def translate_ids(
    model: Transformer,
    sentences: Sequence[list[int]],
    settings: SearchSettings,
    budget: BatchBudget,
    device: torch.device,
    autocast: Callable[[], AbstractContextManager] = nullcontext,
    graphs: StepGraphs | None = None,
    warn: Warn | None = None,
    prefixes: Sequence[list[int]] | None = None,
    numbers: Sequence[int] | None = None,
    shortlist: Shortlist | None = None,
) -> list[list[Hypothesis]]:
    """The n-best lists of `sentences` (token ids, without EOS), in input order; [] for an empty one.
    `prefixes`: target ids each sentence's translations start with ([] for none; an empty sentence with a
    prefix translates to its prefix).

    The sentences are sorted by length (which keeps padding low), cut into batches of at most
    `budget.tokens` padded source tokens, padded, searched, and put back in input order. `nmt translate`,
    `nmt serve` and validation BLEU during training all translate through here. With `settings.sampling`,
    the n-best lists are samples, keyed by `numbers` (each sentence's line number; default 1, 2, ...).
    `shortlist`: a model's lexical shortlist, which beam and greedy search decode over (inference/shortlist.py).
    """
    warn = warn or (lambda message: None)
    numbers = numbers or range(1, len(sentences) + 1)
    results: list[list[Hypothesis]] = [[] for _ in sentences]
    if graphs is not None and graphs.enabled and settings.sampling is None and settings.beam > 1:
        # The window's batches are known before the first is searched: the Arena is sized once for all of them,
        # so its graphs are recorded once. (Not by searching the largest batch first: the roles peak in
        # different batches, sentences with the many short lines, the decoder's capacity with the few long ones.)
        graphs.budget = (budget.tokens, budget.sentences)
        plan = [([len(ids) for _, ids in batch], [len(prefixes[pos]) for pos, _ in batch] if prefixes else [])
                for batch in length_sorted_batches(sentences, budget, prefixes)]
        with on_device(device), autocast():
            graphs.reserve_window(model, plan, settings.beam, settings.nbest, settings.max_len_a, settings.max_len_b)
    for batch in length_sorted_batches(sentences, budget, prefixes):
        for (pos, _), hyps in zip(batch, _search(model, batch, settings, budget, device, autocast, graphs, warn, numbers, prefixes, shortlist)):
            results[pos] = hyps
    return results


def length_sorted_batches(sentences: Sequence[list[int]], budget: BatchBudget,
                          prefixes: Sequence[list[int]] | None = None) -> Iterator[list[tuple[int, list[int]]]]:
    """The non-empty sentences as (position, ids), shortest first (which keeps padding low), in batches of at
    most `budget.tokens` padded tokens with EOS (and at most `budget.sentences` sentences). The budget is read at every sentence: after running out of
    memory the next batch is already smaller. An empty sentence with a prefix is searched too (for its prefix)."""
    encoded = sorted(((pos, ids) for pos, ids in enumerate(sentences) if ids or prefixes and prefixes[pos]), key=lambda item: len(item[1]))
    batch: list[tuple[int, list[int]]] = []
    for item in encoded:
        longest = len(item[1]) + 1  # sorted ascending: the newest item is the longest
        if batch and (longest * (len(batch) + 1) > budget.tokens or len(batch) >= (budget.sentences or len(batch) + 1)):
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


def _search(model: Transformer, batch: list[tuple[int, list[int]]], s: SearchSettings, budget: BatchBudget, device: torch.device,
            autocast: Callable[[], AbstractContextManager], graphs: StepGraphs | None, warn: Warn,
            numbers: Sequence[int], prefixes: Sequence[list[int]] | None = None, shortlist: Shortlist | None = None) -> list[list[Hypothesis]]:
    """Search one batch; out of memory, let go of the graphs and their Arena and search it in halves (and keep the
    smaller batches from then on); a single line once more without graphs before it is given up."""
    try:
        faults.point("translate-batch", lines=len(batch))
        src = _pad(model, [ids for _, ids in batch], device)
        forced = None if prefixes is None else [prefixes[pos] for pos, _ in batch]
        if graphs is not None:
            graphs.budget = (budget.tokens, budget.sentences)  # the most sentences a shape class has
        with on_device(device), autocast():  # cuda:N current: the graphs' streams and captures are on it
            if s.sampling is not None:
                return sample(model, src, parse_sampling(s.sampling), s.temperature, s.seed, torch.tensor([numbers[pos] for pos, _ in batch]),
                              s.nbest, s.max_len_a, s.max_len_b)
            if s.beam == 1:  # one hypothesis: nothing for a penalty to choose between
                return greedy_search(model, src, s.max_len_a, s.max_len_b, prefixes=forced, shortlist=shortlist)
            return beam_search(model, src, s.beam, s.alpha, s.max_len_a, s.max_len_b, s.nbest, s.length_penalty, graphs=graphs,
                               prefixes=forced, brevity=s.brevity, shortlist=shortlist)
    except (RuntimeError, MemoryError) as e:
        if not is_out_of_memory(e):
            raise
    # Out of memory, outside the handler (the failed search's tensors can go): first of all let go of the graphs
    # and their Arena (their pool must not be in use when the cache is emptied).
    graphed = graphs is not None and graphs.enabled and s.sampling is None and s.beam > 1
    if graphs is not None:
        graphs.release()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    if len(batch) == 1:
        if graphed:  # a shape class pads the line's batch: once more as it is, without graphs
            warn(f"out of memory with CUDA graphs translating a single line of {len(batch[0][1])} tokens; searching it again without them")
            return _search(model, batch, s, budget, device, autocast, None, warn, numbers, prefixes, None)  # as the graphed batches
        raise NmtError(f"out of memory translating a single line of {len(batch[0][1])} tokens on {device}",
                       "use a smaller --beam, or a device with more memory")
    longest = len(batch[-1][1]) + 1
    budget.tokens = max(longest, min(budget.tokens, longest * len(batch)) // 2)
    if budget.sentences is not None:
        budget.sentences = max(1, min(budget.sentences, len(batch)) // 2)
    warn(f"out of memory with a batch of {len(batch):,} lines; continuing with --batch-tokens {budget.tokens:,}")
    half = len(batch) // 2
    return (_search(model, batch[:half], s, budget, device, autocast, graphs, warn, numbers, prefixes, shortlist)
            + _search(model, batch[half:], s, budget, device, autocast, graphs, warn, numbers, prefixes, shortlist))


def _pad(model: Transformer, sentences: list[list[int]], device: torch.device) -> torch.Tensor:
    """One row per sentence: its ids, EOS, then padding to the longest."""
    cfg = model.config
    width = max(len(s) for s in sentences) + 1
    src = torch.full((len(sentences), width), cfg.pad_id, dtype=torch.long)
    for i, ids in enumerate(sentences):
        src[i, : len(ids)] = torch.tensor(ids)
        src[i, len(ids)] = cfg.eos_id
    return src.to(device)
