"""The batches of each optimizer step, read and collated ahead of time in a background thread.

A step is `world_size x update_freq` consecutive batches of the global order (sec. 5.1: ~25,000
target tokens); rank r trains on batches [r*update_freq, (r+1)*update_freq) of it. Every rank knows
the whole step's sentence indices, so the step's true target-token count (what the loss is divided
by) and its FLOPs are known on every rank without communication. The stream state recorded with
each step is the resume point once that step is done, so prefetching never moves a checkpoint's
data position ahead of what was trained.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from nmtcli.data.batching import Batch, BatchStream
from nmtcli.model.config import PAD_ID
from nmtcli.training.flops import LengthStats


@dataclass
class StepBatches:
    batches: list[Batch]  # this rank's share, on the device
    first_index: int  # global index (within the step) of this rank's first batch
    target_tokens: int  # of the whole step, all ranks together
    lengths: LengthStats  # of the whole step, for the FLOP count
    stream_state: dict[str, int]  # the data position after this step


def pad_to_multiple(batch: Batch, multiple: int) -> Batch:
    """Round sequence lengths up to a multiple (tensor cores like multiples of 8; fewer distinct shapes).

    Extra padding changes no real position: source padding is masked, target padding comes after
    the real tokens under the causal mask, and the loss skips it.
    """
    def pad(t: torch.Tensor) -> torch.Tensor:
        extra = -t.size(1) % multiple
        return F.pad(t, (0, extra), value=PAD_ID) if extra else t

    return Batch(pad(batch.src), pad(batch.tgt_in), pad(batch.tgt_out), batch.target_tokens)


class StepLoader:
    def __init__(self, stream: BatchStream, update_freq: int, rank: int, world_size: int, device: torch.device,
                 prefetch: int = 2):
        self.stream = stream
        self.update_freq = update_freq
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.on_gpu = device.type == "cuda"
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name="nmt-batches", daemon=True)
        self._thread.start()

    def _read_step(self) -> tuple[list[Batch], int, LengthStats, dict[str, int]]:
        s = self.stream
        step = [s.next_indices() for _ in range(self.world_size * self.update_freq)]
        first = self.rank * self.update_freq
        mine = step[first : first + self.update_freq]
        every = np.concatenate(step)
        lengths = LengthStats.of(s.data.src.lengths[every], s.data.tgt.lengths[every])
        tokens = sum(s.target_tokens(indices) for indices in step)
        batches = []
        for indices in mine:
            b = s.data.batch(indices)
            if self.on_gpu:
                b = pad_to_multiple(b, 8)
                b = Batch(b.src.pin_memory(), b.tgt_in.pin_memory(), b.tgt_out.pin_memory(), b.target_tokens)
            batches.append(b)
        return batches, tokens, lengths, s.state_dict()

    def _produce(self) -> None:
        while not self._stop.is_set():
            try:
                item: Any = self._read_step()
            except BaseException as e:  # handed to the training thread, which raises it
                item = e
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def __next__(self) -> StepBatches:
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        batches, tokens, lengths, state = item
        on_device = [b.to(self.device) for b in batches]  # non_blocking from pinned memory on a GPU
        return StepBatches(on_device, self.rank * self.update_freq, tokens, lengths, state)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
