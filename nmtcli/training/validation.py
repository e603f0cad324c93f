"""Validation during training: perplexity of the valid split and, optionally, its BLEU.

BLEU goes through the same path as `nmt translate` + `nmt score`: sentencepiece-encode the plain-text
valid source, beam search (sec. 6.1: beam 4, alpha 0.6, max length input + 50) through inference/batches.py's
`translate_ids`, decode to one line each, and score with sacreBLEU against the plain-text reference. Both are split over the ranks and summed (loss) or
gathered (translations), so every rank ends with the same numbers and takes the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from nmtcli.data.batching import ParallelData, make_batches
from nmtcli.inference.batches import BatchBudget, translate_ids
from nmtcli.inference.settings import SearchSettings
from nmtcli.inference.translator import encode_lines, one_line
from nmtcli.model.transformer import Transformer
from nmtcli.scoring import score
from nmtcli.training import distributed
from nmtcli.training.loss import output_loss, perplexity


@torch.no_grad()
def valid_loss(model: Transformer, data: ParallelData, batch_tokens: int, autocast, device: torch.device,
               ranks: distributed.Ranks) -> dict[str, float]:
    """Perplexity of the reference translations (label smoothing off), over all ranks' shares."""
    if len(data) == 0:
        return {}
    model.eval()
    total_nll, tokens = 0.0, 0
    batches = make_batches(data.src.lengths, data.tgt.lengths, batch_tokens, 0, 0)
    for indices in batches[ranks.rank :: ranks.world_size]:
        batch = data.batch(indices).to(device)
        with autocast():
            hidden = model(batch.src, batch.tgt_in, hidden=True)
            _, nll = output_loss(hidden, model.embedding.tokens.weight, model.final_logits_bias, batch.tgt_out, 0.0,
                                 model.config.pad_id, batch.target_tokens)
        total_nll += nll.item()
        tokens += batch.target_tokens
    total_nll, tokens = distributed.all_reduce_sum([total_nll, float(tokens)], device)
    nll = total_nll / max(tokens, 1.0)
    return {"valid_nll": nll, "valid_ppl": perplexity(nll)}


@dataclass(frozen=True)
class BleuSettings:
    lines: int  # translate the first `lines` lines of the valid split (-1: all)
    beam: int = 4  # sec. 6.1
    alpha: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50
    batch_tokens: int = 4096  # padded source tokens per beam-search batch


@torch.no_grad()
def valid_bleu(model: Transformer, sp, sources: list[str], references: list[str], settings: BleuSettings, autocast,
               device: torch.device, ranks: distributed.Ranks, tags: tuple[int, int] | None = None) -> dict[str, float]:
    """sacreBLEU of the model's translations of `sources` (each rank translates every world_size-th line). `tags`: a
    multilingual model's source and target language tag ids, put before each source and forced first in each
    translation, as `nmt translate --source-lang --target-lang` does."""
    if settings.lines >= 0:
        sources, references = sources[: settings.lines], references[: settings.lines]
    if not sources:
        return {}
    model.eval()
    mine = list(range(ranks.rank, len(sources), ranks.world_size))
    # Too-long lines are cut to the position table, as `nmt translate` does; empty lines stay empty.
    ids = encode_lines(sp.encode, [sources[i] for i in mine], model.config.max_positions - 1 - (tags is not None))
    prefixes = None
    if tags is not None:
        ids, prefixes = [[tags[0], *line] if line else [] for line in ids], [[tags[1]] if line else [] for line in ids]
    search = SearchSettings(beam=settings.beam, alpha=settings.alpha, max_len_a=settings.max_len_a, max_len_b=settings.max_len_b)
    hyps = translate_ids(model, ids, search, BatchBudget(settings.batch_tokens), device, autocast, prefixes=prefixes)
    out = {i: one_line(sp.decode(h[0].tokens)) if h else "" for i, h in zip(mine, hyps)}
    translations: dict[int, str] = {}
    for part in distributed.all_gather(out):
        translations.update(part)
    hypotheses = [translations[i] for i in range(len(sources))]
    bleu = score(hypotheses, references, ["bleu"])[0]
    return {"valid_bleu": bleu.score}
