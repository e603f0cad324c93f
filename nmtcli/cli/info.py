"""`nmt info`: what a model dir, a run dir, a Hub model or a preset is, as a table or as JSON."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nmtcli.cli.common import MODELS_ROOT, default_model_dir, progress_bar, say, warn
from nmtcli.errors import NmtError

NAME = "info"
# Hashing a file smaller than this takes a blink; larger ones (base and big weights) get a progress bar.
PROGRESS_MIN_BYTES = 32 << 20


def command(
    target: Annotated[Optional[str], typer.Argument(metavar="DIR|OWNER/NAME", help="A model dir, a run dir, or a Hub id OWNER/NAME. Default: $NMT_MODEL, else the newest model dir under models/ (as for `nmt translate`).", show_default=False)] = None,
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit when describing a Hub id.")] = None,
    preset: Annotated[Optional[str], typer.Option(help="Describe a preset (model and training recipe) instead: tiny, small, base, big, student-tiny or student-base.")] = None,
    vocab_size: Annotated[int, typer.Option(help="Vocabulary size assumed with --preset (sec. 5.1: 37,000).", min=1)] = 37000,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON: the dir's config.json plus `kind`, `parameters`, `files` (name: bytes), `sha256`, and per kind `scores`, `steps`, `checkpoints`, `validation`, `resume`, `average`, `hub`.")] = False,
) -> None:
    """Show what a model, a training run or a Hub model is: architecture, parameters, vocabulary, data, steps, BLEU, files.

    A [bold]model dir[/bold] (nmt average, nmt import): architecture, parameters, vocabulary, training data and
    steps, the scores in scores.json, and each file's size and sha256.
    A [bold]run dir[/bold] (nmt train): preset and settings, data, steps done of max steps, checkpoints (step, time,
    size), the latest and best validation, whether and how it resumes, and what `nmt average` would average.
    A [bold]Hub id[/bold] OWNER/NAME: the model as the Hub cache holds it (downloaded first if needed), each file
    checked against the Hub's own checksum (sha256 for LFS files such as the weights, the git blob id for
    the others); offline, against the ETags the cache recorded. A file that does not match makes the
    command exit with status 1, after the report.
    """
    from nmtcli import describe

    if preset is not None:
        if target is not None:
            raise NmtError("pass either a model, run dir or Hub id, or --preset", "e.g. `nmt info models/base` or `nmt info --preset big`", exit_code=2)
        _show(describe.describe_preset(preset, vocab_size), json_output)
        return
    if target is None:
        if revision is not None:
            raise NmtError("--revision needs a Hub id OWNER/NAME", "name the Hub model whose revision you want", exit_code=2)
        if os.environ.get("NMT_MODEL"):
            target = os.environ["NMT_MODEL"]
            say(f"using model {target} (from $NMT_MODEL)")
        else:
            target = str(default_model_dir("run `nmt average` first, or pass a model dir, a run dir or a Hub id"))
    with _hash_progress() as progress:
        report = _describe(target, revision, progress)
    _show(report, json_output)
    _check_hub(report)


def _describe(target: str, revision: str | None, progress) -> dict[str, Any]:
    from nmtcli import describe, hub

    if hub.looks_like_repo_id(target):
        say(f"describing {target}{'@' + revision if revision else ''} from the Hub")
        return describe.describe_hub_model(target, revision, progress)
    if revision is not None:
        raise NmtError(f"--revision needs a Hub id OWNER/NAME, and {target} is a path", "drop --revision", exit_code=2)
    path = Path(target)
    if describe.kind_of(path) == "model_dir":
        return describe.describe_model_dir(path, progress)
    report = describe.describe_run_dir(path, None, progress)
    if report["average"]["checkpoints"]:
        report["average"]["output"] = str(MODELS_ROOT / path.resolve().name)
        report["average"]["command"] = f"nmt average {shlex.quote(target)}"
    return report


@contextlib.contextmanager
def _hash_progress() -> Iterator:
    """A progress callback for checksums that opens a bar (on stderr) only once a large file comes."""
    with contextlib.ExitStack() as stack:
        bars = []

        def progress(name: str, done: int, total: int) -> None:
            if total < PROGRESS_MIN_BYTES:
                return
            if not bars:
                bars.append(stack.enter_context(progress_bar()))
            bars[0](f"sha256 {name} (MiB)", done >> 20, total >> 20)

        yield progress


def _check_hub(report: dict[str, Any]) -> None:
    checked = report.get("hub")
    if not checked:
        return
    if checked["source"] != "hub":
        warn(f"compared with the ETags the Hub cache recorded at download time, not with the Hub ({checked.get('note')})")
    bad = {name: r for name, r in checked["files"].items() if r["match"] is False}
    if bad:
        where = f"{checked['repo_id']}@{checked['commit'][:12]}"
        detail = "; ".join(f"{name}: {r.get('problem') or _differs(r)}" for name, r in bad.items())
        blobs = " ".join(shlex.quote(r["blob"]) for r in bad.values())
        raise NmtError(f"{len(bad)} file(s) in the Hub cache do not match {where} ({detail})",
                       f"delete {blobs} and run `nmt pull {checked['repo_id']}` to download them again")


def _differs(result: dict[str, Any]) -> str:
    kind, expected = result["expected"].split(":")
    return f"{kind} {result['actual'].split(':')[1][:12]}..., the Hub lists {expected[:12]}..."


# --- printing ------------------------------------------------------------------------------------


def _show(report: dict[str, Any], json_output: bool) -> None:
    if json_output:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    from rich.console import Console

    console = Console(highlight=False)
    title = {"preset": f"preset {report.get('preset')}", "run_dir": f"{report.get('run_dir')} (run dir)",
             "hub_model": f"{report.get('hub', {}).get('repo_id')} (Hub model, cached in {report.get('model_dir')})"}
    console.print(f"[bold]{title.get(report['kind'], report.get('model_dir'))}[/bold]")
    console.print(_overview(report))
    if report.get("checkpoints"):
        console.print(_checkpoints(report))
    if report.get("files"):
        console.print(_files(report))


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:,} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    raise AssertionError


def _overview(report: dict[str, Any]):
    from rich.table import Table

    from nmtcli.model.config import ModelConfig

    config = ModelConfig.from_dict(report["model"])
    table = Table(show_header=False, box=None)
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    row = table.add_row
    row("parameters", f"{report['parameters']:,}")
    row("architecture", f"{config.depth} layers, d_model {config.d_model}, d_ff {config.d_ff}, "
        f"{config.heads} heads, {config.norm}-norm, {config.activation}, dropout {config.dropout}")
    pieces = f"; sentencepiece model of {report['sentencepiece_pieces']:,} pieces" if "sentencepiece_pieces" in report else ""
    row("vocabulary", f"{config.vocab_size:,} (shared source/target/output){pieces}")
    variants = [f"{config.positions} positions"] if config.positions != "interleaved" else []
    variants += ["final logits bias"] if config.final_logits_bias else []
    variants += ["unscaled embeddings"] if not config.scale_embedding else []
    variants += [f"positions from {config.position_offset}"] if config.position_offset else []
    variants += ["target language tags"] if config.language_tags else []
    if variants:
        row("variants", ", ".join(variants))
    tags = (report.get("tokenizer") or {}).get("languages")
    if tags:  # a multilingual model: any of its languages into any other (--source-lang, --target-lang)
        row("languages", f"{len(tags)}, any direction (--target-lang, --source-lang): {' '.join(tags)}")
        if report.get("directions"):  # trained by nmt: the directions it saw, and those it never did
            row("directions", f"trained: {', '.join(report['directions']['trained'])}; zero-shot (never trained, expect less): "
                + (", ".join(report["directions"]["zero_shot"]) or "none"))
    elif "languages" in report:
        row("languages", f"{report['languages']['source']} -> {report['languages']['target']}")
    if report.get("license"):
        noncommercial = " (non-commercial use only)" if "-nc" in str(report["license"]).lower() else ""
        row("license", f"{report['license']}{noncommercial}")
    origin = report.get("imported_from")
    if origin:
        row("imported from", f"{origin.get('kind')} model {origin.get('source')}" + (f" at {origin['revision']}" if origin.get("revision") else ""))
    if report["kind"] == "run_dir":
        _run_rows(report, row)
    elif report["kind"] == "preset":
        _recipe_rows(report, row)
    else:
        training = report.get("training")
        if training:
            steps = ", ".join(str(s) for s in training.get("averaged_checkpoints") or [])
            if training.get("init"):
                _init_row(training["init"], row)
            row("training data", f"{training.get('data')} ({training.get('train_pairs', 0):,} pairs) from {training.get('data_dir')}")
            row("training", f"preset {training.get('preset')}, {training.get('steps')} steps (run {training.get('run')}); "
                f"averages the checkpoints of steps {steps}")
        search = report.get("search")
        if search:
            on = search.get("calibrated_on") or {}
            how = f"; calibrated on {on['lines']:,} validation lines: BP {on['bp'][0]:.3f} -> {on['bp'][1]:.3f}" if on.get("bp") else ""
            row("search", f"brevity penalty {search.get('brevity_penalty', 0):g}, length ratio {search.get('length_ratio', 1.0):.3f}{how}")
        if "shortlist" in report:
            row("shortlist", _shortlist_row(report["shortlist"]))
        for label, metrics in report.get("scores", {}).items():
            row(f"score {label}", ", ".join(f"{name} {v['score']:.2f}" for name, v in metrics.items()))
    checked = report.get("hub")
    if checked:
        verdict = {True: "every file matches", False: "[red]MISMATCH[/red]", None: "not every file could be checked"}[checked["match"]]
        against = "the Hub's listing" if checked["source"] == "hub" else "the ETags in the Hub cache"
        row("hub", f"{checked['repo_id']} at commit {checked['commit']}" + (f" ({checked['revision']})" if checked["revision"] else ""))
        row("hub check", f"{verdict} ({against})")
    return table


def _shortlist_row(info: dict[str, Any]) -> str:
    """`nmt shortlist`'s file: how it was learnt, and its check's BLEU and lines/s without and with it; or why
    `nmt translate` refuses it."""
    from rich.markup import escape

    if info.get("problem"):
        return f"[red]{escape(info['problem'])}[/red]: make it again with `nmt shortlist`, or delete it"
    text = f"{info.get('per_piece')} pieces a source piece + {info.get('frequent')} frequent, from {_count(info.get('learnt_from'))} pairs"
    if isinstance(info.get("directions"), list):  # a multilingual model's: its other directions search the whole vocabulary
        text += f" ({', '.join(map(str, info['directions']))} only)"
    bleu, pace = info.get("valid_bleu"), info.get("valid_lines_per_s")
    if all(isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v) for v in (bleu, pace)):
        (full, short), (slow, fast) = bleu, pace
        text += (f"; {info.get('valid_lines')} validation lines: BLEU {full:.2f} -> {short:.2f}, {slow:.1f} -> {fast:.1f} lines/s"
                 f" on {info.get('device')}")
    return escape(text)


def _count(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else str(value)


def _init_row(init: dict[str, Any], row) -> None:
    """`nmt train --init`: the model the weights started from."""
    revision = f" at {init['revision']}" if init.get("revision") else ""
    row("fine-tuned from", f"{init.get('model')}{revision} (weights sha256 {str(init.get('weights_sha256'))[:16]}...)")


def _recipe_rows(report: dict[str, Any], row) -> None:
    """A preset's training recipe: the batch, how long, the schedule, checkpoints and validation."""
    from nmtcli.training.schedule import inverse_sqrt_lr
    from nmtcli.training.settings import TrainSettings, step_floor

    r = report["recipe"]
    if r["update_freq"]:
        row("batch", f"batches of <= {r['batch_tokens']:,} tokens per GPU, {r['update_freq']} per step")
    else:
        row("batch", f"~{r['tokens_per_step']:,} target tokens per step (batches of <= {r['batch_tokens']:,} tokens per GPU, accumulated)")
    if r["epochs"] and not r["max_steps"]:
        row("steps", f"{r['epochs']} epochs of the training data (at least {step_floor(TrainSettings(**r)):,} steps); early stop after "
            f"{r['patience']} validations without a better BLEU on the first {r['valid_bleu']} valid lines")
    else:
        row("steps", f"{r['max_steps']:,}")
    peak = inverse_sqrt_lr(r["warmup"], report["model"]["d_model"], r["warmup"], r["lr_scale"])
    row("schedule", f"Adam, warmup {r['warmup']:,} steps to a peak lr of {peak:.2e}, then 1/sqrt(step); label smoothing {r['label_smoothing']}")
    save_steps, save_minutes = TrainSettings(**r).save_interval()
    every = f"{save_minutes:g} minutes" if save_minutes else f"{save_steps:,} steps"
    kept = f"the last {r['keep_last']} and the {r['keep_last']} up to the best BLEU validation kept" if r["valid_bleu"] else f"the last {r['keep_last']} kept"
    row("checkpoints", f"every {every}, {kept}; validation every {r['valid_every']:,} steps")


def _run_rows(report: dict[str, Any], row) -> None:
    training, data, steps = report.get("training", {}), report.get("data", {}), report["steps"]
    row("preset", f"{training.get('preset')}; settings in {report['run_dir']}/config.json")
    if report.get("init"):
        _init_row(report["init"], row)
    row("training data", f"{data.get('name')} ({data.get('train_pairs', 0):,} pairs) from {data.get('dir')}")
    status = {"finished": "finished", "early_stopped": "stopped early (patience)", "unfinished": "unfinished (interrupted, or still running)",
              "not_started": "no checkpoint yet"}[report["status"]]
    logged = f"; the log reaches step {steps['logged']}" if steps["logged"] > steps["done"] else ""
    if steps["max"] is not None and steps["done"] > steps["max"]:  # config.json keeps the max_steps of the first start
        row("steps", f"{steps['done']:,} done; started with max_steps {steps['max']:,} and resumed with more{logged}")
    else:
        row("steps", f"{steps['done']:,} of {steps['max']:,} done, {status}{logged}")
    if report["validation"]:
        row("validation", _validation(report["validation"]))
    best = report.get("best")
    if best and "metric" in best:
        row("best", f"step {best['step']}: {best['metric']} {best['value']:.4g} ({best['path']})")
    resume = report["resume"]
    if resume["possible"]:
        row("resume", f"from step {resume['from_step']:,}: {resume['command']}" + (f" ({resume['note']})" if resume.get("note") else ""))
    else:
        row("resume", f"no: {resume['reason']}")
    average = report["average"]
    if average["checkpoints"]:
        row("average", f"{average['command']} averages steps {', '.join(map(str, average['checkpoints']))} "
            f"({average['which']}) into {average['output']}")
    else:
        row("average", "nothing to average yet")


def _validation(v: dict[str, Any]) -> str:
    parts = [f"valid ppl {v['valid_ppl']:.2f}" if "valid_ppl" in v else "", f"valid BLEU {v['valid_bleu']:.2f}" if "valid_bleu" in v else ""]
    return f"step {v['step']}: " + ", ".join(p for p in parts if p)


def _checkpoints(report: dict[str, Any]):
    from rich import box
    from rich.table import Table

    table = Table(title="checkpoints", title_justify="left", box=box.SIMPLE_HEAD)
    for name in ("step", "written", "size"):
        table.add_column(name, justify="right" if name != "written" else "left")
    for c in report["checkpoints"]:
        table.add_row(f"{c['step']:,}", c["written"].replace("T", " "), _size(c["size"]))
    return table


def _files(report: dict[str, Any]):
    from rich import box
    from rich.table import Table

    checked = (report.get("hub") or {}).get("files", {})
    table = Table(title="files", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("file", no_wrap=True)
    table.add_column("size", justify="right", no_wrap=True)
    table.add_column("sha256", overflow="fold")
    if checked:
        table.add_column("Hub", overflow="fold")
    for name, size in report["files"].items():
        cells = [name, _size(size), report["sha256"][name]]
        if checked:
            r = checked.get(name, {})
            kind = "LFS sha256" if r.get("lfs") else "git blob id"
            cells.append({True: f"ok ({kind})", None: r.get("problem", "not checked"),
                          False: f"[red]DIFFERS[/red] ({r.get('problem') or 'the Hub lists ' + str(r.get('expected'))})"}[r.get("match")])
        table.add_row(*cells)
    return table
