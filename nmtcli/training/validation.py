"""Validation during training: perplexity of the valid split and, optionally, its BLEU.

BLEU goes through the same path as `nmt translate` + `nmt score`: sentencepiece-encode the plain-text
valid source, beam search (sec. 6.1: beam 4, alpha 0.6, max length input + 50) through inference/batches.py's
`translate_ids`, decode to one line each, and score with sacreBLEU against the plain-text reference. Both are split over the ranks and summed (loss) or
gathered (translations), so every rank ends with the same numbers and takes the same decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nmtcli.data.batching import ParallelData, make_batches
from nmtcli.data.prepare import reference_lines
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


# (direction: "SRC-TGT" of multilingual data, else None; its source and target tag ids, or None; sources; references)
ValidSet = tuple[str | None, tuple[int, int] | None, list[str], list[str]]


def valid_sets(tokenizer, manifest: dict[str, Any], data_dir: Path, source: str, target: str) -> list[ValidSet]:
    """Each direction BLEU is computed for: every direction of multilingual data (named SRC-TGT), else the one
    direction (None), with the tags of `prepare --vocab-from`'s multilingual model where it has them."""
    directions = manifest.get("directions")
    if directions:
        return [(f"{d['source']}-{d['target']}", (tokenizer.languages[d["source"]], tokenizer.languages[d["target"]]),
                 reference_lines(data_dir, f"valid.{d['source']}-{d['target']}", d["source"]),
                 reference_lines(data_dir, f"valid.{d['source']}-{d['target']}", d["target"])) for d in directions]
    tags = manifest.get("language_tags")  # a multilingual model's codes of the data's languages (prepare --vocab-from)
    ids = (tokenizer.languages[tags["source"]], tokenizer.languages[tags["target"]]) if tags else None
    return [(None, ids, reference_lines(data_dir, "valid", source), reference_lines(data_dir, "valid", target))]


def bleu_values(model: Transformer, tokenizer, sets: list[ValidSet], settings: BleuSettings, autocast, device: torch.device,
                ranks: distributed.Ranks) -> dict[str, float]:
    """valid_bleu of the one direction; of multilingual data each direction's (valid_bleu_SRC-TGT), and their mean
    (valid_bleu), which decides the best checkpoint."""
    scores = {}
    for direction, tags, sources, references in sets:
        found = valid_bleu(model, tokenizer, sources, references, settings, autocast, device, ranks, tags)
        if found:
            scores[direction] = found["valid_bleu"]
    if list(scores) == [None]:
        return {"valid_bleu": scores[None]}
    values = {}
    if scores:
        values.update({f"valid_bleu_{d}": v for d, v in scores.items()})
        values["valid_bleu"] = sum(scores.values()) / len(scores)
    return values
