"""What every command shares: stderr messages, progress bars, and the workspace defaults.

Workspace defaults let the commands chain with no paths: `prepare` writes `data/<name>/`, `train`
reads the newest prepared data dir and writes `runs/<preset>-<data>/`, `average` reads the newest
run and writes `models/<run>/`, `translate` and `score` use `$NMT_MODEL` or the newest model.
Each choice is announced on stderr; when two candidates are equally new, the command stops and
lists them instead of guessing.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from nmtcli.errors import NmtError

console = Console(stderr=True, highlight=False)

DATA_ROOT, RUNS_ROOT, MODELS_ROOT = Path("data"), Path("runs"), Path("models")


def command_group(name: str, help: str):
    """A Typer sub-app for commands with subcommands, with the same conventions as the main app."""
    import typer

    return typer.Typer(name=name, no_args_is_help=True, rich_markup_mode="rich", help=help,
                       context_settings={"help_option_names": ["-h", "--help"]})


def say(message: str) -> None:
    """A status line on stderr (stdout stays for results that pipe into the next command); one line
    however long: a terminal wraps it, a log file gets it whole."""
    console.print(f"[dim]nmt:[/dim] {message}", soft_wrap=True)


def notice(message: str) -> None:
    """A one-line note that needs no action now (an old flag name that still works)."""
    console.print(f"[dim]nmt: note:[/dim] {message}", soft_wrap=True)


def warn(message: str) -> None:
    console.print(f"[yellow]nmt: warning:[/yellow] {message}", markup=True, soft_wrap=True)


@contextlib.contextmanager
def progress_bar(unit: str | None = None) -> Iterator[Callable[[str, int, int | None], None]]:
    """Yield progress(task, done, total): one bar per task name, on stderr; with `unit`, the pace in units/s."""
    pace = [TextColumn("{task.fields[pace]}")] if unit else []
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *pace,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    ) as bars:
        tasks: dict[str, int] = {}

        def update(task: str, done: int, total: int | None) -> None:
            if task not in tasks:
                tasks[task] = bars.add_task(task, total=total, pace="")
            bars.update(tasks[task], completed=done, total=total)
            if unit:
                speed = next(t.speed for t in bars.tasks if t.id == tasks[task])  # rich's estimate over the last updates
                bars.update(tasks[task], pace="" if speed is None else f"{speed:,.1f} {unit}/s")

        yield update


# --- workspace defaults --------------------------------------------------------------------------


def _newest(candidates: list[tuple[Path, float]], what: str, hint: str) -> Path:
    if not candidates:
        raise NmtError(f"no {what} found under {Path.cwd()}", hint)
    ranked = sorted(candidates, key=lambda c: c[1], reverse=True)
    if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
        tied = ", ".join(str(p) for p, t in ranked if t == ranked[0][1])
        raise NmtError(f"several {what}s are equally recent: {tied}", "name one explicitly")
    chosen = ranked[0][0]
    others = f" (newest of {len(ranked)}: {', '.join(str(p) for p, _ in ranked[1:4])}{' ...' if len(ranked) > 4 else ''})" if len(ranked) > 1 else ""
    say(f"using {what} {chosen}{others}")
    return chosen


def _stamped(root: Path, marker: str) -> list[tuple[Path, float]]:
    if not root.is_dir():
        return []
    # Hidden dirs are half-written ones (a model dir being staged beside its place): never a default.
    return [(d, (d / marker).stat().st_mtime) for d in sorted(root.iterdir()) if not d.name.startswith(".") and (d / marker).is_file()]


def default_data_dir() -> Path:
    return _newest(_stamped(DATA_ROOT, "manifest.json"), "data dir", "run `nmt prepare` first, or pass --data DIR")


def default_run_dir() -> Path:
    from nmtcli.training.rundir import checkpoint_dirs

    runs = []
    for run, _ in _stamped(RUNS_ROOT, "config.json"):
        checkpoints = checkpoint_dirs(run)
        if checkpoints:
            runs.append((run, checkpoints[-1].stat().st_mtime))
    return _newest(runs, "run dir", "run `nmt train` first, or pass a run dir or checkpoint dirs")


def default_model_dir(hint: str = "run `nmt average` first, or pass -m MODEL_DIR") -> Path:
    """$NMT_MODEL (a dir or a Hub id), else the newest model dir under models/; `hint` says what to do when there is none."""
    if os.environ.get("NMT_MODEL"):
        say(f"using model {os.environ['NMT_MODEL']} (from $NMT_MODEL)")
        return resolve_model(os.environ["NMT_MODEL"])
    return _newest(_stamped(MODELS_ROOT, "config.json"), "model", hint)


def resolve_model(spec: str | Path | None, revision: str | None = None) -> Path:
    """The model dir for `-m`: a local dir, a Hub id (OWNER/NAME, through the Hub cache), or the default."""
    if spec is None:
        if revision is not None:
            raise NmtError("--revision needs -m OWNER/NAME", "name the Hub model whose revision you want")
        return default_model_dir()
    from nmtcli import hub

    if hub.looks_like_repo_id(str(spec)):
        path = hub.resolve_model(str(spec), revision)
        say(f"using {spec}{'@' + revision if revision else ''} from the Hub cache ({path})")
        return path
    return Path(spec)


def announce(what: str, path: Path) -> None:
    say(f"writing {what} to {path}")
