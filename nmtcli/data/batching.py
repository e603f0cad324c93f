"""Token-budget batches of sentence pairs of similar length (sec. 5.1), in a resumable seeded order."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from nmtcli.data.shards import Shard
from nmtcli.model.config import BOS_ID, EOS_ID, PAD_ID


@dataclass
class Batch:
    src: torch.Tensor  # (B, S): source ids + EOS, right-padded
    tgt_in: torch.Tensor  # (B, T): BOS + target ids, right-padded
    tgt_out: torch.Tensor  # (B, T): target ids + EOS, right-padded
    target_tokens: int  # non-pad tokens in tgt_out: what the loss is normalized by

    def to(self, device: torch.device) -> Batch:
        return Batch(
            self.src.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.tgt_out.to(device, non_blocking=True),
            self.target_tokens,
        )


class ParallelData:
    """The binarized `<split>.<src>` / `<split>.<tgt>` pair of a prepared data dir."""

    def __init__(self, data_dir: Path, split: str, src_lang: str, tgt_lang: str, vocab_size: int,
                 pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID):
        self.src = Shard(Path(data_dir) / f"{split}.{src_lang}", vocab_size)
        self.tgt = Shard(Path(data_dir) / f"{split}.{tgt_lang}", vocab_size)
        if len(self.src) != len(self.tgt):
            raise ValueError(f"{split}: {len(self.src)} source but {len(self.tgt)} target sentences")
        self.special_ids = (pad_id, bos_id, eos_id)  # nmt's own, or a model's of --vocab-from (Marian: EOS 0)

    def __len__(self) -> int:
        return len(self.src)

    def batch(self, indices: np.ndarray) -> Batch:
        return collate([self.src[i] for i in indices], [self.tgt[i] for i in indices], *self.special_ids)


def collate(src: list[np.ndarray], tgt: list[np.ndarray], pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID) -> Batch:
    n = len(src)
    src_len = max(len(s) for s in src) + 1
    tgt_len = max(len(t) for t in tgt) + 1
    src_ids = np.full((n, src_len), pad_id, dtype=np.int64)
    tgt_in = np.full((n, tgt_len), pad_id, dtype=np.int64)
    tgt_out = np.full((n, tgt_len), pad_id, dtype=np.int64)
    for i, (s, t) in enumerate(zip(src, tgt)):
        src_ids[i, : len(s)] = s
        src_ids[i, len(s)] = eos_id
        tgt_in[i, 0] = bos_id
        tgt_in[i, 1 : len(t) + 1] = t
        tgt_out[i, : len(t)] = t
        tgt_out[i, len(t)] = eos_id
    target_tokens = int(sum(len(t) + 1 for t in tgt))
    return Batch(torch.from_numpy(src_ids), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), target_tokens)


def make_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, max_tokens: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Group sentence indices into batches of at most `max_tokens` padded tokens on either side.

    Sentences are sorted by length (ties broken at random) so that a batch wastes little on padding,
    then the batches are shuffled. The order is a pure function of (seed, epoch): resuming needs
    only the epoch and the position in it.
    """
    rng = np.random.default_rng([seed, epoch])
    n = len(src_lengths)
    src_cost = np.asarray(src_lengths, dtype=np.int64) + 1  # + EOS
    tgt_cost = np.asarray(tgt_lengths, dtype=np.int64) + 1  # + BOS / EOS
    order = np.lexsort((rng.random(n), src_cost, tgt_cost))
    batches: list[np.ndarray] = []
    start, longest = 0, 0
    for pos, i in enumerate(order):
        length = max(src_cost[i], tgt_cost[i])
        if pos > start and max(longest, length) * (pos - start + 1) > max_tokens:
            batches.append(order[start:pos])
            start, longest = pos, 0
        longest = max(longest, length)
    if start < n:
        batches.append(order[start:])
    rng.shuffle(batches)
    return batches


class BatchStream:
    """An endless, resumable stream of training batches: epoch after epoch, each in a fresh seeded order."""

    def __init__(self, data: ParallelData, max_tokens: int, seed: int):
        self.data = data
        self.max_tokens = max_tokens
        self.seed = seed
        self.epoch = 1
        self.position = 0  # batches of the current epoch already handed out
        self._batches: list[np.ndarray] | None = None

    def _epoch_batches(self) -> list[np.ndarray]:
        if self._batches is None:
            self._batches = make_batches(self.data.src.lengths, self.data.tgt.lengths, self.max_tokens, self.seed, self.epoch)
        return self._batches

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        return self.data.batch(self.next_indices())

    # --- per-rank sharding: in data-parallel training every rank walks the same global order and
    # collates only its own batches, so each rank reads its share and all ranks stay in step.

    def next_indices(self) -> np.ndarray:
        """Sentence indices of the next batch of the global order, without reading or collating it."""
        batches = self._epoch_batches()
        if self.position >= len(batches):
            self.epoch, self.position, self._batches = self.epoch + 1, 0, None
            batches = self._epoch_batches()
        indices = batches[self.position]
        self.position += 1
        return indices

    def target_tokens(self, indices: np.ndarray) -> int:
        """Non-pad tokens of `tgt_out` for these sentences (target + EOS), known without collating."""
        return int(self.data.tgt.lengths[indices].sum()) + len(indices)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position, self._batches = int(state["epoch"]), int(state["position"]), None
