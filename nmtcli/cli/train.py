"""`nmt train`: train a Transformer on a prepared data dir; resumes an existing run dir."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import RUNS_ROOT, announce, console, default_data_dir, say

NAME = "train"


def command(
    data: Annotated[Optional[Path], typer.Option(help="Prepared data dir. Default: the newest under data/.")] = None,
    preset: Annotated[str, typer.Option(help="Model and recipe: tiny (CPU demo), base or big (Table 3).")] = "base",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Run dir. Default: runs/PRESET-DATA.")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Optimizer steps (base 100k, big 300k, tiny 1000).")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Padded tokens per batch on the longer side (base/big 25,000, tiny 2,048).")] = None,
    update_freq: Annotated[Optional[int], typer.Option(help="Batches accumulated into one step (effective batch = this x --max-tokens).")] = None,
    warmup: Annotated[Optional[int], typer.Option(help="Warmup steps of the learning-rate schedule (4,000; tiny 200).")] = None,
    lr_scale: Annotated[Optional[float], typer.Option(help="Multiplies the learning-rate schedule (1.0 is the paper's).")] = None,
    save_every: Annotated[Optional[int], typer.Option(help="Steps between checkpoints.")] = None,
    keep_last: Annotated[Optional[int], typer.Option(help="Checkpoints kept (base 5, big 20: what averaging uses).")] = None,
    valid_every: Annotated[Optional[int], typer.Option(help="Steps between validation-perplexity runs.")] = None,
    log_every: Annotated[Optional[int], typer.Option(help="Steps between log lines.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed for weights, data order and dropout.")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    restart: Annotated[bool, typer.Option("--restart", help="Delete an existing run dir and start over instead of resuming.")] = False,
) -> None:
    """Train with the paper's recipe: Adam (0.9, 0.98, 1e-9), warmup then 1/sqrt(step), label smoothing 0.1.

    Checkpoints go to RUN_DIR/checkpoints/STEP/ every --save-every steps (the last --keep-last kept).
    Running the same command again resumes from the newest checkpoint exactly where it stopped.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from nmtcli.data.prepare import read_manifest
    from nmtcli.training.trainer import Trainer, train_settings_for

    data_dir = data or default_data_dir()
    manifest = read_manifest(data_dir)
    run_dir = output or RUNS_ROOT / f"{preset}-{manifest['name']}"
    model_config, settings = train_settings_for(
        preset, max_steps=max_steps, max_tokens=max_tokens, update_freq=update_freq, warmup=warmup, lr_scale=lr_scale,
        save_every=save_every, keep_last=keep_last, valid_every=valid_every, log_every=log_every, seed=seed, device=device,
    )
    announce("run", run_dir)
    columns = (TextColumn("step"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console) as bars:
        task = bars.add_task("train", total=settings.max_steps, status="")

        def on_event(kind: str, v: dict) -> None:
            if kind == "start":
                where = f"resuming from {v['resumed_from']}" if v["resumed_from"] else "starting"
                say(f"{where}: {v['parameters']:,} parameters, {v['train_pairs']:,} training pairs, device {v['device']}")
                bars.update(task, completed=v["step"])
            elif kind == "step":
                bars.update(task, completed=v["step"], status=f"loss {v['loss']:.3f}")
            elif kind == "log":
                console.print(
                    f"step {v['step']:>7}  loss {v['loss']:.3f}  ppl {v['ppl']:8.2f}  lr {v['lr']:.2e}  "
                    f"{v['target_tokens_per_s']:,.0f} tgt tok/s  epoch {v['epoch']}"
                )
            elif kind == "valid" and "valid_ppl" in v:
                console.print(f"step {v['step']:>7}  valid nll {v['valid_nll']:.3f}  valid ppl {v['valid_ppl']:.2f}")
            elif kind == "checkpoint":
                console.print(f"[dim]checkpoint {v['path']}[/dim]")

        trainer = Trainer(run_dir, data_dir, model_config, settings, restart=restart, on_event=on_event)
        trainer.run()
    say(f"done; next: nmt average {run_dir}")
