"""`nmt train`: train a Transformer on a prepared data dir; resumes an existing run dir; runs under torchrun."""

from __future__ import annotations

import contextlib
import inspect
import json
import tempfile
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from nmtcli.cli.common import RUNS_ROOT, announce, console, default_data_dir, notice, say, warn
from nmtcli.errors import NmtError

if TYPE_CHECKING:
    from nmtcli.model.config import ModelConfig
    from nmtcli.training import distributed
    from nmtcli.training.finetune import InitModel
    from nmtcli.training.settings import TrainSettings

NAME = "train"

# Keys a --config file may set besides the settings (training/settings.py): the flags of this command's own.
RUN_KEYS = ("data", "output", "preset", "restart", "norm", "init")


def read_config_file(path: Path) -> dict[str, Any]:
    """A JSON or TOML file of settings, by their names (flag names, with - or _). A run dir's config.json works
    too: its "training" section is used. Earlier versions' names still load (settings.current_names)."""
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
    from nmtcli.training.settings import current_names, flag_settings

    run_dir = values.get("format") == "nmt-run"
    if run_dir:  # a run dir's config.json: rerun that recipe
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
    values = {k.replace("-", "_"): v for k, v in values.items()}
    values = current_names(values, None if run_dir else lambda old, new: notice(f"--config {path}: {old} is now {new}"))
    unknown = sorted(set(values) - {f.name for f in flag_settings()} - set(RUN_KEYS))
    if unknown:
        raise NmtError(f"--config {path} has unknown settings: {', '.join(unknown)}", "use the names of `nmt train` flags", exit_code=2)
    return parsed_flags(values)


def parsed_flags(values: dict[str, Any]) -> dict[str, Any]:
    """Flags' or a config file's values as the settings hold them (e.g. --max-time 90s -> 1.5 minutes); other keys as
    they are."""
    from nmtcli.training.settings import flag_settings

    settings = {f.name: f for f in flag_settings()}
    parse = {k: settings[k].metadata.get("parse") for k in values if k in settings}
    return {k: parse[k](v) if parse.get(k) is not None and v is not None else v for k, v in values.items()}


def command(**given: Any) -> None:
    """Train with the paper's recipe: Adam (0.9, 0.98, 1e-9), warmup then 1/sqrt(step), label smoothing 0.1.

    Checkpoints go to RUN_DIR/checkpoints/STEP/ (the last --keep-last kept, the best in checkpoints/best/).
    Running the same command again resumes from the newest checkpoint exactly where it stopped.
    Runs unchanged under torchrun (`torchrun --nproc-per-node N -m nmtcli train ...`); --gpus N starts it for you.
    """
    from nmtcli.training import distributed

    given = {name: p.default for name, p in command.__signature__.parameters.items()} | given  # called as a function too (quickstart)
    config, gpus, restart = given.pop("config"), given.pop("gpus"), given.pop("restart")
    flags = parsed_flags(given)
    if flags["max_steps"] is not None and flags["epochs"] is not None:
        raise NmtError("--max-steps and --epochs both say how long to train", "pass one of them", exit_code=2)
    values = read_config_file(config) if config else {}
    if flags["max_steps"] is not None or flags["epochs"] is not None:  # the flag says how long, whatever the --config file said
        values.pop("epochs" if flags["max_steps"] is not None else "max_steps", None)
    values.update({k: v for k, v in flags.items() if v is not None})
    restart = restart or bool(values.pop("restart", False))

    ranks = distributed.from_environment()
    if gpus is not None and not ranks.distributed:
        _launch(gpus, values, restart)
        return
    run_dir, data_dir, model_config, settings, init_model = _resolve(values, restart)
    if ranks.is_main and 0 < settings.max_steps < settings.warmup:
        warn(f"--max-steps {settings.max_steps:,} ends inside the {settings.warmup:,}-step warmup: the learning rate never "
             f"reaches its peak (pass --warmup {max(1, settings.max_steps // 2):,} or fewer, or more steps)")
    _train(run_dir, data_dir, model_config, settings, restart, ranks, init_model)


def _signature() -> inspect.Signature:
    """`command`'s parameters: this command's own flags, then one flag per training setting (settings.flag_settings),
    made from the setting's field: its name, type, help and --help panel."""
    from nmtcli.training.settings import TrainSettings, flag_of, flag_settings

    def option(name: str, kind: Any, *decls: str, default: Any = None, **info: Any) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                 annotation=Annotated[kind, typer.Option(*decls, **info)])

    own = [
        option("data", Optional[Path], help="Prepared data dir. Default: the newest under data/."),
        option("init", Optional[str], "--init", metavar="MODEL", help="Start from this model's config and weights (a model dir or Hub id, nmt's own or from `nmt import marian|m2m100|nllb`): fine-tuning, or continued training. The data must be prepared with `nmt prepare --vocab-from MODEL`; the recipe is the fine-tuning one (docs/training.md)."),
        option("preset", Optional[str], help="Model and recipe: tiny (a CPU, up to ~50k pairs), small (fairseq's IWSLT model: 100k-1M pairs, one GPU or a few CPU hours), base or big (Table 3: WMT-sized data, GPUs); student-tiny, student-base (6+2 layers, fast to translate: for pairs a teacher model translated, sequence-level distillation). Default: the one that fits the training pairs and the device (tiny up to 50k pairs, small up to 1M or on a CPU, else base), said in one line."),
        option("output", Optional[Path], "--output", "-o", help="Run dir. Default: runs/PRESET-DATA."),
        option("norm", Optional[str], help="post: LayerNorm after each residual sum, the paper's (sec. 3.1); pre: before each sublayer, which leaves the early plateau sooner on small data and short runs. Default: the preset's (tiny pre, the others post); a resumed run keeps the norm it was started with."),
        option("config", Optional[Path], "--config", help="JSON or TOML file of settings (flag names as keys; a run dir's config.json works). Flags override it.", rich_help_panel="Run"),
        option("gpus", Optional[int], help="Start this many ranks on this node through torchrun (one per GPU). For several nodes run torchrun yourself (docs/training.md).", rich_help_panel="Run"),
    ]
    hints = typing.get_type_hints(TrainSettings)
    settings = []
    for f in flag_settings():
        kind = f.metadata["flag_type"] or next(t for t in typing.get_args(hints[f.name]) or (hints[f.name],) if t is not type(None))
        decls = (f"{flag_of(f.name)}/--no-{flag_of(f.name)[2:]}",) if kind is bool else (flag_of(f.name),)
        settings.append(option(f.name, Optional[kind], *decls, help=f.metadata["help"], rich_help_panel=f.metadata["panel"]))
    restart = option("restart", bool, "--restart", default=False, help="Delete an existing run dir and start over instead of resuming.",
                     rich_help_panel="Run")
    return inspect.Signature([*own, *settings, restart])


command.__signature__ = _signature()  # type: ignore[attr-defined]


def _resolve(values: dict[str, Any], restart: bool = False) -> tuple[Path, Path, ModelConfig, TrainSettings, InitModel | None]:
    """The run dir, data dir, model, training settings and --init model that the flags' `values` ask for. A run
    resumed without --norm keeps the norm it was started with (`--norm pre` given at its start, say)."""
    from nmtcli.data.prepare import read_manifest
    from nmtcli.model.checkpoint import CONFIG_FILE
    from nmtcli.model.config import NORMS
    from nmtcli.training.rundir import read_run_config

    data = values.pop("data", None)
    if values.get("init"):
        data_dir = Path(data) if data else default_data_dir()
        return _resolve_init(values, data_dir, read_manifest(data_dir))
    values.pop("init", None)
    preset = values.pop("preset", None)
    output = values.pop("output", None)
    norm = values.pop("norm", None)
    settings_from_flags(preset or "base", dict(values), norm)  # the settings' own checks, before any data is read
    data_dir = Path(data) if data else default_data_dir()
    manifest = read_manifest(data_dir)
    if preset is None:  # the preset that fits the data and the device, said in one line
        from nmtcli.training.settings import preset_for

        preset, why = preset_for(((manifest.get("splits") or {}).get("train") or {}).get("pairs"), _on_gpu(values.get("device")))
        say(f"preset {preset}: {why}; --preset chooses another")
    model_config, settings = settings_from_flags(preset, values, norm)
    run_dir = Path(output) if output else RUNS_ROOT / f"{preset}-{manifest['name']}"
    if norm is None and not restart and (run_dir / CONFIG_FILE).is_file():  # resuming: the run's own norm
        run = read_run_config(run_dir)
        # of a run of this preset only: another preset's norm on this preset's shape would be a model neither asked for
        started = (run.get("model") or {}).get("norm") if (run.get("training") or {}).get("preset") == preset else None
        if started in NORMS and started != model_config.norm:  # another value: the resume's shape check names it
            model_config = model_config.replace(norm=started)
    return run_dir, data_dir, model_config, settings, None


def _on_gpu(device: str | None) -> bool:
    """Whether --device (auto when not given) trains on a GPU (NmtError for one that is not there, as training says it)."""
    from nmtcli.device import resolve_device

    return resolve_device(device or "auto").type == "cuda"


def _resolve_init(values: dict[str, Any], data_dir: Path, manifest: dict[str, Any]) -> tuple[Path, Path, ModelConfig, TrainSettings, InitModel]:
    """--init MODEL: the model's config, the fine-tuning recipe sized to the data, checked against the model and data."""
    from nmtcli import hub
    from nmtcli.training.finetune import check_data, finetune_settings, read_init

    spec = str(values.pop("init"))
    model_dir, origin = hub.locate_model(spec)
    init = read_init(model_dir, origin)
    check_data(init, manifest, data_dir)
    preset, norm, output = values.pop("preset", None), values.pop("norm", None), values.pop("output", None)
    if norm is not None and norm != init.config.norm:
        raise NmtError(f"--norm {norm} contradicts --init {spec}, a {init.config.norm}-norm model", "leave out --norm: the model fixes it", exit_code=2)
    settings = finetune_settings(init, manifest, preset, values)
    run_dir = Path(output) if output else RUNS_ROOT / f"{init.name}-{manifest['name']}"
    return run_dir, data_dir, init.config, settings, init


def settings_from_flags(preset: str, values: dict[str, Any], norm: str | None = None) -> tuple[ModelConfig, TrainSettings]:
    """The preset's model and recipe with the flags' `values` (None: the preset's) applied; each setting checks itself."""
    from nmtcli.training.settings import train_settings_for

    model_config, settings = train_settings_for(preset, **values)
    if norm is not None:
        try:
            model_config = model_config.replace(norm=norm)
        except ValueError as e:  # the model config's own check, in its words
            raise NmtError(f"--{e}", "post is the paper's", exit_code=2) from None
    return model_config, settings


def _launch(gpus: int, values: dict[str, Any], restart: bool) -> None:
    """--gpus N: hand the flags' values to N ranks through a config file (each rank checks them)."""
    from nmtcli.cli.root import debug_enabled
    from nmtcli.training import distributed

    distributed.check_ranks(gpus, values.get("device"))
    say(f"starting {gpus} ranks with torchrun")
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
        bar = None if settings.max_time else settings.max_steps or None
        with _display(bar, total_from_start=not settings.max_time and not settings.max_steps) if main else contextlib.nullcontext((lambda kind, v: None)) as on_event:
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
            if kind == "batch_tokens_lowered":
                ranks = f"{v['world_size']} ranks x " if v["world_size"] > 1 else ""
                say(f"--batch-tokens {v['requested']:,} per GPU: {ranks}one batch would already make a step of "
                    f"~{v['step_target_tokens_before']:,} target tokens, over --tokens-per-step {v['tokens_per_step']:,}; "
                    f"batches of <= {v['batch_tokens']:,} tokens instead")
            elif kind == "start":
                where = f"resuming from {v['resumed_from']}" if v["resumed_from"] else (f"starting from {v['init']}" if v.get("init") else "starting")
                say(f"{where}: {v['parameters']:,} parameters, {v['train_pairs']:,} training pairs, "
                    f"device {v['device']}, {v['precision']}{', compiled' if v['compile'] else ''}"
                    f"{', CUDA graphs' if v.get('cuda_graphs') else ''}")
                batch = f"{v['world_size']} rank{'s' if v['world_size'] > 1 else ''} x {v['update_freq']} batch{'es' if v['update_freq'] > 1 else ''} of <= {v['batch_tokens']:,} tokens"
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

