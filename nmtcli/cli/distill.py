"""`nmt distill`: a small, fast student from any teacher (sequence-level knowledge distillation, Kim & Rush 2016).

The teacher translates the training sources (and any more source text), the pairs it is least sure of are dropped,
and a student learns from the rest: the recipe of Bergamot/Firefox Translations (browsermt/students), as one command.
Each stage is a real `nmt` command, shown before it runs (as `nmt quickstart` shows its own), so that any stage can be
run again or changed by hand. A stage that finished is recorded in OUT/stages.json and skipped when the command runs
again; one that was cut short resumes (translation by its chunks, training from its checkpoints).
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli import faults
from nmtcli.bulk import drop_other_attempt, parts_dir
from nmtcli.cli.common import console, say, warn
from nmtcli.errors import NmtError
from nmtcli.files import atomic_path

NAME = "distill"

STAGES = "stages.json"
ATTEMPTS = "attempts.json"  # each translating stage's last attempt: whether the chunks it left are of this one
STUDENT_DATA = "student-data.txt"  # the fingerprint of the data the student in OUT/run learns from
REPORT = "report.json"
TEACHER, STUDENT = "teacher", "student"


def command(
    model: Annotated[str, typer.Option("--model", "-m", help="The teacher: a model dir or Hub id (nmt's own, or from `nmt import marian|m2m100|nllb`).", show_default=False)],
    train: Annotated[str, typer.Option(help="Parallel training data PREFIX.SRC / PREFIX.TGT: the teacher translates its sources (--beam, --nbest), keeping of each line's n-best the translation closest to its reference (sentence chrF).", metavar="PREFIX", show_default=False)],
    valid: Annotated[str, typer.Option(help="Validation files PREFIX.SRC / PREFIX.TGT, real references: the student stops early on their BLEU.", metavar="PREFIX", show_default=False)],
    test: Annotated[str, typer.Option(help="Test files PREFIX.SRC / PREFIX.TGT: the report's teacher and student scores and speeds.", metavar="PREFIX", show_default=False)],
    mono: Annotated[Optional[list[Path]], typer.Option(help="More source-language text, one sentence a line: translated by the teacher (its best translation) and learnt from too. Repeatable.", show_default=False)] = None,
    source_lang: Annotated[Optional[str], typer.Option("--source-lang", "-s", help="Source language code (the file suffix). Default: the teacher's.", show_default=False)] = None,
    target_lang: Annotated[Optional[str], typer.Option("--target-lang", "-t", help="Target language code (the file suffix). Default: the teacher's.", show_default=False)] = None,
    preset: Annotated[str, typer.Option(help="The student's model and recipe (`nmt info --preset NAME`): student-tiny (6+2 layers, 256 wide; Bergamot's tiny11) or student-base (6+2, 512).")] = "student-tiny",
    beam: Annotated[int, typer.Option(help="The teacher's beam.", min=1)] = 8,
    nbest: Annotated[int, typer.Option(help="Translations of a training source the teacher offers; the closest to the reference is kept (1: the best).", min=1)] = 8,
    drop_worst: Annotated[float, typer.Option(help="Percent of the distilled pairs dropped: those of the lowest per-token log-probability under the teacher (Bergamot: 5); with --reverse-model, of the highest dual conditional cross-entropy.", min=0.0, max=99.0)] = 5.0,
    reverse_model: Annotated[Optional[str], typer.Option("--reverse-model", help="A TGT->SRC model (a model dir or Hub id) that scores each distilled pair turned round: the pairs are then ranked by dual conditional cross-entropy, |H_f - H_b| + (H_f + H_b) / 2 of the teacher's and its per-token cross-entropies (Junczys-Dowmunt 2018), instead of the teacher's alone.", metavar="MODEL", show_default=False)] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="The student's training steps at most (default: the preset's epochs, stopping early on validation BLEU).", min=1)] = None,
    max_time: Annotated[Optional[str], typer.Option(help="The student's training time at most, e.g. 30m or 2h.")] = None,
    warmup: Annotated[Optional[int], typer.Option(help="The student's warmup steps (default: the preset's, 4,000): fewer where a small corpus or --max-steps makes a short training, so that its learning rate peaks.", min=1, show_default=False)] = None,
    norm: Annotated[Optional[str], typer.Option(help="The student's LayerNorm: post (the presets', the paper's) or pre, which leaves the early plateau sooner in a short training on a small corpus; a new value starts the student again.", show_default=False)] = None,
    seed: Annotated[int, typer.Option(help="The student's seed (weights, data order, dropout): the same seed, the same student.")] = 1,
    shortlist: Annotated[bool, typer.Option("--shortlist/--no-shortlist", help="Learn the student's lexical shortlist from the kept pairs (`nmt shortlist`): its search then scores only the target pieces a sentence's source can translate to, the main speed-up of a student with a large vocabulary on a CPU.")] = True,
    export_ctranslate2: Annotated[bool, typer.Option("--export-ctranslate2", help="Also write OUT/ctranslate2, the student for CTranslate2 in int8 (needs the ctranslate2 extra).")] = False,
    chunk_lines: Annotated[int, typer.Option(help="Lines the teacher translates per resumable chunk.", min=1)] = 5_000,
    precision: Annotated[str, typer.Option(help="The teacher's number format for translating and scoring: auto (int8 on a CPU, bf16 on a GPU: the fastest at a cost of a translation here and there where candidates are close), fp32, int8, bf16, fp16.")] = "auto",
    gpus: Annotated[Optional[int], typer.Option(help="The teacher's translations on this many ranks of this node (torchrun; one a GPU, or CPU processes with --device cpu).", min=1)] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Work dir: the teacher's translations, the student's data, run and model, report.json. Default: distill/TEACHER-PRESET.", show_default=False)] = None,
) -> None:
    """Distill a teacher into a small, fast student: translate, filter, prepare, train, average, report.

    The teacher translates the training sources (beam 8, the n-best translation closest to each reference kept)
    and any --mono text; the worst --drop-worst percent of the pairs by the teacher's own per-token score go; the
    student (student-tiny: 6 encoder and 2 decoder layers, 256 wide) is trained on the rest with the teacher's
    vocabulary and stops early on validation BLEU against real references; its checkpoints are averaged. The
    report compares teacher and student on the test split: BLEU, chrF, lines/s on one CPU thread and on all
    (fp32 and int8, and int8 with the student's lexical shortlist), size on disk. Running the command again skips the stages done and resumes the one cut short.
    """
    from nmtcli.cli.train import parsed_flags, settings_from_flags

    # The student's flags checked as `nmt train` checks them, before the teacher translates for hours.
    settings_from_flags(preset, parsed_flags({"max_steps": max_steps, "max_time": max_time, "warmup": warmup, "seed": seed}), norm)
    teacher, languages, reverse, work = _inputs(model, train, valid, test, mono, source_lang, target_lang, reverse_model, preset, output)
    src, tgt = languages
    stages = Stages(work)
    on = ["--device", device, "--precision", _teacher_precision(precision, device)] + (["--gpus", str(gpus)] if gpus is not None else [])
    chunks = ["--chunk-lines", str(chunk_lines)]
    picked = ["--nbest", str(nbest), "--closest-to", f"{train}.{tgt}"] if nbest > 1 else []
    translated = work / "teacher" / f"train.{tgt}"
    stages.run("translate", f"the teacher translates the training sources (beam {beam}"
               + (f", of {nbest} translations the closest to the reference)" if nbest > 1 else ")"),
               ["translate", "-m", str(teacher), "-i", f"{train}.{src}", "-o", str(translated), "--beam", str(beam), *picked, *chunks, *on],
               [teacher, Path(f"{train}.{src}"), Path(f"{train}.{tgt}")], parts=parts_dir(translated))
    sources, targets = [Path(f"{train}.{src}")], [translated]
    for k, path in enumerate(mono or [], start=1):
        out = work / "teacher" / f"mono{k}.{tgt}"
        stages.run(f"translate-mono{k}", f"the teacher translates {path} (beam {beam}, its best)",
                   ["translate", "-m", str(teacher), "-i", str(path), "-o", str(out), "--beam", str(beam), *chunks, *on], [teacher, path],
                   parts=parts_dir(out))
        sources.append(path)
        targets.append(out)
    distilled = work / "distilled"
    stages.step("join", "the sources and the teacher's translations joined into one corpus",
                lambda: _join(sources, targets, distilled, languages), key=[str(p) for p in sources + targets])
    scores, reverse_scores = work / "teacher" / "scores.txt", work / "reverse" / "scores.txt"
    # Dual conditional cross-entropy takes pure cross-entropies: no brevity term in either (the teacher's alone keeps
    # the ranking distill has always had: its search score with the power length penalty, alpha 1).
    pure = ["--brevity-penalty", "0"] if reverse else []
    stages.run("score", "the teacher scores each distilled pair: its per-token log-probability (forced decoding)",
               ["translate", "--forced-decoding", "-m", str(teacher), "-i", f"{distilled}.{src}", "--target-file", f"{distilled}.{tgt}",
                "--length-penalty", "power", "--alpha", "1", *pure, "-o", str(scores), *chunks, *on], [teacher],
               parts=parts_dir(scores))
    if reverse:
        stages.run("score-reverse", f"the reverse model scores each distilled pair turned round ({tgt}->{src}, forced decoding)",
                   ["translate", "--forced-decoding", "-m", str(reverse), "-s", tgt, "-t", src, "-i", f"{distilled}.{tgt}", "--target-file",
                    f"{distilled}.{src}", "--length-penalty", "power", "--alpha", "1", *pure, "-o", str(reverse_scores), *chunks, *on],
                   [reverse], parts=parts_dir(reverse_scores))
    kept = work / "kept"
    by = "dual conditional cross-entropy (teacher and reverse model)" if reverse else "that score (the teacher is least sure of them)"
    stages.step("filter", f"the worst {drop_worst:g}% of the pairs by {by} dropped",
                lambda: _filter(distilled, scores, kept, languages, drop_worst, work / "dropped.jsonl", reverse_scores if reverse else None),
                key=[f"{drop_worst:g}", *([str(reverse), *stamps([reverse])] if reverse else [])])
    data, run, student = work / "data", work / "run", work / "model"
    stages.run("prepare", "the student's data: the kept pairs, the real validation and test splits, the teacher's vocabulary",
               ["prepare", "--train", str(kept), "--valid", valid, "--test", test, "-s", src, "-t", tgt, "--vocab-from", str(teacher),
                "--keep-misaligned", "-o", str(data)], [teacher, *(Path(f"{p}.{lang}") for p in (valid, test) for lang in languages)])
    limits = ((["--max-steps", str(max_steps)] if max_steps else []) + (["--max-time", max_time] if max_time else [])
              + (["--warmup", str(warmup)] if warmup else []) + (["--norm", norm] if norm else []))
    training = ["train", "--data", str(data), "--preset", preset, "-o", str(run), "--seed", str(seed), *limits, "--device", device]
    if not stages.is_done("train", training):
        _fresh_student(work, run, data, preset, seed, warmup, norm)
    length = f"for {max_steps:,} steps at most" if max_steps else "stopping early on validation BLEU"
    stages.run("train", f"the student ({preset}) learns from the kept pairs, {length}", training)
    stages.run("average", "the student's checkpoints averaged into a model dir (sec. 6.1)",
               ["average", str(run), "-o", str(student), "--device", device])
    if shortlist:
        stages.run("shortlist", "the student's lexical shortlist, learnt from the kept pairs (IBM Model 1), checked on the validation split",
                   ["shortlist", str(student), "--data", str(data), "--seed", str(seed), "--device", device])
    if export_ctranslate2:
        stages.run("export", "the student for CTranslate2, int8",
                   ["export", "ctranslate2", str(student), str(work / "ctranslate2"), "--quantization", "int8", "--force"])
    stages.step("report", "teacher and student on the test split: quality, speed, size",
                lambda: _report(work, teacher, student, test, languages, stages, device), key=stamps([teacher, Path(f"{test}.{src}"), Path(f"{test}.{tgt}")]))
    _show(json.loads((work / REPORT).read_text(encoding="utf-8")))


def _inputs(model: str, train: str, valid: str, test: str, mono: list[Path] | None, source_lang: str | None, target_lang: str | None,
            reverse_model: str | None, preset: str, output: Path | None) -> tuple[Path, tuple[str, str], Path | None, Path]:
    """The teacher, the languages, the reverse model (or None) and the work dir, every input checked before any stage runs."""
    from nmtcli.cli.common import resolve_model

    teacher = resolve_model(model)
    languages = _languages(teacher, source_lang, target_lang)
    src, tgt = languages
    for prefix, what in ((train, "--train"), (valid, "--valid"), (test, "--test")):
        _check_pair(prefix, languages, what)
    for path in mono or []:
        _check_text(path, "--mono")
    reverse = None
    if reverse_model is not None:
        from nmtcli.pair_scores import check_direction

        reverse = resolve_model(reverse_model)
        check_direction(reverse, tgt, src, "--reverse-model", warn=warn)
    work = output or Path("distill") / f"{teacher.name}-{preset}"
    if work.exists() and not work.is_dir():
        raise NmtError(f"-o {work} is a file", "give a dir for the teacher's translations, the student's data, run and model", exit_code=2)
    return teacher, languages, reverse, work


class Stages:
    """The stages done, with their wall time, in OUT/stages.json: a stage done is skipped when the command runs again."""

    def __init__(self, work: Path):
        self.work, self.path = work, work / STAGES
        self.number = 0
        try:
            self.done = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            self.done = {}
        except (ValueError, OSError):
            self.done = None
        if not isinstance(self.done, dict) or not all(isinstance(v, dict) and isinstance(v.get("seconds"), (int, float))
                                                      and isinstance(v.get("args"), list) for v in self.done.values()):
            raise NmtError(f"{self.path} is not the record of nmt distill's stages", f"delete it to run every stage of {work} again, "
                           "or give another -o")

    def run(self, name: str, what: str, args: list[str], reads: list[Path] = (), parts: Path | None = None) -> None:
        """A stage that is an `nmt` command: shown, then run as if typed (the same parsing, checks and messages).
        `reads`: the files it reads beside the earlier stages' output; changed, the stage runs again. `parts`: the
        chunks a translation leaves when cut short, dropped when the stage runs with other flags or input than the
        attempt that left them (the same attempt resumes from them)."""
        key = stamps(reads)

        def attempt() -> None:
            if parts is not None:
                drop_other_attempt(parts, self.work / ATTEMPTS, name, args + key)
            _nmt(args)

        self.step(name, what, attempt, args, key)

    def is_done(self, name: str, args: list[str]) -> bool:
        """Whether stage `name` was done with these very `args` (its command, and the stamps of what it read)."""
        done = self.done.get(name)
        return done is not None and done.get("args") == args

    def step(self, name: str, what: str, do, args: list[str] | None = None, key: list[str] | None = None) -> None:
        """Stage `name`: skipped if done with the same command `args` (a stage of no command: the same `key`); else
        run, and every stage after it done again too."""
        self.number += 1
        console.print()
        console.rule(f"[bold]{self.number}[/bold] {what}", align="left")
        if args is not None:
            console.print(f"[bold cyan]$ nmt {' '.join(shlex.quote(a) for a in args)}[/bold cyan]", highlight=False, soft_wrap=True)
        args = (args or []) + (key or [])
        if self.is_done(name, args):
            say(f"done already ({self.done[name]['seconds']:.0f} s); delete {self.path} to run every stage again")
            return
        names = list(self.done)
        if name in names:  # run again with other flags: what came after it was made from its old output
            self.done = {k: self.done[k] for k in names[:names.index(name)]}
        started = time.perf_counter()
        faults.point("distill-stage", stage=name)
        do()
        self.done[name] = {"seconds": round(time.perf_counter() - started, 1), "args": args}
        with atomic_path(self.path) as tmp:
            tmp.write_text(json.dumps(self.done, indent=2) + "\n", encoding="utf-8")


def _teacher_precision(precision: str, device: str) -> str:
    """--precision auto: int8 on a CPU, bf16 on a GPU (the teacher's translations are the bulk of the work)."""
    if precision != "auto":
        return precision
    import torch

    return "bf16" if device != "cpu" and torch.cuda.is_available() else "int8"


def _fresh_student(work: Path, run: Path, data: Path, preset: str, seed: int, warmup: int | None, norm: str | None) -> None:
    """Before the student's training: a run dir of other data (the prepared data's fingerprint), another preset, seed,
    warmup or norm is removed, so the training starts again; of the same, it resumes (a longer --max-steps continues it)."""
    fingerprint = json.loads((data / "manifest.json").read_text(encoding="utf-8")).get("fingerprint", "")
    marker = work / STUDENT_DATA
    learnt = marker.read_text(encoding="utf-8").strip() if marker.is_file() else None
    if run.exists() and (learnt != fingerprint or _other_student(run, preset, seed, warmup, norm)):
        say(f"{run} holds a student of other data, preset, seed, warmup or norm: it starts again")
        shutil.rmtree(run)
    with atomic_path(marker) as tmp:
        tmp.write_text(fingerprint + "\n", encoding="utf-8")


def _other_student(run: Path, preset: str, seed: int, warmup: int | None, norm: str | None) -> bool:
    """Whether the run dir holds a run of another preset, seed, warmup or norm (done, or cut short): resuming it would
    mix two students, so the training starts again. Its length (--max-steps, --max-time) may change: the run resumes."""
    from nmtcli.model.config import PRESETS
    from nmtcli.training.settings import TRAIN_PRESETS

    try:
        values = json.loads((run / "config.json").read_text(encoding="utf-8"))
        settings, model = values["training"], values["model"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    schedule = warmup if warmup else getattr(TRAIN_PRESETS.get(preset), "warmup", None)
    layer_norm = norm if norm else getattr(PRESETS.get(preset), "norm", None)
    return (settings.get("preset") != preset or settings.get("seed") != seed or settings.get("warmup") != schedule
            or model.get("norm") != layer_norm)


def stamps(paths) -> list[str]:
    """Each file's path, size and modification time (a model dir: its files'): what a stage read, to see it changed."""
    found = []
    for path in map(Path, paths):
        files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
        found += [f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files if p.exists()]
    return found


def _nmt(args: list[str]) -> None:
    """Run `nmt ARGS` in this process. sys.argv is the command's for the while: `--gpus` starts its ranks with it."""
    from nmtcli.cli.root import app

    saved = sys.argv
    sys.argv = ["nmt", *args]
    try:
        code = app(args=args, prog_name="nmt", standalone_mode=False)
    finally:
        sys.argv = saved
    if code == 130:  # Ctrl-C, which the command returned as its exit code: the stage is not done
        raise KeyboardInterrupt
    if isinstance(code, int) and code != 0:
        raise SystemExit(code)


def _languages(teacher: Path, source: str | None, target: str | None) -> tuple[str, str]:
    """The pair distilled: the teacher's own; -s/-t must agree with it (a multilingual teacher: they choose)."""
    from nmtcli.files import read_json

    config = read_json(teacher / "config.json", (f"{teacher} is not a model dir (no config.json)", "give the teacher's model dir or Hub id"),
                       "the teacher's model dir is damaged: write it again (nmt average, import or pull)")
    own = config.get("languages") or {}
    if own.get("source") and own.get("target"):
        for given, lang, flag in ((source, own["source"], "--source-lang"), (target, own["target"], "--target-lang")):
            if given is not None and given != lang:
                raise NmtError(f"{flag} {given} but the teacher {teacher} translates {own['source']}->{own['target']}",
                               "give data in the teacher's languages, or another teacher", exit_code=2)
        return own["source"], own["target"]
    if source is None or target is None:
        raise NmtError(f"the teacher {teacher} does not say its languages", "pass --source-lang and --target-lang", exit_code=2)
    return source, target


def _check_pair(prefix: str, languages: tuple[str, str], flag: str) -> None:
    counts = [_check_text(Path(f"{prefix}.{lang}"), flag) for lang in languages]
    if counts[0] != counts[1]:
        raise NmtError(f"{flag} {prefix}: {prefix}.{languages[0]} has {counts[0]:,} lines but {prefix}.{languages[1]} has {counts[1]:,}",
                       "give aligned files, one sentence a line", exit_code=2)


def _check_text(path: Path, flag: str) -> int:
    from nmtcli.errors import check_readable

    check_readable(path, f"check the path given to {flag} (PREFIX.LANG: the language codes are the teacher's or -s/-t)")
    with open(path, "rb") as f:
        lines = sum(1 for _ in f)
    if lines == 0:
        raise NmtError(f"{path} is empty", f"give {flag} text to distill from", exit_code=2)
    return lines


def _join(sources: list[Path], targets: list[Path], out: Path, languages: tuple[str, str]) -> None:
    """The distilled corpus OUT.SRC / OUT.TGT: each source file's lines beside the teacher's, in order."""
    for files, lang in ((sources, languages[0]), (targets, languages[1])):
        with atomic_path(Path(f"{out}.{lang}")) as tmp, open(tmp, "wb") as f:
            for path in files:
                with open(path, "rb") as part:
                    for line in part:
                        f.write(line if line.endswith(b"\n") else line + b"\n")


def _filter(distilled: Path, scores: Path, kept: Path, languages: tuple[str, str], percent: float, dropped_file: Path,
            reverse_scores: Path | None = None) -> None:
    """OUT/kept.SRC / .TGT: the pairs above the `percent` quantile of the teacher's per-token log-probability (with
    `reverse_scores`, below that of the dual conditional cross-entropy), the corpus streamed (data/score_filter.py: only
    the scores are held); OUT/dropped.jsonl: the ones dropped (score, source, translation), worst first."""
    from nmtcli.data.score_filter import costs, read_log_probs, split_pairs

    forward = read_log_probs(scores)
    reverse = read_log_probs(reverse_scores, len(forward)) if reverse_scores is not None else None
    cost = costs(forward, reverse)

    def record(i: int, source: str, target: str) -> dict:
        if reverse is None:
            return {"score": round(float(forward[i]), 4), "source": source, "translation": target}
        return {"cross_entropy": round(float(cost[i]), 4), "forward": round(-float(forward[i]), 4), "reverse": round(-float(reverse[i]), 4),
                "source": source, "translation": target}

    split = split_pairs(*(Path(f"{distilled}.{lang}") for lang in languages), cost, percent, tuple(Path(f"{kept}.{lang}") for lang in languages),
                        dropped_file, record)
    threshold = "" if split.threshold is None else (f"; per-token log-probability below {-split.threshold:.3f}" if reverse is None else
                                                    f"; dual conditional cross-entropy above {split.threshold:.3f}")
    say(f"kept {split.pairs - split.dropped:,} of {split.pairs:,} pairs, dropped {split.dropped:,}{threshold} ({dropped_file})")


def _report(work: Path, teacher: Path, student: Path, test: str, languages: tuple[str, str], stages: Stages, device: str) -> None:
    """OUT/report.json: each model's test BLEU and chrF, its lines/s and words/s, its size on disk; the stages."""
    from nmtcli.cli.distill_report import measure

    report = measure(teacher, student, Path(f"{test}.{languages[0]}"), Path(f"{test}.{languages[1]}"), device)
    report["stages"] = stages.done
    for name, path in (("translated", work / "distilled"), ("kept", work / "kept")):
        with open(f"{path}.{languages[0]}", "rb") as f:
            report[f"lines_{name}"] = sum(1 for _ in f)
    run = json.loads((work / "run" / "config.json").read_text(encoding="utf-8")) if (work / "run" / "config.json").exists() else {}
    report["student_preset"] = (run.get("training") or {}).get("preset")
    steps = [int(p.name) for p in (work / "run" / "checkpoints").glob("*") if p.name.isdigit()]
    report["student_steps"] = max(steps, default=None)
    with atomic_path(work / REPORT) as tmp:
        tmp.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")


def _show(report: dict) -> None:
    from rich.table import Table

    table = Table(title="teacher and student on the test split")
    for column in ("model", "precision", "BLEU", "chrF", "lines/s, 1 thread", "lines/s, all threads", "MB on disk"):
        table.add_column(column, justify="right" if column != "model" else "left")
    for row in report["models"]:
        table.add_row(row["model"], row["precision"] + (" + shortlist" if row.get("shortlist") else ""), f"{row['bleu']:.1f}", f"{row['chrf']:.1f}", f"{row['lines_per_s_1']:,.1f}",
                      f"{row['lines_per_s_all']:,.1f}", f"{row['mb']:.1f}")
    console.print(table)
    say(f"distilled {report['lines_translated']:,} pairs, kept {report['lines_kept']:,}, the student trained {report['student_steps'] or 0:,} steps; "
        + ", ".join(f"{name} {v['seconds']:.0f} s" for name, v in report["stages"].items()))
