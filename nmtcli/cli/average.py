"""`nmt average`: average the last checkpoints of a run into a model dir (sec. 6.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import MODELS_ROOT, announce, default_run_dir, say

NAME = "average"
DEFAULT_LAST = 5  # sec. 6.1: the base models average the last 5 checkpoints (big: 20)


def command(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="A run dir (its last --last checkpoints are averaged) or checkpoint dirs. Default: the newest run under runs/.", show_default=False)] = None,
    last: Annotated[int, typer.Option(help="How many of the run's newest checkpoints to average (sec. 6.1: 5 for base, 20 for big).", min=1)] = DEFAULT_LAST,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Model dir to write. Default: models/RUN.")] = None,
) -> None:
    """Average checkpoints element-wise into a self-contained model dir.

    The model dir holds config.json, model.safetensors, sentencepiece.model and a README.md model card:
    everything `nmt translate -m DIR` needs. Averaging one checkpoint exports it.
    """
    from nmtcli.training.average import average_checkpoints, last_checkpoints

    paths = paths or [default_run_dir()]
    if len(paths) == 1 and (paths[0] / "checkpoints").is_dir():
        run_dir = paths[0]
        checkpoints = last_checkpoints(run_dir, last)
        if len(checkpoints) < last:
            say(f"{run_dir} has only {len(checkpoints)} checkpoint(s); averaging those")
    else:
        checkpoints = paths
        run_dir = checkpoints[-1].resolve().parent.parent
    out = output or MODELS_ROOT / run_dir.name
    say(f"averaging {len(checkpoints)} checkpoint(s): {', '.join(c.name for c in checkpoints)}")
    announce("model", out)
    average_checkpoints(checkpoints, out)
    say(f"done; next: nmt translate -m {out} < input.txt")
