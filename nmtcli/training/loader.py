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
from collections.abc import Callable
from dataclasses import dataclass, replace
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


def multiple_of_8(length: int) -> int:
    """Tensor cores like multiples of 8 (and it makes fewer distinct shapes)."""
    return length + (-length % 8)


def pad_lengths(batch: Batch, padded: Callable[[int], int], pad_id: int = PAD_ID) -> Batch:
    """Pad the sequences of a batch to `padded(length)` tokens.

    Extra padding changes no real position: source padding is masked, target padding comes after
    the real tokens under the causal mask, and the loss skips it.
    """
    def pad(t: torch.Tensor) -> torch.Tensor:
        extra = padded(t.size(1)) - t.size(1)
        return F.pad(t, (0, extra), value=pad_id) if extra else t

    return Batch(pad(batch.src), pad(batch.tgt_in), pad(batch.tgt_out), batch.target_tokens)


class StepLoader:
    """`next(loader)`: the next step's batches on the device.

    On a GPU the batches are pinned by the background thread, and the copy of the next step to the
    device starts on a side stream as soon as the current step is handed out, so it overlaps the
    current step's work instead of waiting in front of the next one.

    A stream of shape classes (`BatchStream(classes=True)`, the trainer's default on a GPU) has every
    batch padded to its class, rows and lengths. Otherwise `pad_length` maps a sequence length to the
    padded length the batches take (default: unchanged on a CPU, multiples of 8 on a GPU).
    """

    def __init__(self, stream: BatchStream, update_freq: int, rank: int, world_size: int, device: torch.device,
                 prefetch: int = 2, pad_length: Callable[[int], int] | None = None):
        self.stream = stream
        self.update_freq = update_freq
        self.rank = rank
        self.world_size = world_size
        self.device = device
        self.on_gpu = device.type == "cuda"
        self.pad_length = pad_length or (multiple_of_8 if self.on_gpu else None)
        self._copy_stream = torch.cuda.Stream(device) if self.on_gpu else None
        self._ahead: tuple[StepBatches, Any] | BaseException | None = None  # a step whose copy to the GPU has started
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
            b = s.data.batch(indices, s.shape(indices))
            if self.pad_length is not None and not s.classes:
                b = pad_lengths(b, self.pad_length, s.data.special_ids[0])
            if self.on_gpu:
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

    def _take(self, wait: bool = True) -> StepBatches | None:
        try:
            item = self._queue.get(block=wait)
        except queue.Empty:
            return None
        if isinstance(item, BaseException):
            raise item
        batches, tokens, lengths, state = item
        return StepBatches(batches, self.rank * self.update_freq, tokens, lengths, state)

    def _start_copy(self, step: StepBatches) -> tuple[StepBatches, Any]:
        """Copy a step's pinned batches to the GPU on the side stream; returns it with the copy's event."""
        with torch.cuda.stream(self._copy_stream):
            on_device = [b.to(self.device) for b in step.batches]  # non_blocking from pinned memory
            done = torch.cuda.Event()
            done.record(self._copy_stream)
        return replace(step, batches=on_device), done

    def __next__(self) -> StepBatches:
        if not self.on_gpu:
            step = self._take()
            return replace(step, batches=[b.to(self.device) for b in step.batches])
        ahead, self._ahead = self._ahead, None
        if isinstance(ahead, BaseException):
            raise ahead
        step, done = ahead if ahead is not None else self._start_copy(self._take())
        compute = torch.cuda.current_stream(self.device)
        compute.wait_event(done)
        for b in step.batches:
            for t in (b.src, b.tgt_in, b.tgt_out):
                t.record_stream(compute)  # allocated on the side stream, used and freed on this one
        try:
            ahead = self._take(wait=False)  # the next step, if the thread has it: its copy overlaps this step
        except BaseException as e:  # noqa: BLE001 - raised when that step is asked for, not before
            self._ahead = e
        else:
            if ahead is not None:
                self._ahead = self._start_copy(ahead)
        return step

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
