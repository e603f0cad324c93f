"""How big a step is: batches of at most batch_tokens per rank, update_freq of them (sec. 5.1: ~25,000 target tokens)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmtcli.data.batching import ParallelData, make_batches
from nmtcli.errors import NmtError
from nmtcli.training.settings import TrainSettings


@dataclass(frozen=True)
class BatchChoice:
    """How a step is made: batches of at most `batch_tokens` (per rank), `update_freq` of them per rank."""

    batch_tokens: int
    update_freq: int
    mean_target_tokens: float | None = None  # of a batch, in the first epoch's order (when measured)
    lowered_from: int | None = None  # --batch-tokens, when one batch per rank was already more than a step
    unlowered_step_tokens: float | None = None  # what a step of one batch per rank would have held

    def describe(self, world_size: int, tokens_per_step: int | None) -> dict[str, Any]:
        """The step's make-up for the start event."""
        about = {"update_freq": self.update_freq, "world_size": world_size, "batch_tokens": self.batch_tokens,
                 "tokens_per_step": tokens_per_step}
        if self.mean_target_tokens:
            about["mean_batch_target_tokens"] = round(self.mean_target_tokens)
            about["expected_step_target_tokens"] = round(self.mean_target_tokens * self.update_freq * world_size)
        return about


def mean_batch_target_tokens(data: ParallelData, batch_tokens: int, seed: int, classes: bool = False) -> float:
    """The mean target tokens of a batch of at most `batch_tokens` tokens in the first epoch's order."""
    batches = make_batches(data.src.lengths, data.tgt.lengths, batch_tokens, seed, 1, classes)
    return sum(int(data.tgt.lengths[b].sum()) + len(b) for b in batches) / max(len(batches), 1)


def batches_per_epoch(data: ParallelData, batch_tokens: int, seed: int, classes: bool = False) -> int:
    """Batches of at most `batch_tokens` tokens in the first epoch (later epochs differ by a batch or two at most)."""
    return len(make_batches(data.src.lengths, data.tgt.lengths, batch_tokens, seed, 1, classes))


def choose_batch(data: ParallelData, batch_tokens: int, tokens_per_step: int, world_size: int, seed: int,
                 classes: bool = False) -> BatchChoice:
    """Batches per rank per step so that a step holds about `tokens_per_step` target tokens.

    Gradient accumulation can only add batches: when one batch on every rank already holds more than
    `tokens_per_step` (many GPUs, or a --batch-tokens above the step), the batches are made smaller
    instead, in proportion, so that one batch per rank makes the step the user asked for.
    """
    mean = mean_batch_target_tokens(data, batch_tokens, seed, classes)
    lowered_from = unlowered = None
    if world_size * mean > tokens_per_step:
        lowered_from, unlowered = batch_tokens, world_size * mean
        batch_tokens = max(1, int(batch_tokens * tokens_per_step / unlowered))
        mean = mean_batch_target_tokens(data, batch_tokens, seed, classes)
    update_freq = max(1, round(tokens_per_step / (world_size * max(mean, 1.0))))
    return BatchChoice(batch_tokens, update_freq, mean, lowered_from, unlowered)


def batch_for_run(settings: TrainSettings, world_size: int, data: ParallelData, previous: dict[str, Any],
                  run_dir: Path, classes: bool = False) -> BatchChoice:
    """The batch of a new run (`previous` empty) or of a resumed one (`previous`: its trainer state);
    `classes`: its batches are made of shape classes (data/batching.py)."""
    s, world = settings, world_size
    previous_batches_per_step = previous.get("batches_per_step")
    if previous_batches_per_step:
        # A resumed run keeps its global batch: the batches it was made of (their order depends on
        # their size) and how many make a step; with an automatic update_freq it may change GPU count.
        batch_tokens = int(previous.get("batch_tokens", previous.get("batch_max_tokens", s.batch_tokens)))  # batch_max_tokens: checkpoints of earlier versions
        if s.update_freq is None and previous_batches_per_step % world == 0:
            return BatchChoice(batch_tokens, previous_batches_per_step // world)
        if (s.update_freq or 0) * world != previous_batches_per_step:
            raise NmtError(
                f"{run_dir} was trained with {previous_batches_per_step} batches per step, "
                f"not {world} ranks x {s.update_freq} batches",
                "resume with a number of ranks (and --update-freq) that keeps ranks x update_freq the same",
            )
        return BatchChoice(batch_tokens, s.update_freq)
    if s.update_freq:
        return BatchChoice(s.batch_tokens, s.update_freq)
    assert s.tokens_per_step is not None
    return choose_batch(data, s.batch_tokens, s.tokens_per_step, world, s.seed, classes)
