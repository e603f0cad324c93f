"""Token-budget batches of sentence pairs of similar length (sec. 5.1), in a resumable seeded order.

Two ways to cut an epoch into batches (`make_batches`):
- by length (the default, and on a CPU): sentences sorted by length, each batch as many as fit
  `batch_tokens` at its longest sentence, padded to its own longest source and target;
- by shape class (`classes=True`, the trainer's default on a GPU): every sentence pair belongs to the
  class of its longer side's length (`class_length`: the smallest length of `CLASS_LENGTHS` that holds
  it), and every batch of a class has the class's shape (`ShapeClass`: rows x length, both sides),
  its missing rows padding. A GPU then meets a few shapes (one per class, about 12-15 on WMT) instead
  of a new one nearly every batch, and cuDNN, the varlen kernel or a compiled graph plan once per class.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

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

    def batch(self, indices: np.ndarray, shape: ShapeClass | None = None) -> Batch:
        """The sentences `indices` collated; `shape`: padded to that class (rows and lengths)."""
        return _collate_flat(*_gather(self.src, indices), *_gather(self.tgt, indices), *self.special_ids, shape)


def _gather(shard: Shard, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sentences `indices` of a shard back to back (one fancy-indexed read), and their lengths."""
    indices = np.asarray(indices, dtype=np.int64)
    lengths = shard.lengths[indices]
    ends = np.cumsum(lengths)
    # Position k of the result is token (k - start of its sentence in the result) of its sentence.
    within = np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) - np.repeat(ends - lengths, lengths)
    return np.asarray(shard.tokens[np.repeat(shard.offsets[indices], lengths) + within]), lengths


def collate(src: list[np.ndarray], tgt: list[np.ndarray], pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID,
            shape: ShapeClass | None = None) -> Batch:
    """Source + EOS, BOS + target, target + EOS, each right-padded to the batch's longest (or to `shape`)."""
    def flat(sentences: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        lengths = np.array([len(x) for x in sentences], dtype=np.int64)
        return (np.concatenate(sentences) if len(sentences) else np.zeros(0, np.int64)), lengths

    return _collate_flat(*flat(src), *flat(tgt), pad_id, bos_id, eos_id, shape)


def _collate_flat(src: np.ndarray, src_lengths: np.ndarray, tgt: np.ndarray, tgt_lengths: np.ndarray,
                  pad_id: int, bos_id: int, eos_id: int, shape: ShapeClass | None) -> Batch:
    n = len(src_lengths)
    src_len = int(src_lengths.max()) + 1
    tgt_len = int(tgt_lengths.max()) + 1
    rows = n
    if shape is not None:
        if shape.rows < n or shape.src_len < src_len or shape.tgt_len < tgt_len:
            raise ValueError(f"a batch of {n} rows, {src_len} x {tgt_len} tokens does not fit its class {shape}")
        rows, src_len, tgt_len = shape
    src_ids = np.full((rows, src_len), pad_id, dtype=np.int64)
    tgt_in = np.full((rows, tgt_len), pad_id, dtype=np.int64)
    tgt_out = np.full((rows, tgt_len), pad_id, dtype=np.int64)
    real = np.arange(n)
    # The row-major order of a mask's True cells is the order of the sentences' tokens back to back.
    src_ids[:n][np.arange(src_len) < src_lengths[:, None]] = src
    src_ids[real, src_lengths] = eos_id
    tgt_in[:n, 0] = bos_id
    tgt_in[:n, 1:][np.arange(tgt_len - 1) < tgt_lengths[:, None]] = tgt
    tgt_out[:n][np.arange(tgt_len) < tgt_lengths[:, None]] = tgt
    tgt_out[real, tgt_lengths] = eos_id
    # Padding rows: a source of one EOS and BOS in the decoder's input, so that attention always has a key
    # (an all-padding row is a fully masked softmax row, NaN in some kernels, and a sequence of length 0
    # for the varlen kernel); their output is all padding, so the loss skips them.
    src_ids[n:, 0] = eos_id
    tgt_in[n:, 0] = bos_id
    target_tokens = int(tgt_lengths.sum()) + n
    return Batch(torch.from_numpy(src_ids), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out), target_tokens)


# The lengths of the shape classes: multiples of 8 (tensor cores) up to 64, then about 1/4 apart up to
# 256 (about the longest sentence `nmt prepare` keeps); beyond, multiples of 64. The same ladder as
# --compile's buckets (training/compiling.py: LENGTH_BUCKETS), so classes add no compiled graphs.
CLASS_LENGTHS = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 256)


class ShapeClass(NamedTuple):
    """The shape every batch of a class has: `rows` sentence pairs, both sides padded to their length."""

    rows: int
    src_len: int
    tgt_len: int


def class_length(length: int) -> int:
    """The smallest class length that holds `length` tokens; beyond the ladder, the next multiple of 64."""
    for size in CLASS_LENGTHS:
        if length <= size:
            return size
    return length + (-length % 64)


def class_rows(length: int, batch_tokens: int) -> int:
    """Rows of a class of `length` tokens: as many as fit `batch_tokens`, a multiple of 8 where that
    leaves 8 or more (tensor cores), and at least one (a sentence longer than the budget trains alone)."""
    rows = batch_tokens // length
    return rows - rows % 8 if rows >= 8 else max(rows, 1)


def shape_class(src_lengths: np.ndarray, tgt_lengths: np.ndarray, batch_tokens: int) -> ShapeClass:
    """The class of a batch of sentences of these lengths (without EOS/BOS): its longest side decides."""
    length = class_length(int(max(np.max(src_lengths), np.max(tgt_lengths))) + 1)
    return ShapeClass(class_rows(length, batch_tokens), length, length)


def _class_lengths(cost: np.ndarray) -> np.ndarray:
    """`class_length` of each of the sentences' longer-side lengths (with EOS/BOS), at once."""
    ladder = np.asarray(CLASS_LENGTHS, dtype=np.int64)
    at = np.searchsorted(ladder, cost)
    beyond = cost + (-cost % 64)
    return np.where(at < len(ladder), ladder[np.minimum(at, len(ladder) - 1)], beyond)


def make_batches(src_lengths: np.ndarray, tgt_lengths: np.ndarray, batch_tokens: int, seed: int, epoch: int,
                 classes: bool = False) -> list[np.ndarray]:
    """Group sentence indices into batches of at most `batch_tokens` padded tokens on either side.

    Sentences are sorted by length (ties broken at random) so that a batch wastes little on padding,
    then the batches are shuffled. With `classes`, each class's sentences (in random order) are cut
    into batches of the class's rows instead; the last batch of a class is padded with empty rows.
    The order is a pure function of (seed, epoch) (and `classes`): resuming needs only the epoch and
    the position in it.
    """
    rng = np.random.default_rng([seed, epoch])
    n = len(src_lengths)
    src_cost = np.asarray(src_lengths, dtype=np.int64) + 1  # + EOS
    tgt_cost = np.asarray(tgt_lengths, dtype=np.int64) + 1  # + BOS / EOS
    if classes:
        batches = _class_batches(_class_lengths(np.maximum(src_cost, tgt_cost)), batch_tokens, rng.random(n))
    else:
        order = np.lexsort((rng.random(n), src_cost, tgt_cost))
        batches = _cut_by_budget(order, np.maximum(src_cost, tgt_cost)[order], batch_tokens)
    rng.shuffle(batches)
    return batches


def _cut_by_budget(order: np.ndarray, cost: np.ndarray, batch_tokens: int) -> list[np.ndarray]:
    """Cut `order` greedily: a batch takes sentences while (its rows) x (its longest `cost`) fits
    `batch_tokens`, and at least one. One numpy pass per batch, over a window no longer than a batch can be."""
    batches: list[np.ndarray] = []
    start, n = 0, len(order)
    while start < n:
        # A batch starting at `start` has fewer than batch_tokens // cost[start] + 2 rows: that many
        # rows are over the budget at its first sentence's length already.
        window = cost[start : start + batch_tokens // int(cost[start]) + 2]
        over = np.maximum.accumulate(window) * np.arange(1, len(window) + 1) > batch_tokens
        over[0] = False  # a sentence longer than the budget is a batch of its own
        size = int(np.argmax(over)) if over.any() else len(window)
        batches.append(order[start : start + size])
        start += size
    return batches


def _class_batches(lengths: np.ndarray, batch_tokens: int, tie_break: np.ndarray) -> list[np.ndarray]:
    """Each class's sentences in random order (`tie_break`), cut into batches of its `class_rows`."""
    order = np.lexsort((tie_break, lengths))
    sorted_lengths = lengths[order]
    classes, starts = np.unique(sorted_lengths, return_index=True)
    ends = np.append(starts[1:], len(order))
    batches: list[np.ndarray] = []
    for length, start, end in zip(classes.tolist(), starts.tolist(), ends.tolist()):
        rows = class_rows(length, batch_tokens)
        batches.extend(order[i : min(i + rows, end)] for i in range(start, end, rows))
    return batches


class BatchStream:
    """An endless, resumable stream of training batches: epoch after epoch, each in a fresh seeded order."""

    def __init__(self, data: ParallelData, batch_tokens: int, seed: int, classes: bool = False):
        self.data = data
        self.batch_tokens = batch_tokens
        self.seed = seed
        self.classes = classes  # batches of shape classes (make_batches); a resumed run keeps its checkpoint's
        self.epoch = 1
        self.position = 0  # batches of the current epoch already handed out
        self._batches: list[np.ndarray] | None = None

    def _epoch_batches(self) -> list[np.ndarray]:
        if self._batches is None:
            self._batches = make_batches(self.data.src.lengths, self.data.tgt.lengths, self.batch_tokens, self.seed,
                                         self.epoch, self.classes)
        return self._batches

    def __iter__(self):
        return self

    def __next__(self) -> Batch:
        indices = self.next_indices()
        return self.data.batch(indices, self.shape(indices))

    def classes_present(self) -> list[ShapeClass]:
        """Every shape class an epoch of this data has (shortest first); [] without classes."""
        if not self.classes:
            return []
        lengths = np.unique(_class_lengths(np.maximum(self.data.src.lengths, self.data.tgt.lengths) + 1))
        return [ShapeClass(class_rows(int(n), self.batch_tokens), int(n), int(n)) for n in lengths]

    def shape(self, indices: np.ndarray) -> ShapeClass | None:
        """The class a batch of these sentences is padded to (None without classes: to its own longest)."""
        if not self.classes:
            return None
        return shape_class(self.data.src.lengths[indices], self.data.tgt.lengths[indices], self.batch_tokens)

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
        state = {"epoch": self.epoch, "position": self.position}
        if self.classes:  # absent: batches by length (every checkpoint written before classes)
            state["classes"] = 1
        return state

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume at `state`'s position, in its way of making batches (the positions count its batches)."""
        self.epoch, self.position, self._batches = int(state["epoch"]), int(state["position"]), None
        self.classes = bool(state.get("classes", 0))
