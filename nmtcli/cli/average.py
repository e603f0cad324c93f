"""`nmt average`: average the last checkpoints of a run (or those up to its best validation) into a model dir (sec. 6.1)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import MODELS_ROOT, announce, default_run_dir, say

NAME = "average"


def command(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="A run dir (--last of its checkpoints are averaged, as --at says) or checkpoint dirs. Default: the newest run under runs/.", show_default=False)] = None,
    last: Annotated[Optional[int], typer.Option(help="How many of the run's checkpoints to average (sec. 6.1: 5 for base, 20 for big). Default: 5; for a fine-tuning run (`nmt train --init`) 1, its best checkpoint alone.", min=1, show_default=False)] = None,
    at: Annotated[str, typer.Option(help="Which checkpoints of a run: the newest (last), those up to its best validation (best), or auto: best for a run that validated BLEU (tiny and small, which stop early on it), else last.")] = "auto",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Model dir to write. Default: models/RUN.")] = None,
) -> None:
    """Average checkpoints element-wise into a self-contained model dir.

    The model dir holds config.json, model.safetensors, sentencepiece.model and a README.md model card:
    everything `nmt translate -m DIR` needs. Averaging one checkpoint exports it. A run that validated
    BLEU (tiny and small, which stop early on it) is averaged over the checkpoints up to its best
    validation, which `nmt train` keeps; other runs over their newest, as the paper's. A fine-tuning
    run gives its best checkpoint alone: averaging in the less adapted ones before it undoes part of
    the adaptation.
    """
    from nmtcli.errors import NmtError
    from nmtcli.training.average import AT, average_checkpoints, checkpoints_to_average, default_last

    if at not in AT:
        raise NmtError(f"unknown --at {at!r}", "choose auto, best or last", exit_code=2)

    paths = paths or [default_run_dir()]
    if len(paths) == 1 and (paths[0] / "checkpoints").is_dir():
        run_dir = paths[0]
        last = last or default_last(run_dir)
        checkpoints, where = checkpoints_to_average(run_dir, last, at)
        if len(checkpoints) < last:
            say(f"{run_dir} has only {len(checkpoints)} checkpoint(s) to average; averaging those")
        where = f", {where}"
    else:
        checkpoints, where = paths, ""
        run_dir = checkpoints[-1].resolve().parent.parent
    out = output or MODELS_ROOT / run_dir.name
    say(f"averaging {len(checkpoints)} checkpoint(s){where}: {', '.join(c.name for c in checkpoints)}")
    announce("model", out)
    average_checkpoints(checkpoints, out)
    say(f"done; next: nmt translate -m {out} < input.txt")
