"""Where training numbers go: `metrics.jsonl` always, TensorBoard event files where tensorboard is installed.

Only rank 0 writes. On resume, entries logged after the checkpoint are dropped (they will be logged
again), in both sinks, so the log reads like one uninterrupted run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from nmtcli.errors import file_system_error
from nmtcli.files import atomic_write_text

METRICS = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"


def truncate_metrics(run_dir: Path, step: int) -> None:
    """Keep the entries up to `step`; a line cut short by a crash is dropped too."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line).get("step", 0) <= step:
                kept.append(line)
        except ValueError:
            continue
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The entries of `metrics.jsonl` in order (validations are those with "valid_nll"); a line cut short is skipped."""
    path = Path(run_dir) / METRICS
    if not path.is_file():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("step"), int):
            entries.append(entry)
    return entries


class MetricsLog:
    def __init__(self, run_dir: Path, resume_step: int, enabled: bool = True):
        self.path = Path(run_dir) / METRICS
        self.enabled = enabled
        self.tensorboard = None
        if not enabled:
            return
        truncate_metrics(run_dir, resume_step)
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # tensorboard is optional
            return
        # purge_step hides events a previous attempt wrote after the checkpoint we resume from.
        self.tensorboard = SummaryWriter(str(Path(run_dir) / TENSORBOARD_DIR), purge_step=resume_step + 1 if resume_step else None)

    def write(self, kind: str, values: dict[str, Any]) -> None:
        """kind: "train" or "valid"; values must hold "step"."""
        if not self.enabled:
            return
        try:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(values) + "\n")
        except OSError as e:  # a line cut short is dropped on resume (truncate_metrics)
            error = file_system_error(e, self.path, intact="the same command resumes from the last checkpoint")
            if error is None:
                raise
            raise error from e
        if self.tensorboard is not None:
            for key, value in values.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.tensorboard.add_scalar(f"{kind}/{key}", value, values["step"])
            self.tensorboard.flush()

    def close(self) -> None:
        if self.tensorboard is not None:
            self.tensorboard.close()
