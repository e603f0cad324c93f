"""Target prefixes (`nmt translate --prefix-file`): a sentence's hypothesis is forced through the tokens of its
prefix, one per step, and the search goes on from there.

The prefix tokens are part of the output and of its score: they count with the model's log-probabilities of
them, and toward |Y| in the length penalty. A multilingual model's target-language tag is the first token of
every prefix and is certain (log-probability 0), as transformers' forced_bos_token_id makes it. Beam search
(inference/beam.py) and greedy search (inference/greedy.py) force them; sampling takes none.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from nmtcli.model.transformer import Transformer


def prefix_tensors(model: Transformer, prefixes: Sequence[list[int]], src: Tensor, max_len: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The prefixes as a right-padded (n, P) tensor and their lengths (n,), and the length limits that keep
    every prefix whole: a prefix as long as the limit or longer is the whole output (then EOS), and a
    sentence with an empty source (EOS alone) outputs its prefix only: there is nothing to translate."""
    cfg = model.config
    if len(prefixes) != src.size(0) or any(len(p) > cfg.max_positions - 2 for p in prefixes):
        raise ValueError(f"need one prefix per sentence, each of at most {cfg.max_positions - 2} tokens")
    lengths = torch.tensor([len(p) for p in prefixes], dtype=torch.long)
    prefix = torch.full((len(prefixes), max(1, max(map(len, prefixes), default=0))), cfg.pad_id, dtype=torch.long)
    for i, p in enumerate(prefixes):
        prefix[i, : len(p)] = torch.tensor(p, dtype=torch.long)
    prefix, lengths = prefix.to(src.device), lengths.to(src.device)
    empty_source = (src != cfg.pad_id).sum(1) == 1
    return prefix, lengths, torch.where(empty_source & (lengths > 0), lengths, torch.maximum(max_len, lengths))


def prefix_rows(prefix: Tensor, prefix_len: Tensor, generated: Tensor, rows_per_sentence: int) -> tuple[Tensor, Tensor]:
    """Which rows (rows, 1) are still inside their sentence's prefix at this step, and the prefix token (rows, 1)
    this step's token must be there. Tensor operations only."""
    position = (generated - 1).clamp(max=prefix.size(1) - 1)  # the position this step's token fills
    forced = (generated <= prefix_len).repeat_interleave(rows_per_sentence).unsqueeze(1)
    token = prefix.index_select(1, position).repeat_interleave(rows_per_sentence, dim=0)
    return forced, token


def alone(log_prob: Tensor, width: int) -> Tensor:
    """Candidates (rows, width) of rows that offer one token only: its log-probability (rows, 1) first, -inf after."""
    return torch.cat([log_prob, log_prob.new_full((log_prob.size(0), width - 1), float("-inf"))], dim=1)
