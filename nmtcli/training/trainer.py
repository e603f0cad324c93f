"""The training loop of sec. 5: Adam, warmup schedule, label smoothing, token-budget batches, checkpoints.

It runs as one process or as one rank of a torchrun job (`training/distributed.py`). A run dir holds:
  config.json                the resolved model, training settings and data it was started with
  sentencepiece.model        copied from the data dir, so the run is self-contained
  checkpoints/<step>/        model.safetensors + config.json + trainer.pt (optimizer, scaler, data position, ...)
  checkpoints/best/          the weights that scored best on the valid split (model.safetensors + config.json)
  metrics.jsonl              one JSON object per logged step and per validation
  tensorboard/               the same numbers as TensorBoard events, where tensorboard is installed
Running again on the same dir resumes from the newest complete checkpoint; the order of batches,
the dropout masks, the optimizer, the loss scale and early stopping continue exactly where they stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import shutil
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmtcli import faults
from nmtcli.data.batching import BatchStream, ParallelData, make_batches
from nmtcli.data.prepare import read_manifest, reference_lines
from nmtcli.data.text import SPM_FILE
from nmtcli.device import OUT_OF_MEMORY, resolve_device
from nmtcli.errors import FileSystemError, NmtError, file_system_error
from nmtcli.files import atomic_copy, atomic_write_json, read_json, staged_dir
from nmtcli.model.checkpoint import CONFIG_FILE, WEIGHTS_FILE, load_state, load_weights, save_weights
from nmtcli.model.config import PRESETS, ModelConfig
from nmtcli.model.transformer import Transformer
from nmtcli.provenance import versions
from nmtcli.training import compiling, distributed, flops, precision
from nmtcli.training.loader import StepBatches, StepLoader
from nmtcli.training.loss import output_loss, perplexity
from nmtcli.training.metrics import MetricsLog
from nmtcli.training.schedule import inverse_sqrt_lr
from nmtcli.training.validation import BleuSettings, valid_bleu, valid_loss

TRAINER_STATE = "trainer.pt"
STAGE_PREFIX = ".tmp-"  # checkpoints/.tmp-STEP/: a checkpoint being written; one left by a crash is removed on start
BEST = "best"

# Events: on_event(kind, values) with kind in {"max_tokens_lowered", "start", "step", "overflow", "log", "valid",
# "best", "checkpoint", "early_stop", "time_limit", "done"}.
OnEvent = Callable[[str, dict[str, Any]], None]

# In a run of several ranks, rank 0's clock (--max-time, --save-every in minutes) is shared every this
# many steps: the all-reduce that shares it waits for the device, so not every step.
CLOCK_EVERY = 10


@dataclass(frozen=True)
class TrainSettings:
    """Everything about a run but the model's shape. Defaults come from the preset (TRAIN_PRESETS)."""

    preset: str = "base"
    max_steps: int = 100_000  # sec. 5.2: base 100k steps, big 300k
    max_minutes: float = 0.0  # > 0: also stop after this much training time in this invocation
    max_tokens: int = 25_000  # padded tokens per batch (per GPU) on the longer side
    tokens_per_step: int | None = 25_000  # sec. 5.1: ~25,000 target tokens per step; None: use update_freq
    update_freq: int | None = None  # batches per rank per step; None: chosen from tokens_per_step
    warmup: int = 4000  # sec. 5.3
    lr_scale: float = 1.0
    label_smoothing: float = 0.1  # sec. 5.4
    adam_beta1: float = 0.9  # sec. 5.3
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    save_every: int = 1000  # steps between checkpoints (when save_minutes is 0)
    save_minutes: float = 0.0  # > 0: a checkpoint every this many minutes instead (the paper: 10)
    keep_last: int = 5  # sec. 6.1: base averages the last 5 checkpoints, big the last 20
    valid_every: int = 1000
    valid_bleu: int = 0  # BLEU on the first N valid lines at each validation (0: off, -1: all)
    patience: int = 0  # stop after this many validations without improvement (0: never)
    log_every: int = 100
    seed: int = 1
    device: str = "auto"
    precision: str = "auto"  # auto: bf16 on a GPU that has it, fp32 otherwise; or fp32, bf16, fp16
    compile: bool = False  # torch.compile the model
    peak_tflops: float | None = None  # the device's peak, for MFU where nmt does not know it

    def for_preset(self, **overrides: Any) -> TrainSettings:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


TRAIN_PRESETS: dict[str, TrainSettings] = {
    # tiny: a short warmup and a small batch so that ~1000 CPU steps learn a toy task.
    "tiny": TrainSettings(preset="tiny", max_steps=1000, max_tokens=2048, tokens_per_step=None, update_freq=1,
                          warmup=200, save_every=250, keep_last=5, valid_every=250, log_every=25),
    "base": TrainSettings(preset="base", save_minutes=10.0),  # sec. 6.1: "checkpoints written at 10-minute intervals"
    "big": TrainSettings(preset="big", max_steps=300_000, keep_last=20, save_minutes=10.0),
}

# Settings that fix what a run is; resuming with a different value would silently train something else.
FIXED_ON_RESUME = ("preset", "max_tokens", "tokens_per_step", "update_freq", "seed", "label_smoothing", "warmup", "lr_scale")


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.isdigit() and (p / TRAINER_STATE).is_file() and (p / WEIGHTS_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name))


def read_run_config(run_dir: Path) -> dict[str, Any]:
    missing = (f"{run_dir} is not a run dir (no {CONFIG_FILE})", "pass a dir written by `nmt train`")
    return read_json(Path(run_dir) / CONFIG_FILE, missing, "start the run again with --restart")


@dataclass(frozen=True)
class BatchChoice:
    """How a step is made: batches of at most `max_tokens` (per rank), `update_freq` of them per rank."""

    max_tokens: int
    update_freq: int
    mean_target_tokens: float | None = None  # of a batch, in the first epoch's order (when measured)
    lowered_from: int | None = None  # --max-tokens, when one batch per rank was already more than a step
    unlowered_step_tokens: float | None = None  # what a step of one batch per rank would have held


def mean_batch_target_tokens(data: ParallelData, max_tokens: int, seed: int) -> float:
    """The mean target tokens of a batch of at most `max_tokens` tokens in the first epoch's order."""
    batches = make_batches(data.src.lengths, data.tgt.lengths, max_tokens, seed, 1)
    return sum(int(data.tgt.lengths[b].sum()) + len(b) for b in batches) / max(len(batches), 1)


def choose_batch(data: ParallelData, max_tokens: int, tokens_per_step: int, world_size: int, seed: int) -> BatchChoice:
    """Batches per rank per step so that a step holds about `tokens_per_step` target tokens.

    Gradient accumulation can only add batches: when one batch on every rank already holds more than
    `tokens_per_step` (many GPUs, or a --max-tokens above the step), the batches are made smaller
    instead, in proportion, so that one batch per rank makes the step the user asked for.
    """
    mean = mean_batch_target_tokens(data, max_tokens, seed)
    lowered_from = unlowered = None
    if world_size * mean > tokens_per_step:
        lowered_from, unlowered = max_tokens, world_size * mean
        max_tokens = max(1, int(max_tokens * tokens_per_step / unlowered))
        mean = mean_batch_target_tokens(data, max_tokens, seed)
    update_freq = max(1, round(tokens_per_step / (world_size * max(mean, 1.0))))
    return BatchChoice(max_tokens, update_freq, mean, lowered_from, unlowered)


def parameter_fingerprint(model: torch.nn.Module) -> str:
    """sha256 of every parameter's bytes: equal on two ranks exactly when their weights are identical."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class Trainer:
    def __init__(
        self,
        run_dir: Path,
        data_dir: Path,
        model_config: ModelConfig,
        settings: TrainSettings,
        restart: bool = False,
        on_event: OnEvent | None = None,
        ranks: distributed.Ranks | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.data_dir = Path(data_dir)
        self.settings = settings
        self.on_event = on_event or (lambda kind, values: None)
        self.ranks = ranks or distributed.from_environment()
        self.is_main = self.ranks.is_main
        self.device = resolve_device(settings.device, self.ranks.local_rank)
        distributed.init(self.ranks, self.device)
        self.precision = precision.resolve(settings.precision, self.device)
        manifest = read_manifest(data_dir)
        self.src_lang, self.tgt_lang = manifest["source_lang"], manifest["target_lang"]
        self.config = model_config.replace(vocab_size=manifest["vocab_size"])
        self.run_config = {
            "format": "nmt-run",
            "format_version": 2,
            "model": self.config.to_dict(),
            "training": asdict(settings),
            "data": {
                "dir": str(self.data_dir.resolve()),
                "name": manifest["name"],
                "source_lang": self.src_lang,
                "target_lang": self.tgt_lang,
                "train_pairs": manifest["splits"]["train"]["pairs"],
                "sentencepiece_sha256": manifest["files"][SPM_FILE],
            },
            "versions": versions(),
        }
        if restart and self.is_main and self.run_dir.exists():
            shutil.rmtree(self.run_dir)
        self._barrier()  # no rank looks for checkpoints while rank 0 may still be deleting them
        resume = self._agreed_resume_point()
        if resume:
            self._check_resumable(read_run_config(self.run_dir))

        torch.manual_seed(settings.seed)  # the same seed gives the same initial weights on every rank
        self.model = Transformer(self.config).to(self.device)
        # Fused Adam: one kernel for all parameters on a GPU (and a vectorized loop on a CPU).
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=0.0,
            betas=(settings.adam_beta1, settings.adam_beta2),
            eps=settings.adam_eps,
            fused=True,
        )
        self.train_data = ParallelData(data_dir, "train", self.src_lang, self.tgt_lang, self.config.vocab_size)
        self.valid_data = ParallelData(data_dir, "valid", self.src_lang, self.tgt_lang, self.config.vocab_size)
        self.step = 0
        self.best: dict[str, Any] | None = None  # {"metric", "value", "step"}
        self.bad_validations = 0
        self.resumed_from: Path | None = None
        previous = self._load_checkpoint(resume) if resume else {}
        self.batch = self._resolve_batch(previous)
        self.update_freq, self.mean_batch_tokens = self.batch.update_freq, self.batch.mean_target_tokens
        self.stream = BatchStream(self.train_data, self.batch.max_tokens, settings.seed)
        if previous:
            self.stream.load_state_dict(previous["stream"])
        self.data_state = self.stream.state_dict()
        self._first_bad_step: torch.Tensor | None = None  # on the device: the first step whose loss was not finite
        self._bad_loss: torch.Tensor | None = None

        if settings.compile:
            compiling.check_compile_works(self.device)
            compiling.compile_layers(self.model)
        self.ddp: torch.nn.parallel.DistributedDataParallel | None = None
        self.forward_model: torch.nn.Module = self.model
        if self.ranks.distributed:
            with warnings.catch_warnings():
                # Newer PyTorch renames broadcast_buffers; the old name still means what we want here.
                warnings.simplefilter("ignore", FutureWarning)
                self.ddp = torch.nn.parallel.DistributedDataParallel(
                    self.model,
                    device_ids=[self.device] if self.device.type == "cuda" else None,
                    broadcast_buffers=False,  # the only buffer is the fixed positional-encoding table
                    gradient_as_bucket_view=True,
                    bucket_cap_mb=gradient_bucket_mb(self.model),
                )
            self.forward_model = self.ddp
        self.peak = flops.device_peak_flops(self.device, self.precision.name, settings.peak_tflops)
        if settings.valid_bleu:
            from nmtcli.data.text import load_sentencepiece

            self.sp = load_sentencepiece(self.data_dir / SPM_FILE)
            self.valid_sources = reference_lines(self.data_dir, "valid", self.src_lang)
            self.valid_references = reference_lines(self.data_dir, "valid", self.tgt_lang)

    def _barrier(self) -> None:
        if torch.distributed.is_initialized():
            torch.distributed.barrier()

    # --- resume ----------------------------------------------------------------------------------

    def _agreed_resume_point(self) -> Path | None:
        """The newest checkpoint as rank 0 sees it; every rank must see the same one."""
        found = checkpoint_dirs(self.run_dir)
        newest = found[-1].name if found else None
        if not self.ranks.distributed:
            return found[-1] if found else None
        chosen = distributed.all_gather(newest)[0]
        if chosen is None:
            return None
        path = self.run_dir / "checkpoints" / chosen
        if not (path / TRAINER_STATE).is_file():
            raise NmtError(
                f"rank {self.ranks.rank} cannot see {path}, which rank 0 resumes from",
                "on several nodes the run dir must be on a filesystem that every node shares",
            )
        return path

    def _check_resumable(self, previous: dict[str, Any]) -> None:
        hint = f"train into a new dir with -o, or pass --restart to discard {self.run_dir}"
        if previous.get("format_version", 1) < 2:
            raise NmtError(f"{self.run_dir} was written by an older nmt whose checkpoints cannot be resumed", hint)
        if previous.get("model") != self.config.to_dict():
            before = previous.get("model", {})
            changed = sorted(k for k, v in self.config.to_dict().items() if before.get(k) != v)
            there = ", ".join(f"{k} {before.get(k)}" for k in changed)
            now = ", ".join(f"{k} {getattr(self.config, k)}" for k in changed)
            preset = previous.get("training", {}).get("preset")
            raise NmtError(f"{self.run_dir} was trained with a different model shape ({there} there; {now} now)",
                           (f"resume it with --preset {preset}, " if preset else "") + hint)
        if previous["data"]["sentencepiece_sha256"] != self.run_config["data"]["sentencepiece_sha256"]:
            raise NmtError(f"{self.run_dir} was trained on other data ({previous['data']['dir']})", hint)
        if previous["data"].get("train_pairs") != self.run_config["data"]["train_pairs"]:
            raise NmtError(f"{self.run_dir} was trained on other data ({previous['data']['dir']})", hint)
        for key in FIXED_ON_RESUME:
            if previous["training"].get(key, getattr(TrainSettings(), key)) != getattr(self.settings, key):
                raise NmtError(
                    f"{self.run_dir} was trained with {key}={previous['training'].get(key)}, not {getattr(self.settings, key)}",
                    hint,
                )

    def _load_checkpoint(self, path: Path) -> dict[str, Any]:
        """Weights, optimizer, step, loss scale and early stopping from `path`; returns its trainer state."""
        broken = f"delete {path} to resume from the checkpoint before it, or pass --restart to start over"
        load_state(self.model, load_weights(path / WEIGHTS_FILE, broken), path / WEIGHTS_FILE)
        # weights_only: a run dir is data, never code; this refuses anything but tensors and primitives.
        try:
            state = torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - truncated, corrupt, or a pickle that is more than tensors
            first = (str(e).strip().splitlines() or [type(e).__name__])[0].split(". ")[0]  # torch's messages run long
            raise NmtError(f"{path / TRAINER_STATE} cannot be loaded: {first}", broken) from e
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
        if state.get("scaler") and self.precision.scaler.is_enabled():
            self.precision.scaler.load_state_dict(state["scaler"])
        self.best = state.get("best")
        self.bad_validations = int(state.get("bad_validations", 0))
        self.resumed_from = path
        return state

    def _resolve_batch(self, previous: dict[str, Any]) -> BatchChoice:
        s, world = self.settings, self.ranks.world_size
        previous_batches_per_step = previous.get("batches_per_step")
        if previous_batches_per_step:
            # A resumed run keeps its global batch: the batches it was made of (their order depends on
            # their size) and how many make a step; with an automatic update_freq it may change GPU count.
            max_tokens = int(previous.get("batch_max_tokens", s.max_tokens))
            if s.update_freq is None and previous_batches_per_step % world == 0:
                return BatchChoice(max_tokens, previous_batches_per_step // world)
            if (s.update_freq or 0) * world != previous_batches_per_step:
                raise NmtError(
                    f"{self.run_dir} was trained with {previous_batches_per_step} batches per step, "
                    f"not {world} ranks x {s.update_freq} batches",
                    "resume with a number of ranks (and --update-freq) that keeps ranks x update_freq the same",
                )
            return BatchChoice(max_tokens, s.update_freq)
        if s.update_freq:
            return BatchChoice(s.max_tokens, s.update_freq)
        assert s.tokens_per_step is not None
        return choose_batch(self.train_data, s.max_tokens, s.tokens_per_step, world, s.seed)

    # --- one step --------------------------------------------------------------------------------

    def _dropout_seed(self, batch_index: int) -> int:
        """Dropout masks are a pure function of (seed, step, batch of the step): resuming needs no RNG
        state, and N ranks draw exactly the masks one process draws for the same global batch."""
        return int(np.random.SeedSequence([self.settings.seed, self.step, batch_index]).generate_state(1)[0])

    def train_step(self, step_batches: StepBatches) -> dict[str, Any]:
        """One optimizer step over this rank's batches; the loss is divided by the whole step's target tokens."""
        self.model.train()
        s = self.settings
        lr = inverse_sqrt_lr(self.step + 1, self.config.d_model, s.warmup, s.lr_scale)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        scaler = self.precision.scaler
        # DDP averages gradients over ranks; scaling by world_size makes that a sum over the step.
        factor = self.ranks.world_size / step_batches.target_tokens
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        last = len(step_batches.batches) - 1
        output = self.model.embedding.tokens.weight  # the pre-softmax projection shares it (sec. 3.4)
        for i, batch in enumerate(step_batches.batches):
            torch.manual_seed(self._dropout_seed(step_batches.first_index + i))
            # Gradients are exchanged once per step, after the last batch, not after every batch.
            sync = self.ddp.no_sync() if self.ddp is not None and i < last else contextlib.nullcontext()
            with sync:
                with self.precision.autocast():
                    hidden = self.forward_model(batch.src, batch.tgt_in, hidden=True)
                    loss, nll = output_loss(hidden, output, self.model.final_logits_bias, batch.tgt_out,
                                            s.label_smoothing, self.config.pad_id, batch.target_tokens)
                scaler.scale(loss * factor).backward()
            loss_sum += loss.detach()
            nll_sum += nll
        skipped = self.precision.step(self.optimizer)  # fp16: skipped when a gradient is inf/nan
        self.data_state = step_batches.stream_state
        if not skipped:
            self.step += 1
        return {
            "loss_sum": loss_sum,
            "nll_sum": nll_sum,
            "target_tokens": step_batches.target_tokens,
            "flops": flops.training_flops(self.config, step_batches.lengths),
            "lr": lr,
            "skipped": skipped,
            "loss_scale": scaler.get_scale() if scaler.is_enabled() else None,  # fp16 has waited for the device already
        }

    def _watch_loss(self, loss_sum: torch.Tensor) -> None:
        """Remember the first step whose loss was not finite, on the device: reading it every step would
        make the host wait for every step. It is read where the host waits anyway (`_check_loss`)."""
        if self._first_bad_step is None:
            self._first_bad_step = torch.zeros((), dtype=torch.long, device=loss_sum.device)
            self._bad_loss = torch.zeros((), dtype=loss_sum.dtype, device=loss_sum.device)
        first = ~torch.isfinite(loss_sum) & (self._first_bad_step == 0)
        self._first_bad_step = torch.where(first, self.step, self._first_bad_step)
        self._bad_loss = torch.where(first, loss_sum, self._bad_loss)

    def _check_loss(self) -> None:
        """Before a log line, a validation or a checkpoint: stop if the loss was not finite since the start."""
        if self._first_bad_step is not None and (step := int(self._first_bad_step)) > 0:
            raise NmtError(f"the loss became {float(self._bad_loss)} at step {step}",
                           "lower --lr-scale, or resume from an earlier checkpoint with another --seed")

    def validate(self) -> dict[str, float]:
        s = self.settings
        values = valid_loss(self.model, self.valid_data, s.max_tokens, self.precision.autocast, self.device, self.ranks)
        if s.valid_bleu:
            bleu = BleuSettings(lines=s.valid_bleu)
            values.update(valid_bleu(self.model, self.sp, self.valid_sources, self.valid_references, bleu,
                                     self.precision.autocast, self.device, self.ranks))
        return values

    def _improved(self, values: dict[str, float]) -> bool:
        """Track the best validation (BLEU if computed, else perplexity); count validations without progress."""
        metric = "valid_bleu" if "valid_bleu" in values else "valid_nll"
        if metric not in values:
            return False
        value = values[metric]
        better = self.best is None or self.best["metric"] != metric or (
            value > self.best["value"] if metric == "valid_bleu" else value < self.best["value"]
        )
        if better:
            self.best = {"metric": metric, "value": value, "step": self.step}
            self.bad_validations = 0
        else:
            self.bad_validations += 1
        return better

    # --- checkpoints -----------------------------------------------------------------------------

    def save_checkpoint(self) -> Path | None:
        """Write checkpoints/<step>/ as a whole: built in a hidden dir, then renamed into place (rank 0).

        Every rank takes part: the ranks' weight fingerprints are compared, and a divergence is an error.
        """
        fingerprints = distributed.all_gather(parameter_fingerprint(self.model)) if self.ranks.distributed else None
        if fingerprints and len(set(fingerprints)) > 1:
            raise NmtError(f"the ranks' weights diverged at step {self.step}", "this is a bug; please report it with the run's config.json")
        if not self.is_main:
            return None
        final = self.run_dir / "checkpoints" / str(self.step)
        try:
            with staged_dir(final, stage_name=f"{STAGE_PREFIX}{self.step}") as stage:
                self._write_checkpoint(stage, fingerprints)
        except BaseException as e:
            previous = [c for c in checkpoint_dirs(self.run_dir) if c != final]
            resume = f"it resumes from {previous[-1]}, which is intact" if previous else "no checkpoint of this run was written yet"
            error = file_system_error(e.__cause__ if isinstance(e, FileSystemError) else e, f"checkpoint {final}", intact=resume)
            if isinstance(e, Exception) and error is not None:
                raise error from e
            raise
        for old in checkpoint_dirs(self.run_dir)[: -self.settings.keep_last]:
            shutil.rmtree(old)
        return final

    def _write_checkpoint(self, tmp: Path, fingerprints: list[str] | None) -> None:
        save_weights(tmp / WEIGHTS_FILE, self.model.state_dict(), {"step": str(self.step)})
        faults.point("checkpoint-half-written", step=self.step)
        info = {"model": self.config.to_dict(), "step": self.step, "world_size": self.ranks.world_size}
        if fingerprints:
            info["rank_fingerprints"] = fingerprints
        atomic_write_json(tmp / CONFIG_FILE, info)
        state = {
            "step": self.step,
            "optimizer": self.optimizer.state_dict(),
            "stream": self.data_state,
            "scaler": self.precision.scaler.state_dict(),
            "best": self.best,
            "bad_validations": self.bad_validations,
            "batches_per_step": self.ranks.world_size * self.update_freq,
            "batch_max_tokens": self.batch.max_tokens,
        }
        with open(tmp / TRAINER_STATE, "wb") as f:  # a Python file: a failed write keeps its OSError (errno)
            torch.save(state, f)

    def save_best(self) -> Path:
        """checkpoints/best/: the weights of the best validation so far (each file replaced atomically)."""
        best = self.run_dir / "checkpoints" / BEST
        save_weights(best / WEIGHTS_FILE, self.model.state_dict(), {"step": str(self.step)})
        atomic_write_json(best / CONFIG_FILE, {"model": self.config.to_dict(), "step": self.step, "best": self.best})
        return best

    # --- the loop --------------------------------------------------------------------------------

    def _describe_batch(self) -> dict[str, Any]:
        s = self.settings
        about = {"update_freq": self.update_freq, "world_size": self.ranks.world_size, "max_tokens": self.batch.max_tokens,
                 "tokens_per_step": s.tokens_per_step}
        if self.mean_batch_tokens:
            about["mean_batch_target_tokens"] = round(self.mean_batch_tokens)
            about["expected_step_target_tokens"] = round(self.mean_batch_tokens * self.update_freq * self.ranks.world_size)
        return about

    def run(self) -> dict[str, Any]:
        s = self.settings
        if self.is_main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            if self.resumed_from is None:
                self.run_config["training"]["resolved_update_freq"] = self.update_freq
                self.run_config["training"]["world_size"] = self.ranks.world_size
                atomic_write_json(self.run_dir / CONFIG_FILE, self.run_config)
                atomic_copy(self.data_dir / SPM_FILE, self.run_dir / SPM_FILE)
            for stale in (self.run_dir / "checkpoints").glob(f"{STAGE_PREFIX}*"):
                shutil.rmtree(stale, ignore_errors=True)  # left by a write that was interrupted
        metrics = MetricsLog(self.run_dir, self.step, enabled=self.is_main)
        pad_length = compiling.bucket_length if s.compile else None  # few shapes, few compiled graphs
        loader = StepLoader(self.stream, self.update_freq, self.ranks.rank, self.ranks.world_size, self.device,
                            pad_length=pad_length)
        if self.batch.lowered_from is not None:
            self.on_event("max_tokens_lowered", {
                "max_tokens": self.batch.max_tokens, "requested": self.batch.lowered_from,
                "world_size": self.ranks.world_size, "tokens_per_step": s.tokens_per_step,
                "step_target_tokens_before": round(self.batch.unlowered_step_tokens or 0),
            })
        self.on_event("start", {
            "step": self.step,
            "max_steps": s.max_steps,
            "parameters": self.model.num_parameters(),
            "device": str(self.device),
            "precision": self.precision.name,
            "compile": s.compile,
            "resumed_from": str(self.resumed_from) if self.resumed_from else None,
            "train_pairs": len(self.train_data),
            **self._describe_batch(),
        })
        try:
            return self._loop(loader, metrics)
        finally:
            loader.close()
            metrics.close()

    def _loop(self, loader: StepLoader, metrics: MetricsLog) -> dict[str, Any]:
        s = self.settings
        window = {"tokens": 0, "flops": 0.0}
        window_loss = torch.zeros(2, dtype=torch.float64, device=self.device)
        window_start = last_save = time.perf_counter()
        last: dict[str, Any] = {}
        stop = False
        started = time.perf_counter()
        out_of_time = False
        while self.step < s.max_steps and not stop and not out_of_time:
            try:
                faults.point("train-step", step=self.step + 1)
                m = self.train_step(next(loader))
            except OUT_OF_MEMORY:
                raise NmtError(
                    f"out of GPU memory at step {self.step + 1} with batches of up to {self.batch.max_tokens:,} tokens",
                    "lower --max-tokens; --tokens-per-step keeps the step's size by accumulating more batches",
                ) from None
            window_loss += torch.stack([m["loss_sum"], m["nll_sum"]]).double()
            window["tokens"] += m["target_tokens"]
            window["flops"] += m["flops"]
            if m["skipped"]:
                self.on_event("overflow", {"step": self.step, "loss_scale": m["loss_scale"]})
                continue
            if self.precision.name != "fp16":  # fp16 skips steps whose gradients overflow instead
                self._watch_loss(m["loss_sum"])
            self.on_event("step", {"step": self.step, "lr": m["lr"]})  # no loss: reading it would wait for the device
            save_due = False
            if (s.max_minutes or s.save_minutes) and (not self.ranks.distributed or self.step % CLOCK_EVERY == 0):
                # Rank 0's clock decides both time limits, shared in one all-reduce, so that every rank
                # stops after the same step and joins the same saves (a save compares weights).
                now = time.perf_counter()
                mine = [float(self.is_main and s.max_minutes > 0 and now - started >= s.max_minutes * 60),
                        float(self.is_main and s.save_minutes > 0 and now - last_save >= s.save_minutes * 60)]
                out_of_time, save_due = (v > 0 for v in distributed.all_reduce_sum(mine, self.device))
            last_step = self.step == s.max_steps or out_of_time
            due = save_due if s.save_minutes else self.step % s.save_every == 0
            if last_step or due or self.step % s.log_every == 0 or self.step % s.valid_every == 0:
                self._check_loss()  # the host waits for the device here anyway
            if self.step % s.log_every == 0 or last_step:
                elapsed = time.perf_counter() - window_start
                loss_total, nll_total = distributed.all_reduce_sum(window_loss.tolist(), self.device)
                nll = nll_total / window["tokens"]
                last = {
                    "step": self.step,
                    "epoch": self.data_state["epoch"],
                    "loss": round(loss_total / window["tokens"], 4),
                    "nll": round(nll, 4),
                    "ppl": round(perplexity(nll), 3),
                    "lr": m["lr"],
                    "target_tokens_per_s": round(window["tokens"] / elapsed, 1),
                }
                if self.peak:
                    last["mfu"] = round(flops.mfu(window["flops"], elapsed, self.peak, self.ranks.world_size), 4)
                if m["loss_scale"] is not None:
                    last["loss_scale"] = m["loss_scale"]
                metrics.write("train", last)
                self.on_event("log", last)
                window = {"tokens": 0, "flops": 0.0}
                window_loss.zero_()
                window_start = time.perf_counter()
            if self.step % s.valid_every == 0 or last_step:
                values = self.validate()
                valid = {"step": self.step, **{k: round(v, 4) for k, v in values.items()}}
                if self._improved(values):
                    valid["best"] = True
                    if self.is_main:
                        self.on_event("best", {"step": self.step, "path": str(self.save_best()), **self.best})
                metrics.write("valid", valid)
                self.on_event("valid", valid)
                last.update(valid)
                if s.patience and self.bad_validations >= s.patience:
                    stop = True
                    best = self.best or {}
                    self.on_event("early_stop", {"step": self.step, "patience": s.patience, "metric": best.get("metric"),
                                                 "value": best.get("value"), "best_step": best.get("step")})
                window_start = time.perf_counter()  # validation time is not training throughput
            if due or stop or last_step:
                path = self.save_checkpoint()
                last_save = time.perf_counter()
                if path is not None:
                    self.on_event("checkpoint", {"step": self.step, "path": str(path)})
        if out_of_time:
            self.on_event("time_limit", {"step": self.step, "minutes": s.max_minutes})
        done = {"step": self.step, "run_dir": str(self.run_dir), "early_stopped": stop, "time_limit_reached": out_of_time,
                **{k: v for k, v in last.items() if k not in ("step", "best")}}
        if self.best:
            done["best"] = self.best
        self.on_event("done", done)
        return done


def gradient_bucket_mb(model: Transformer) -> int:
    """DDP's gradient bucket: about one decoder layer's gradients (base 17 MB, big 65 MB), so that each
    layer's all-reduce starts when its backward is done and overlaps the backward of the layers below."""
    layer = sum(p.numel() * p.element_size() for p in model.decoder.layers[0].parameters())
    return max(1, math.ceil(layer / 2**20))


def train_settings_for(preset: str, **overrides: Any) -> tuple[ModelConfig, TrainSettings]:
    """The preset's model and recipe with `overrides` (None: keep the preset's value) applied and checked."""
    if preset not in PRESETS:
        raise NmtError(f"unknown preset {preset!r}", f"choose one of {', '.join(PRESETS)}")
    known = {f.name for f in fields(TrainSettings)}
    given = {k: v for k, v in overrides.items() if k in known and v is not None}
    if "update_freq" in given and "tokens_per_step" in given:
        raise NmtError("--update-freq and --tokens-per-step both set the batches per step", "pass one of them", exit_code=2)
    if "update_freq" in given:
        given["tokens_per_step"] = None  # an explicit --update-freq replaces the preset's token target
    elif "tokens_per_step" in given:
        given["update_freq"] = None  # and --tokens-per-step the preset's fixed accumulation
    if "save_every" in given and "save_minutes" not in given:
        given["save_minutes"] = 0.0  # --save-every in steps replaces the preset's 10 minutes
    settings = replace(TRAIN_PRESETS[preset], **given)
    for name in ("max_steps", "max_tokens", "warmup", "save_every", "keep_last", "valid_every", "log_every"):
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
    if settings.precision not in precision.PRECISIONS:
        raise NmtError(f"unknown precision {settings.precision!r}", f"choose one of {', '.join(precision.PRECISIONS)}", exit_code=2)
    return PRESETS[preset], settings
