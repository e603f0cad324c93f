"""`nmt train`: train a Transformer on a prepared data dir; resumes an existing run dir; runs under torchrun."""

from __future__ import annotations

import contextlib
import json
import math
import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from nmtcli.cli.common import RUNS_ROOT, announce, console, default_data_dir, say, warn
from nmtcli.errors import NmtError

if TYPE_CHECKING:
    from nmtcli.model.config import ModelConfig
    from nmtcli.training import distributed
    from nmtcli.training.finetune import InitModel
    from nmtcli.training.settings import TrainSettings

NAME = "train"

# Keys a --config file may set: the flags' names (with - or _), i.e. every training setting plus these.
RUN_KEYS = ("data", "output", "preset", "restart", "max_time", "norm", "init")


# A time is a number and a unit: "30s", "10m", "1.5h" (or the words: "10 minutes").
_TIME = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|seconds?|m|min|minutes?|h|hours?)")
_MINUTES_PER = {"s": 1 / 60, "m": 1.0, "h": 60.0}


def _minutes(text: str) -> float | None:
    """A time with its unit in minutes; None when `text` is not one."""
    m = _TIME.fullmatch(text)
    return float(m.group(1)) * _MINUTES_PER[m.group(2)[0]] if m else None


def parse_save_every(value: str | int | None) -> tuple[int | None, float | None]:
    """"1000" -> every 1000 steps; "10m" / "10min" -> every 10 minutes, "30s" every half minute. Returns (steps, minutes)."""
    if value is None:
        return None, None
    text = str(value).strip().lower()
    if m := re.fullmatch(r"(\d+)\s*(steps?)?", text):
        return int(m.group(1)), None
    if (minutes := _minutes(text)) is not None:
        return None, minutes
    raise NmtError(f"--save-every {value!r} is neither steps nor minutes", "write e.g. 1000 (steps), 10m (minutes) or 30s (seconds)", exit_code=2)


def parse_duration(value: str | float | None) -> float | None:
    """"90s", "5m", "1.5h" or a bare number of minutes -> minutes."""
    if value is None:
        return None
    text = str(value).strip().lower()
    minutes = float(text) if re.fullmatch(r"\d+(?:\.\d+)?", text) else _minutes(text)
    if minutes is not None and minutes > 0:
        return minutes
    raise NmtError(f"--max-time {value!r} is not a duration", "write e.g. 90s, 5m or 2h", exit_code=2)


def read_config_file(path: Path) -> dict[str, Any]:
    """A JSON or TOML file of flag values. A run dir's config.json works too: its "training" section is used."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise NmtError(f"cannot read --config {path}: {e.strerror}", "pass an existing JSON or TOML file", exit_code=2) from None
    try:
        if Path(path).suffix == ".toml":
            import tomllib

            values = tomllib.loads(text)
        else:
            values = json.loads(text)
    except ValueError as e:
        raise NmtError(f"--config {path} is not valid {'TOML' if Path(path).suffix == '.toml' else 'JSON'}: {e}", "fix the file") from None
    if not isinstance(values, dict):
        raise NmtError(f"--config {path} must hold a table of settings", 'e.g. {"max_steps": 1000}', exit_code=2)
    if values.get("format") == "nmt-run":  # a run dir's config.json: rerun that recipe
        norm = values.get("model", {}).get("norm")
        init = (values.get("init") or {}).get("model")
        values = {**values["training"], "preset": values["training"].get("preset")}
        if init is not None:  # started from a model: the same --init, whose config fixes the shape
            values["init"] = init
            if values["preset"] == "finetune":
                values.pop("preset")
        elif norm is not None:
            values["norm"] = norm
        for derived in ("resolved_update_freq", "world_size"):
            values.pop(derived, None)
        if values.get("epochs"):  # its max_steps came from the epochs and that run's data: counted again here
            values.pop("max_steps", None)
    from dataclasses import fields

    from nmtcli.training.settings import TrainSettings

    known = {f.name for f in fields(TrainSettings)} | set(RUN_KEYS)
    values = {k.replace("-", "_"): v for k, v in values.items()}
    unknown = sorted(set(values) - known)
    if unknown:
        raise NmtError(f"--config {path} has unknown settings: {', '.join(unknown)}", "use the names of `nmt train` flags", exit_code=2)
    return values


def command(
    data: Annotated[Optional[Path], typer.Option(help="Prepared data dir. Default: the newest under data/.")] = None,
    init: Annotated[Optional[str], typer.Option("--init", help="Start from this model's config and weights (a model dir or Hub id, nmt's own or from `nmt import marian|m2m100|nllb`): fine-tuning, or continued training. The data must be prepared with `nmt prepare --vocab-from MODEL`; the recipe is the fine-tuning one (docs/training.md).", metavar="MODEL")] = None,
    preset: Annotated[Optional[str], typer.Option(help="Model and recipe: tiny (a CPU, up to ~50k pairs), small (fairseq's IWSLT model: 100k-1M pairs, one GPU or a few CPU hours), base or big (Table 3: WMT-sized data, GPUs). Default: base.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Run dir. Default: runs/PRESET-DATA.")] = None,
    norm: Annotated[Optional[str], typer.Option(help="post: LayerNorm after each residual sum, the paper's (sec. 3.1); pre: before each sublayer, which leaves the early plateau sooner on small data and short runs. Default: post.")] = None,
    config: Annotated[Optional[Path], typer.Option("--config", help="JSON or TOML file of settings (flag names as keys; a run dir's config.json works). Flags override it.", rich_help_panel="Run")] = None,
    gpus: Annotated[Optional[int], typer.Option(help="Start this many ranks on this node through torchrun (one per GPU). For several nodes run torchrun yourself (docs/training.md).", rich_help_panel="Run")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Optimizer steps (base 100k, big 300k). tiny and small count --epochs instead; with --max-steps they run exactly that many steps, without BLEU validation or early stopping unless --valid-bleu / --patience ask for them.", rich_help_panel="Batches and schedule")] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Passes over the training data, when --max-steps is not given (tiny and small: 50, a ceiling: early stopping on validation BLEU is the real stop). At least twice --warmup steps.", min=1, rich_help_panel="Batches and schedule")] = None,
    max_time: Annotated[Optional[str], typer.Option(help="Also stop after this much training time, e.g. 90s, 5m, 2h (validates and saves a checkpoint first).", rich_help_panel="Batches and schedule")] = None,
    max_tokens: Annotated[Optional[int], typer.Option(help="Padded tokens per batch per GPU on the longer side (base/big 25,000, small 4,096, tiny 2,048). Lower it if a GPU runs out of memory.", rich_help_panel="Batches and schedule")] = None,
    tokens_per_step: Annotated[Optional[int], typer.Option(help="Target tokens per optimizer step over all GPUs (base/big 25,000: the paper's batch); gradient accumulation makes up what --max-tokens x GPUs does not.", rich_help_panel="Batches and schedule")] = None,
    update_freq: Annotated[Optional[int], typer.Option(help="Batches accumulated per GPU per step, set by hand (replaces --tokens-per-step; tiny: 1).", rich_help_panel="Batches and schedule")] = None,
    warmup: Annotated[Optional[int], typer.Option(help="Warmup steps of the learning-rate schedule (4,000; tiny 200).", rich_help_panel="Batches and schedule")] = None,
    lr_scale: Annotated[Optional[float], typer.Option(help="Multiplies the learning-rate schedule (1.0 is the paper's; small 0.716: fairseq's IWSLT peak of 5e-4).", rich_help_panel="Batches and schedule")] = None,
    lr: Annotated[Optional[float], typer.Option("--lr", help="Peak learning rate, reached at the end of warmup, then 1/sqrt(step) decay. Default: the paper's d_model^-0.5 x warmup^-0.5; with --init 1.4e-4 x 512 / d_model (d_model^-0.5 x 100000^-0.5 at d_model 512, as 1/d_model for other widths).", rich_help_panel="Batches and schedule")] = None,
    label_smoothing: Annotated[Optional[float], typer.Option(help="Label smoothing epsilon (0.1, sec. 5.4).", rich_help_panel="Batches and schedule")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed for weights, data order and dropout.", rich_help_panel="Batches and schedule")] = None,
    save_every: Annotated[Optional[str], typer.Option(help="Checkpoint every N steps (e.g. 1000) or a time (e.g. 10m or 30s; base/big: 10m as in the paper; tiny 50 and small 200 steps: five a validation, what `nmt average` takes).", rich_help_panel="Checkpoints and validation")] = None,
    keep_last: Annotated[Optional[int], typer.Option(help="Checkpoints kept (base 5, big 20: what averaging uses); the best one is kept apart.", rich_help_panel="Checkpoints and validation")] = None,
    valid_every: Annotated[Optional[int], typer.Option(help="Steps between validations (perplexity, and BLEU with --valid-bleu).", rich_help_panel="Checkpoints and validation")] = None,
    valid_bleu: Annotated[Optional[int], typer.Option(help="BLEU on the first N lines of the valid split at each validation, through beam search and sacreBLEU as `nmt score` (0: off, -1: all lines; tiny and small 500 when counting --epochs).", rich_help_panel="Checkpoints and validation")] = None,
    patience: Annotated[Optional[int], typer.Option(help="Stop after this many validations without a better BLEU (or perplexity) (0: never; tiny and small 5 when counting --epochs).", rich_help_panel="Checkpoints and validation")] = None,
    min_delta: Annotated[Optional[float], typer.Option(help="Early stopping's minimum improvement: a validation resets --patience only where it beats the one that last did by more than this many BLEU points (or lowers perplexity by more than this many percent). Default: 0.1, about one word in 500 valid lines.", min=0, rich_help_panel="Checkpoints and validation")] = None,
    log_every: Annotated[Optional[int], typer.Option(help="Steps between log lines.", rich_help_panel="Checkpoints and validation")] = None,
    device: Annotated[Optional[str], typer.Option(help="auto (each rank's GPU, else CPU), cpu, cuda or cuda:N.", rich_help_panel="Hardware")] = None,
    precision: Annotated[Optional[str], typer.Option(help="auto (bf16-master on a GPU that has bf16, bf16 with several GPUs or --compile, else fp32), fp32, bf16 (autocast: fp32 weights, bf16 products), bf16-master (bf16 weights trained with fp32 master weights in the optimizer: no cast per use), or fp16 (with a dynamic loss scaler).", rich_help_panel="Hardware")] = None,
    compile: Annotated[Optional[bool], typer.Option("--compile/--no-compile", help="torch.compile the model (pays on a GPU over long runs; the first steps are slow).", rich_help_panel="Hardware")] = None,
    shape_classes: Annotated[Optional[bool], typer.Option("--shape-classes/--no-shape-classes", help="Pad batches to a few shapes (15 lengths, rows filled to --max-tokens): a GPU plans each new shape once. Default: on a GPU, off on a CPU (padding costs a CPU in proportion). A resumed run keeps its own.", rich_help_panel="Hardware")] = None,
    cuda_graphs: Annotated[Optional[bool], typer.Option("--cuda-graphs/--no-cuda-graphs", help="Replay each step from CUDA graphs (one per batch shape, one for Adam) instead of launching its kernels one by one from Python. One GPU, batches in shape classes, and not fp16; a capture that fails warns once and training goes on without them. Default: on where measured to pay (one GPU, shape classes, --precision bf16-master, the default there, without --compile: +26% tokens/s for base on an H200), off elsewhere.", rich_help_panel="Hardware")] = None,
    peak_tflops: Annotated[Optional[float], typer.Option(help="The GPU's peak TFLOP/s at this precision, for MFU in the log where nmt does not know the GPU.", rich_help_panel="Hardware")] = None,
    restart: Annotated[bool, typer.Option("--restart", help="Delete an existing run dir and start over instead of resuming.", rich_help_panel="Run")] = False,
) -> None:
    """Train with the paper's recipe: Adam (0.9, 0.98, 1e-9), warmup then 1/sqrt(step), label smoothing 0.1.

    Checkpoints go to RUN_DIR/checkpoints/STEP/ (the last --keep-last kept, the best in checkpoints/best/).
    Running the same command again resumes from the newest checkpoint exactly where it stopped.
    Runs unchanged under torchrun (`torchrun --nproc-per-node N -m nmtcli train ...`); --gpus N starts it for you.
    """
    from nmtcli.training import distributed

    flags = {
        "data": data, "init": init, "preset": preset, "output": output, "norm": norm, "max_steps": max_steps, "epochs": epochs,
        "max_tokens": max_tokens, "tokens_per_step": tokens_per_step, "update_freq": update_freq, "warmup": warmup, "lr_scale": lr_scale,
        "lr": lr,
        "label_smoothing": label_smoothing, "seed": seed, "keep_last": keep_last, "valid_every": valid_every,
        "valid_bleu": valid_bleu, "patience": patience, "min_delta": min_delta, "log_every": log_every, "device": device,
        "precision": precision, "compile": compile, "shape_classes": shape_classes, "cuda_graphs": cuda_graphs,
        "peak_tflops": peak_tflops,
    }
    steps, minutes = parse_save_every(save_every)
    flags.update(save_every=steps, save_minutes=minutes, max_minutes=parse_duration(max_time))
    if max_steps is not None and epochs is not None:
        raise NmtError("--max-steps and --epochs both say how long to train", "pass one of them", exit_code=2)
    values = read_config_file(config) if config else {}
    if max_steps is not None or epochs is not None:  # the flag says how long, whatever the --config file said
        values.pop("epochs" if max_steps is not None else "max_steps", None)
    if "save_every" in values and "save_minutes" not in values:
        values["save_every"], values["save_minutes"] = parse_save_every(values["save_every"])
    if "max_time" in values:
        values["max_minutes"] = parse_duration(values.pop("max_time"))
    values.update({k: v for k, v in flags.items() if v is not None})
    restart = restart or bool(values.pop("restart", False))

    ranks = distributed.from_environment()
    if gpus is not None and not ranks.distributed:
        _launch(gpus, values, restart)
        return
    run_dir, data_dir, model_config, settings, init_model = _resolve(values)
    _train(run_dir, data_dir, model_config, settings, restart, ranks, init_model)


def _resolve(values: dict[str, Any]) -> tuple[Path, Path, ModelConfig, TrainSettings, InitModel | None]:
    """The run dir, data dir, model, training settings and --init model that the flags' `values` ask for."""
    from nmtcli.data.prepare import read_manifest

    if values.get("update_freq") is not None and values.get("tokens_per_step") is not None:  # flags or --config
        raise NmtError("--update-freq and --tokens-per-step both set the batches per step", "pass one of them", exit_code=2)
    data_dir = Path(values.pop("data")) if values.get("data") else default_data_dir()
    manifest = read_manifest(data_dir)
    if values.get("init"):
        return _resolve_init(values, data_dir, manifest)
    values.pop("init", None)
    preset = values.pop("preset", None) or "base"
    output = values.pop("output", None)
    run_dir = Path(output) if output else RUNS_ROOT / f"{preset}-{manifest['name']}"
    norm = values.pop("norm", None)
    model_config, settings = settings_from_flags(preset, values, norm)
    return run_dir, data_dir, model_config, settings, None


def _resolve_init(values: dict[str, Any], data_dir: Path, manifest: dict[str, Any]) -> tuple[Path, Path, ModelConfig, TrainSettings, InitModel]:
    """--init MODEL: the model's config, the fine-tuning recipe sized to the data, checked against the model and data."""
    from nmtcli import hub
    from nmtcli.model.config import PRESETS
    from nmtcli.training.finetune import check_data, finetune_settings, read_init

    spec = str(values.pop("init"))
    model_dir, origin = hub.locate_model(spec)
    init = read_init(model_dir, origin)
    check_data(init, manifest, data_dir)
    preset, norm, output = values.pop("preset", None), values.pop("norm", None), values.pop("output", None)
    if preset is not None and preset not in PRESETS:
        raise NmtError(f"unknown preset {preset!r}", f"choose one of {', '.join(PRESETS)}, or leave it out with --init")
    if norm is not None and norm != init.config.norm:
        raise NmtError(f"--norm {norm} contradicts --init {spec}, a {init.config.norm}-norm model", "leave out --norm: the model fixes it", exit_code=2)
    settings = finetune_settings(init, manifest, preset, values)
    _check_settings(settings)
    run_dir = Path(output) if output else RUNS_ROOT / f"{init.name}-{manifest['name']}"
    return run_dir, data_dir, init.config, settings, init


def settings_from_flags(preset: str, values: dict[str, Any], norm: str | None = None) -> tuple[ModelConfig, TrainSettings]:
    """The preset's model and recipe with the flags' `values` (None: the preset's) applied, each checked as its flag."""
    from nmtcli.model.config import PRESETS
    from nmtcli.training.settings import train_settings_for

    if preset not in PRESETS:
        raise NmtError(f"unknown preset {preset!r}", f"choose one of {', '.join(PRESETS)}")
    model_config, settings = train_settings_for(preset, **values)
    _check_settings(settings)
    if norm is not None:
        if norm not in ("post", "pre"):
            raise NmtError(f"unknown --norm {norm!r}", "choose post (the paper's) or pre", exit_code=2)
        model_config = model_config.replace(norm=norm)
    return model_config, settings


def _check_settings(settings: TrainSettings) -> None:
    from nmtcli.training.precision import PRECISIONS

    if settings.epochs < 0:
        raise NmtError(f"--epochs must be at least 1, not {settings.epochs}", "pass a positive number", exit_code=2)
    if settings.max_steps < 1 and settings.epochs < 1:
        raise NmtError(f"--max-steps must be at least 1, not {settings.max_steps}", "pass a positive number, or --epochs N", exit_code=2)
    for name in ("max_tokens", "warmup", "save_every", "keep_last", "valid_every", "log_every"):
        if getattr(settings, name) < 1:
            raise NmtError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(settings, name)}", "pass a positive number", exit_code=2)
    for name in ("update_freq", "tokens_per_step"):
        if getattr(settings, name) is not None and getattr(settings, name) < 1:
            raise NmtError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(settings, name)}", "pass a positive number", exit_code=2)
    if settings.update_freq is None and settings.tokens_per_step is None:
        raise NmtError("neither --update-freq nor --tokens-per-step is set", "pass one of them", exit_code=2)
    if settings.patience < 0 or settings.valid_bleu < -1 or settings.save_minutes < 0 or settings.max_minutes < 0:
        raise NmtError("--patience, --valid-bleu and --save-every must not be negative (--valid-bleu -1: all lines)",
                       "pass 0 to turn them off", exit_code=2)
    if not math.isfinite(settings.lr_scale) or settings.lr_scale <= 0:
        raise NmtError("--lr-scale must be a positive number", "1.0 is the paper's schedule", exit_code=2)
    if settings.lr is not None and (not math.isfinite(settings.lr) or settings.lr <= 0):
        raise NmtError("--lr must be a positive number", "e.g. 1e-4; leave it out for the default", exit_code=2)
    if settings.precision not in PRECISIONS:
        raise NmtError(f"unknown precision {settings.precision!r}", f"choose one of {', '.join(PRECISIONS)}", exit_code=2)
    if settings.cuda_graphs and settings.precision == "fp16":  # its loss scaler decides on the host whether a step counts
        raise NmtError("--cuda-graphs cannot replay fp16 steps (the loss scaler skips steps from the host)",
                       "use --precision bf16-master or bf16, or leave out --cuda-graphs", exit_code=2)


def _launch(gpus: int, values: dict[str, Any], restart: bool) -> None:
    """--gpus N: hand the flags' values to N ranks through a config file (each rank checks them)."""
    import torch

    from nmtcli.cli import debug_enabled
    from nmtcli.training import distributed

    if not torch.cuda.is_available() and values.get("device") != "cpu":
        raise NmtError(f"--gpus {gpus} but no CUDA GPU is available", "pass --device cpu to run the ranks on the CPU", exit_code=2)
    say(f"starting {gpus} ranks with torchrun")
    if gpus < 1:
        raise NmtError(f"--gpus must be at least 1, not {gpus}", "pass the number of GPUs of this node", exit_code=2)
    if torch.cuda.is_available() and gpus > torch.cuda.device_count():
        raise NmtError(f"--gpus {gpus} but this node has {torch.cuda.device_count()} GPUs", "pass at most that many", exit_code=2)
    with tempfile.TemporaryDirectory(prefix="nmt-train-") as tmp:
        path = Path(tmp) / "config.json"
        resolved = {k: (str(v) if isinstance(v, Path) else v) for k, v in values.items()}
        path.write_text(json.dumps({**resolved, "restart": restart}), encoding="utf-8")
        distributed.launch(gpus, ["--config", str(path)], debug=debug_enabled())


def _train(run_dir: Path, data_dir: Path, model_config: ModelConfig, settings: TrainSettings, restart: bool,
           ranks: distributed.Ranks, init: InitModel | None = None) -> None:
    from nmtcli.training import distributed
    from nmtcli.training.trainer import Trainer

    main = ranks.is_main
    if main:
        announce("run", run_dir)
    try:
        # With a time limit, which of the two limits comes first is unknown: the bar shows steps only.
        # Steps from epochs are known once the trainer has counted the batches of an epoch (its start event).
        bar = None if settings.max_minutes else settings.max_steps or None
        with _display(bar, total_from_start=not settings.max_minutes and not settings.max_steps) if main else contextlib.nullcontext((lambda kind, v: None)) as on_event:
            trainer = Trainer(run_dir, data_dir, model_config, settings, restart=restart, on_event=on_event, ranks=ranks, init=init)
            trainer.run()
    except NmtError as e:
        if ranks.distributed:
            raise NmtError(f"rank {ranks.rank}: {e.message}", e.hint, e.exit_code) from None
        raise
    except Exception as e:
        if ranks.distributed and distributed.is_peer_failure(e):
            say(f"rank {ranks.rank} stopped: another rank failed (its message says why)")
            raise typer.Exit(1) from None
        raise
    finally:
        distributed.shutdown()
    if main:
        say(f"done; next: nmt average {run_dir}")


@contextlib.contextmanager
def _display(max_steps: int | None, total_from_start: bool = False):
    """A live line (step, loss, ppl, lr, tokens/s, ETA) and one printed line per log, validation and checkpoint."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    columns = (TextColumn("step"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console) as bars:
        task = bars.add_task("train", total=max_steps, status="")
        shown: dict[str, Any] = {}

        def status() -> str:
            parts = [f"loss {shown['loss']:.3f}" if "loss" in shown else ""]
            if "ppl" in shown:
                parts += [f"ppl {shown['ppl']:.2f}", f"lr {shown['lr']:.2e}", f"{shown['target_tokens_per_s']:,.0f} tok/s"]
            if "mfu" in shown:
                parts.append(f"MFU {shown['mfu']:.0%}")
            return "  ".join(p for p in parts if p)

        def on_event(kind: str, v: dict) -> None:
            if kind == "max_tokens_lowered":
                ranks = f"{v['world_size']} ranks x " if v["world_size"] > 1 else ""
                say(f"--max-tokens {v['requested']:,} per GPU: {ranks}one batch would already make a step of "
                    f"~{v['step_target_tokens_before']:,} target tokens, over --tokens-per-step {v['tokens_per_step']:,}; "
                    f"batches of <= {v['max_tokens']:,} tokens instead")
            elif kind == "start":
                where = f"resuming from {v['resumed_from']}" if v["resumed_from"] else (f"starting from {v['init']}" if v.get("init") else "starting")
                say(f"{where}: {v['parameters']:,} parameters, {v['train_pairs']:,} training pairs, "
                    f"device {v['device']}, {v['precision']}{', compiled' if v['compile'] else ''}"
                    f"{', CUDA graphs' if v.get('cuda_graphs') else ''}")
                batch = f"{v['world_size']} rank{'s' if v['world_size'] > 1 else ''} x {v['update_freq']} batch{'es' if v['update_freq'] > 1 else ''} of <= {v['max_tokens']:,} tokens"
                if v.get("expected_step_target_tokens"):
                    say(f"batch: {batch} (~{v['mean_batch_target_tokens']:,} target tokens each) = ~{v['expected_step_target_tokens']:,} "
                        f"target tokens per step; --tokens-per-step {v['tokens_per_step']:,} chose --update-freq {v['update_freq']}")
                else:
                    say(f"batch: {batch} per step")
                if v.get("steps_per_epoch"):
                    stop = (f"; stops early after {v['patience']} validations (every {v['valid_every']:,} steps) without a better score"
                            if v["patience"] else "")
                    total = v["epochs"] * v["steps_per_epoch"]
                    raised = "" if total == v["max_steps"] else f" ({total:,}) raised to the floor of {v['step_floor']:,} steps"
                    say(f"max steps: {v['max_steps']:,}: {v['epochs']} epochs of {v['steps_per_epoch']:,} steps{raised}{stop}")
                if total_from_start:
                    bars.update(task, total=v["max_steps"])
                bars.update(task, completed=v["step"])
            elif kind == "compiled":
                say(f"compiled the forward and backward of {v['classes']} shape class(es) in {v['seconds']:.0f} s")
            elif kind == "cuda_graphs_off":
                warn(v["reason"])
            elif kind == "done" and v.get("cuda_graphs"):
                g = v["cuda_graphs"]
                say(f"CUDA graphs: {g['captured']} captured, {g['replayed']:,} parts of steps replayed"
                    + ("" if g["enabled"] else ", then off (the warning above says why)"))
            elif kind == "step":  # the loss on the live line is the last log line's: reading each step's would wait for the GPU
                bars.update(task, completed=v["step"])
            elif kind == "overflow":
                console.print(f"[yellow]fp16 gradient overflow: step skipped, loss scale now {v['loss_scale']:g}[/yellow]")
            elif kind == "log":
                shown.update(v)
                mfu = f"  MFU {v['mfu']:.1%}" if "mfu" in v else ""
                console.print(
                    f"step {v['step']:>7}  loss {v['loss']:.3f}  ppl {v['ppl']:8.2f}  lr {v['lr']:.2e}  "
                    f"{v['target_tokens_per_s']:,.0f} tgt tok/s{mfu}  epoch {v['epoch']}"
                )
                bars.update(task, status=status())
            elif kind == "unigram_level":
                warn(f"at step {v['step']:,} the training loss (NLL {v['nll']:.3f}) is still at the level of predicting each target "
                     f"token by its frequency alone ({v['unigram_nll']:.3f}), {v['step'] / max(v['warmup'], 1):.0f}x the warmup: the model "
                     "is not using its source. Check that the two sides of the data are aligned translations; if they are, the "
                     "learning rate may be too high for this model (try --lr-scale 0.5 or a longer --warmup)")
            elif kind == "valid" and "valid_ppl" in v:
                bleu = f"  valid BLEU {v['valid_bleu']:.2f}" if "valid_bleu" in v else ""
                each = {k.removeprefix("valid_bleu_"): x for k, x in v.items() if k.startswith("valid_bleu_")}
                if each:  # a multilingual model: each direction's, then their mean (what decides the best checkpoint)
                    bleu = "  valid BLEU " + " ".join(f"{d} {x:.2f}" for d, x in each.items()) + f", mean {v['valid_bleu']:.2f}"
                console.print(f"step {v['step']:>7}  valid nll {v['valid_nll']:.3f}  valid ppl {v['valid_ppl']:.2f}{bleu}"
                              f"{'  (best)' if v.get('best') else ''}")
            elif kind == "checkpoint":
                console.print(f"[dim]checkpoint {v['path']}[/dim]")
            elif kind == "time_limit":
                limit = f"{v['minutes']:g} min" if float(v["minutes"]).is_integer() else f"{v['minutes'] * 60:.0f} s"
                console.print(f"stopped at step {v['step']}: --max-time of {limit} reached")
            elif kind == "early_stop":
                console.print(f"early stop at step {v['step']}: no better {v.get('metric', 'validation')} in "
                              f"{v['patience']} validations (best {v.get('value', float('nan')):.4g} at step {v.get('best_step')})")

        yield on_event

