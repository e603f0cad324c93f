"""A run dir: its config.json, its checkpoints (listed, saved, loaded) and the checks before resuming it.

  config.json                the resolved model, training settings and data it was started with
  sentencepiece.model        copied from the data dir, so the run is self-contained (data prepared with
                             --vocab-from of an OPUS-MT model: its source.spm, target.spm and vocab.json)
  checkpoints/<step>/        model.safetensors + config.json + trainer.pt (optimizer, scaler, data position, ...)
  checkpoints/best/          the weights that scored best on the valid split (model.safetensors + config.json)
  metrics.jsonl              one JSON object per logged step and per validation (`training/metrics.py`)
  tensorboard/               the same numbers as TensorBoard events, where tensorboard is installed
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from nmtcli import faults
from nmtcli.data.text import SPM_FILE
from nmtcli.errors import FileSystemError, NmtError, file_system_error
from nmtcli.files import atomic_copy, atomic_write_json, read_json, staged_dir
from nmtcli.model.checkpoint import CONFIG_FILE, WEIGHTS_FILE, load_state, load_weights, save_weights
from nmtcli.model.config import ModelConfig
from nmtcli.provenance import versions
from nmtcli.data.vocabulary import data_vocabulary
from nmtcli.training import distributed
from nmtcli.training.finetune import InitModel
from nmtcli.training.settings import FIXED_ON_RESUME, TrainSettings, current_names

TRAINER_STATE = "trainer.pt"
STAGE_PREFIX = ".tmp-"  # checkpoints/.tmp-STEP/: a checkpoint being written; one left by a crash is removed on start
BEST = "best"


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.isdigit() and (p / TRAINER_STATE).is_file() and (p / WEIGHTS_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name))


def read_run_config(run_dir: Path) -> dict[str, Any]:
    """A run dir's config.json, its training settings in today's names (one written by an earlier version too)."""
    missing = (f"{run_dir} is not a run dir (no {CONFIG_FILE})", "pass a dir written by `nmt train`")
    values = read_json(Path(run_dir) / CONFIG_FILE, missing, "start the run again with --restart")
    if isinstance(values.get("training"), dict):
        values["training"] = current_names(values["training"])
    return values


def run_config(config: ModelConfig, settings: TrainSettings, data_dir: Path, manifest: dict[str, Any],
               init: InitModel | None = None) -> dict[str, Any]:
    """What config.json records: the model, the training settings and the data a run was started with
    (and with --init, the model it started from)."""
    data = {
        "dir": str(Path(data_dir).resolve()),
        "name": manifest["name"],
        "source_lang": manifest["source_lang"],
        "target_lang": manifest["target_lang"],
        "train_pairs": manifest["splits"]["train"]["pairs"],
    }
    if SPM_FILE in manifest["files"]:
        data["sentencepiece_sha256"] = manifest["files"][SPM_FILE]
    if manifest.get("tokenizer"):  # --vocab-from: the model's tokenizer files (and their layout)
        data["tokenizer"] = manifest["tokenizer"]
        data["vocabulary"] = data_vocabulary(manifest)
    if manifest.get("directions"):  # multilingual data: the directions trained (the model's others are zero-shot)
        data["directions"] = manifest["directions"]
    values = {"format": "nmt-run", "format_version": 2, "model": config.to_dict(), "training": asdict(settings), "data": data}
    if init is not None:
        values["init"] = init.describe()
    return {**values, "versions": versions()}


def run_vocabulary(data: dict[str, Any]) -> dict[str, str]:
    """The tokenizer files (name -> sha256) of the data a run config's "data" section describes."""
    return data.get("vocabulary") or {SPM_FILE: data.get("sentencepiece_sha256")}


def start(run_dir: Path, data_dir: Path, config: dict[str, Any] | None) -> None:
    """Rank 0, before the first step: config.json and the vocabulary of a new run (`config` None when
    resuming), and no stage left by a checkpoint write that was interrupted."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if config is not None:
        atomic_write_json(run_dir / CONFIG_FILE, config)
        for name in run_vocabulary(config["data"]):
            atomic_copy(data_dir / name, run_dir / name)
    for stale in (run_dir / "checkpoints").glob(f"{STAGE_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)


# --- resume --------------------------------------------------------------------------------------


def agreed_resume_point(run_dir: Path, ranks: distributed.Ranks) -> Path | None:
    """The newest checkpoint as rank 0 sees it; every rank must see the same one."""
    found = checkpoint_dirs(run_dir)
    newest = found[-1].name if found else None
    if not ranks.distributed:
        return found[-1] if found else None
    chosen = distributed.all_gather(newest)[0]
    if chosen is None:
        return None
    path = run_dir / "checkpoints" / chosen
    if not (path / TRAINER_STATE).is_file():
        raise NmtError(
            f"rank {ranks.rank} cannot see {path}, which rank 0 resumes from",
            "on several nodes the run dir must be on a filesystem that every node shares",
        )
    return path


def check_resumable(run_dir: Path, previous: dict[str, Any], now: dict[str, Any], config: ModelConfig,
                    settings: TrainSettings) -> None:
    """Refuse to resume a run (config.json `previous`) as something else: another model, data or recipe.
    `now` is the run config this invocation would write (`run_config`)."""
    hint = f"train into a new dir with -o, or pass --restart to discard {run_dir}"
    if previous.get("format_version", 1) < 2:
        raise NmtError(f"{run_dir} was written by an older nmt whose checkpoints cannot be resumed", hint)
    before, after = previous.get("init"), now.get("init")
    if (before or {}).get("weights_sha256") != (after or {}).get("weights_sha256"):
        started = f"started from --init {before['model']}" if before else "trained from scratch"
        raise NmtError(f"{run_dir} was {started}, not {'--init ' + after['model'] if after else 'from scratch'}",
                       (f"resume it with --init {before['model']}, or " if before else "") + hint)
    if previous.get("model") != config.to_dict():
        # decoder_layers is written only where it differs from layers (ModelConfig.to_dict): compared resolved
        before = {"decoder_layers": previous.get("model", {}).get("layers"), **previous.get("model", {})}
        after = {"decoder_layers": config.decoder_layers, **config.to_dict()}
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        there = ", ".join(f"{k} {before.get(k)}" for k in changed)
        shape = ", ".join(f"{k} {after.get(k)}" for k in changed)
        preset = previous.get("training", {}).get("preset")
        raise NmtError(f"{run_dir} was trained with a different model shape ({there} there; {shape} now)",
                       (f"resume it with --preset {preset}, " if preset else "") + hint)
    if run_vocabulary(previous["data"]) != run_vocabulary(now["data"]):
        raise NmtError(f"{run_dir} was trained on other data ({previous['data']['dir']})", hint)
    if previous["data"].get("train_pairs") != now["data"]["train_pairs"]:
        raise NmtError(f"{run_dir} was trained on other data ({previous['data']['dir']})", hint)
    for key in FIXED_ON_RESUME:
        if (then := previous["training"].get(key, getattr(TrainSettings(), key))) != getattr(settings, key):
            # The flag that resumes it as it was (an --lr run of small from before --lr stopped taking the preset's
            # lr_scale resumes with --lr-scale 0.7155417527999327, a number nobody retypes from memory).
            again = f"resume it with --{key.replace('_', '-')} {then}, or " if then is not None else ""
            raise NmtError(f"{run_dir} was trained with {key}={then}, not {getattr(settings, key)}", again + hint)


def read_trainer_state(path: Path) -> dict[str, Any]:
    """A checkpoint's trainer state (optimizer, step, data position, ...): what a resumed run is planned from."""
    # weights_only: a run dir is data, never code; this refuses anything but tensors and primitives.
    try:
        return torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - truncated, corrupt, or a pickle that is more than tensors
        first = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0]  # torch's messages run long
        raise NmtError(f"{path / TRAINER_STATE} cannot be loaded: {first}", _broken(path)) from e


def load_checkpoint_weights(path: Path, model: torch.nn.Module) -> None:
    """The checkpoint's weights into `model`."""
    load_state(model, load_weights(path / WEIGHTS_FILE, _broken(path)), path / WEIGHTS_FILE)


def _broken(path: Path) -> str:
    return f"delete {path} to resume from the checkpoint before it, or pass --restart to start over"


# --- checkpoints ---------------------------------------------------------------------------------


def save_checkpoint(run_dir: Path, step: int, weights: dict[str, torch.Tensor], info: dict[str, Any],
                    state: dict[str, Any], keep_last: int, best_step: int | None = None) -> Path:
    """Write checkpoints/<step>/ as a whole: built in a hidden dir, then renamed into place; then only
    the newest `keep_last` checkpoints are kept, and the `keep_last` up to `best_step` (what `nmt average`
    averages in a run that validates BLEU: `average.checkpoints_to_average`). `info` is its config.json,
    `state` its trainer.pt."""
    final = run_dir / "checkpoints" / str(step)
    try:
        with staged_dir(final, stage_name=f"{STAGE_PREFIX}{step}") as stage:
            save_weights(stage / WEIGHTS_FILE, weights, {"step": str(step)})
            faults.point("checkpoint-half-written", step=step)
            atomic_write_json(stage / CONFIG_FILE, info)
            with open(stage / TRAINER_STATE, "wb") as f:  # a Python file: a failed write keeps its OSError (errno)
                torch.save(state, f)
    except BaseException as e:
        previous = [c for c in checkpoint_dirs(run_dir) if c != final]
        resume = f"it resumes from {previous[-1]}, which is intact" if previous else "no checkpoint of this run was written yet"
        error = file_system_error(e.__cause__ if isinstance(e, FileSystemError) else e, f"checkpoint {final}", intact=resume)
        if isinstance(e, Exception) and error is not None:
            raise error from e
        raise
    found = checkpoint_dirs(run_dir)
    kept = set(found[-keep_last:])
    if best_step is not None:
        kept.update(ending_at(found, best_step)[-keep_last:])
    for old in found:
        if old not in kept:
            shutil.rmtree(old)
    return final


def ending_at(checkpoints: list[Path], step: int) -> list[Path]:
    """The checkpoints (oldest first, as `checkpoint_dirs` lists them) written at `step` or before."""
    return [c for c in checkpoints if int(c.name) <= step]


def best_validation(run_dir: Path) -> dict[str, Any] | None:
    """The run's best validation so far ({"metric", "value", "step"}, as checkpoints/best/ records it), or None."""
    path = Path(run_dir) / "checkpoints" / BEST / CONFIG_FILE
    if not path.is_file():
        return None
    best = read_json(path, (f"{path} is missing", "train again"), "delete checkpoints/best/ and average with --at last").get("best")
    return best if isinstance(best, dict) and isinstance(best.get("step"), int) else None


def save_best(run_dir: Path, step: int, weights: dict[str, torch.Tensor], config: ModelConfig, best: dict[str, Any]) -> Path:
    """checkpoints/best/: the weights of the best validation so far (each file replaced atomically)."""
    path = run_dir / "checkpoints" / BEST
    save_weights(path / WEIGHTS_FILE, weights, {"step": str(step)})
    atomic_write_json(path / CONFIG_FILE, {"model": config.to_dict(), "step": step, "best": best})
    return path


def copied(value: Any) -> Any:
    """`value` with every tensor in it cloned: a snapshot that the steps after it do not change."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        return {k: copied(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(copied(v) for v in value)
    return value


class BackgroundSave:
    """A checkpoint written by a thread while training goes on, one at a time.

    What it writes is a snapshot taken on the training thread (weights and trainer state cloned), and
    `rundir.save_checkpoint` builds it in a hidden dir renamed into place, so a kill during the write
    leaves the previous checkpoint the newest. The thread is no daemon: the process waits for it."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._outcome: tuple[int, Path] | BaseException | None = None

    def start(self, step: int, write: Callable[[], Path]) -> None:
        assert self._thread is None, "one checkpoint at a time: collect the last one first"

        def run() -> None:
            try:
                self._outcome = (step, write())
            except BaseException as e:  # noqa: BLE001 - raised on the training thread when collected
                self._outcome = e

        self._thread = threading.Thread(target=run, name="nmt-checkpoint")
        self._thread.start()

    def collect(self, wait: bool) -> tuple[int, Path] | None:
        """(step, path) of the save once it is written (with `wait`, once it is), else None; raises its error."""
        if self._thread is None or (not wait and self._thread.is_alive()):
            return None
        self._thread.join()
        outcome, self._thread, self._outcome = self._outcome, None, None
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome
