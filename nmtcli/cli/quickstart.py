"""`nmt quickstart`: the whole pipeline on the bundled demo corpus, in about five minutes on a laptop CPU.

Each step runs the real command (the same function `nmt prepare`, `nmt train`, ... run) and shows its
command line first, so that every step can be re-run, changed and continued by hand.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import DATA_ROOT, MODELS_ROOT, RUNS_ROOT, console
from nmtcli.errors import NmtError

NAME = "quickstart"

CORPUS = "demo"
STEPS = 5
CHECKPOINTS = 5  # averaged, as for base (sec. 6.1)
# Pre-norm (tiny's own norm; given for any --preset) with a short warmup leaves the loss plateau of the first
# steps (the model predicting word frequencies only) within ~150 steps on this corpus; the paper's post-norm needs ~300.
NORM, WARMUP = "pre", 100
# Checkpoints are saved every 1/SAVES of the training time and the last CHECKPOINTS averaged: the
# last quarter of training, late enough that no early, untrained checkpoint pulls the average down.
SAVES = 20
# Without --max-steps the time budget decides when training stops; the step limit only has to be out of
# its way (and out of the way of a resumed, longer run).
MAX_STEPS = 1_000_000
# Seconds kept back from training for averaging (with the brevity penalty's calibration: the 500 valid sentences
# translated up to seven times, 14-22 s on one CPU thread), translating the 500 test sentences and the table.
RESERVE_S = 30.0
MIN_TRAIN_S = 15.0


def command(
    minutes: Annotated[Optional[float], typer.Option(help="Wall-clock budget for the whole run; training gets what preparing and scoring leave. Default: 5, or none with --max-steps.", min=0.5, show_default=False)] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Train for this many steps instead of the time left: the same model on any machine (with --minutes too, whichever comes first).", min=1)] = None,
    preset: Annotated[str, typer.Option(help="Model and recipe to train (tiny fits a CPU; base wants a GPU).")] = "tiny",
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    examples: Annotated[int, typer.Option(help="Held-out sentences shown next to their references.", min=0)] = 8,
    workdir: Annotated[Path, typer.Option("--dir", "-C", help="Workspace for data/, runs/ and models/ (created if missing).")] = Path("."),
) -> None:
    """Prepare the bundled demo corpus, train, average, translate and score: the whole pipeline in minutes.

    Runs [bold]nmt prepare demo[/bold], [bold]nmt train --preset tiny[/bold] for what is left of
    --minutes (or for --max-steps steps), [bold]nmt average[/bold] and [bold]nmt score[/bold], showing
    each command before it runs so you can re-run any step by hand, then shows held-out sentences with their reference
    translations and the model's. The demo corpus is 4,200 short UI strings (en->de), so expect
    a model that gets short, frequent phrases right ("Insert image" -> "Bild einfügen") and
    long sentences wrong: BLEU around 10-20 after five minutes on a laptop CPU.
    """
    from nmtcli.cli import average, prepare, score, train

    started = time.perf_counter()
    budget = None if minutes is None and max_steps is not None else (minutes or 5.0) * 60
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir, run_dir, model_dir = DATA_ROOT / CORPUS, RUNS_ROOT / f"{preset}-{CORPUS}", MODELS_ROOT / f"{preset}-{CORPUS}"
    with _inside(workdir):
        _step(1, "prepare the bundled demo corpus: clean, learn a BPE vocabulary, binarize",
              ["prepare", CORPUS, "-o", str(data_dir)])
        prepare.command(name=CORPUS, output=data_dir)

        train_s = None if budget is None else max(MIN_TRAIN_S, budget - (time.perf_counter() - started) - RESERVE_S)
        max_time = None if train_s is None else f"{round(train_s)}s"
        if max_steps is None:
            steps, save_every = MAX_STEPS, f"{max(1, round(train_s / SAVES))}s"
            what = f"for {_duration(train_s)}"
        else:  # checkpoints by steps: the same ones on any machine
            steps, save_every = max_steps, str(max(1, max_steps // SAVES))
            what = f"for {max_steps} steps" + ("" if max_time is None else f" (at most {_duration(train_s)})")
        _step(2, f"train the {preset} preset {what}, a checkpoint every {save_every}{'' if max_steps is None else ' steps'}",
              ["train", "--data", str(data_dir), "--preset", preset, "--norm", NORM, "--warmup", str(WARMUP), "-o", str(run_dir),
               *(["--max-time", max_time] if max_time is not None else []), "--max-steps", str(steps), "--save-every", save_every,
               "--device", device, "--restart"])
        train.command(data=data_dir, preset=preset, norm=NORM, warmup=WARMUP, output=run_dir, max_time=max_time,
                      max_steps=steps, save_every=save_every, device=device, restart=True)

        _step(3, f"average the last {CHECKPOINTS} checkpoints into a model dir (sec. 6.1), its length calibrated on the valid split",
              ["average", str(run_dir), "--last", str(CHECKPOINTS), "-o", str(model_dir), "--device", device])
        average.command(paths=[run_dir], last=CHECKPOINTS, output=model_dir, device=device)

        _step(4, "translate the 500 held-out test sentences and score them (sacreBLEU)",
              ["score", "-m", str(model_dir), "--device", device])
        score.command(model=str(model_dir), device=device)

        _step(5, "a few of them side by side", ["translate", "-m", str(model_dir), "-i", str(data_dir / "test.en")])
        _show_examples(data_dir, model_dir, device, examples)
    console.print(f"\n[bold]done in {_duration(time.perf_counter() - started)}.[/bold] Translate your own text:")
    console.print(f"  echo 'Insert image' | {_command_line(['translate', '-m', str(workdir / model_dir)])}")
    longer = "--max-time" if max_steps is None else "--max-steps"
    console.print(f"Train longer by re-running step 2 without --restart and with a larger {longer} (it resumes);"
                  " `nmt prepare --list` shows the real corpora.")


def _step(number: int, what: str, args: list[str]) -> None:
    console.print()
    console.rule(f"[bold]{number}/{STEPS}[/bold] {what}", align="left")
    console.print(f"[bold cyan]$ {_command_line(args)}[/bold cyan]", highlight=False, soft_wrap=True)  # one line to copy


def _command_line(args: list[str]) -> str:
    return "nmt " + " ".join(shlex.quote(a) for a in args)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def _show_examples(data_dir: Path, model_dir: Path, device: str, count: int) -> None:
    """Spread `count` test sentences over the split and show source, reference and translation."""
    from rich.table import Table

    from nmtcli.data.prepare import read_manifest, reference_lines
    from nmtcli.device import resolve_device
    from nmtcli.inference.translator import Translator

    if count == 0:
        return
    manifest = read_manifest(data_dir)
    sources = reference_lines(data_dir, "test", manifest["source_lang"])
    references = reference_lines(data_dir, "test", manifest["target_lang"])
    picked = sorted({round(i * (len(sources) - 1) / max(count - 1, 1)) for i in range(count)})
    translations = list(Translator(model_dir, resolve_device(device)).translate(sources[i] for i in picked))
    table = Table(title=f"held-out {manifest['source_lang']}->{manifest['target_lang']} sentences", show_lines=True)
    for column in ("source", "reference", "nmt"):
        table.add_column(column, overflow="fold")
    for i, translation in zip(picked, translations):
        table.add_row(sources[i], references[i], translation)
    console.print(table)


@contextlib.contextmanager
def _inside(path: Path):
    """Run inside the workspace (the commands resolve data/, runs/ and models/ from the current dir)."""
    previous = Path.cwd()
    try:
        os.chdir(path)
    except OSError as e:
        raise NmtError(f"cannot enter --dir {path}: {e.strerror}", "pass a directory you can write to") from None
    try:
        yield
    finally:
        os.chdir(previous)
