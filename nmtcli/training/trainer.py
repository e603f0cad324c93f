"""The training loop of sec. 5: Adam, warmup schedule, label smoothing, token-budget batches, checkpoints.

A run dir holds:
  config.json                the resolved model, training settings and data it was started with
  sentencepiece.model        copied from the data dir, so the run is self-contained
  checkpoints/<step>/        model.safetensors + config.json + trainer.pt (optimizer, RNG, data position)
  metrics.jsonl              one JSON object per logged step and per validation
Running again on the same dir resumes from the newest complete checkpoint; the order of batches,
the dropout masks and the optimizer continue exactly where they stopped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import torch

from nmtcli.data.batching import BatchStream, ParallelData, make_batches
from nmtcli.data.prepare import read_manifest, versions
from nmtcli.errors import NmtError
from nmtcli.model.checkpoint import (
    CONFIG_FILE,
    SPM_FILE,
    WEIGHTS_FILE,
    atomic_copy,
    atomic_write_json,
    atomic_write_text,
    load_state,
    load_weights,
    save_weights,
)
from nmtcli.model.config import PRESETS, ModelConfig
from nmtcli.model.transformer import Transformer
from nmtcli.training.loss import label_smoothed_loss, perplexity
from nmtcli.training.schedule import inverse_sqrt_lr

TRAINER_STATE = "trainer.pt"
METRICS = "metrics.jsonl"

# Events: on_event(kind, values) with kind in {"start", "step", "log", "valid", "checkpoint", "done"}.
OnEvent = Callable[[str, dict[str, Any]], None]


@dataclass(frozen=True)
class TrainSettings:
    """Everything about a run but the model's shape. Defaults come from the preset (TRAIN_PRESETS)."""

    preset: str = "base"
    max_steps: int = 100_000  # sec. 5.2: base 100k steps, big 300k
    max_tokens: int = 25_000  # padded tokens per batch on the longer side (sec. 5.1: ~25k per step)
    update_freq: int = 1  # batches accumulated into one optimizer step
    warmup: int = 4000  # sec. 5.3
    lr_scale: float = 1.0
    label_smoothing: float = 0.1  # sec. 5.4
    adam_beta1: float = 0.9  # sec. 5.3
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    save_every: int = 1000  # steps between checkpoints
    keep_last: int = 5  # sec. 6.1: base averages the last 5 checkpoints, big the last 20
    valid_every: int = 1000
    log_every: int = 100
    seed: int = 1
    device: str = "auto"

    def for_preset(self, **overrides: Any) -> TrainSettings:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


TRAIN_PRESETS: dict[str, TrainSettings] = {
    # tiny: a short warmup and a small batch so that ~1000 CPU steps learn a toy task.
    "tiny": TrainSettings(preset="tiny", max_steps=1000, max_tokens=2048, warmup=200, lr_scale=1.0,
                          save_every=250, keep_last=5, valid_every=250, log_every=25),
    "base": TrainSettings(preset="base"),
    "big": TrainSettings(preset="big", max_steps=300_000, keep_last=20),
}

# Settings that fix what a run is; resuming with a different value would silently train something else.
FIXED_ON_RESUME = ("preset", "max_tokens", "update_freq", "seed", "label_smoothing", "warmup", "lr_scale")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise NmtError("--device cuda was asked for but no CUDA GPU is available", "use --device cpu")
    if name not in ("cpu",) and not name.startswith("cuda"):
        raise NmtError(f"unknown device {name!r}", "use cpu, cuda or cuda:N")
    return torch.device(name)


def checkpoint_dirs(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = Path(run_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.name.isdigit() and (p / TRAINER_STATE).is_file() and (p / WEIGHTS_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name))


def read_run_config(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / CONFIG_FILE
    if not path.is_file():
        raise NmtError(f"{run_dir} is not a run dir (no {CONFIG_FILE})", "pass a dir written by `nmt train`")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise NmtError(f"{path} is corrupt: {e}", "start the run again with --restart") from None


class Trainer:
    def __init__(
        self,
        run_dir: Path,
        data_dir: Path,
        model_config: ModelConfig,
        settings: TrainSettings,
        restart: bool = False,
        on_event: OnEvent | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.data_dir = Path(data_dir)
        self.settings = settings
        self.on_event = on_event or (lambda kind, values: None)
        self.device = resolve_device(settings.device)
        manifest = read_manifest(data_dir)
        self.src_lang, self.tgt_lang = manifest["source_lang"], manifest["target_lang"]
        self.config = model_config.replace(vocab_size=manifest["vocab_size"])
        self.run_config = {
            "format": "nmt-run",
            "format_version": 1,
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
        if restart and self.run_dir.exists():
            shutil.rmtree(self.run_dir)
        resume = checkpoint_dirs(self.run_dir)
        if resume:
            self._check_resumable(read_run_config(self.run_dir))

        torch.manual_seed(settings.seed)  # the same seed gives the same initial weights
        self.model = Transformer(self.config).to(self.device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(),
            lr=0.0,
            betas=(settings.adam_beta1, settings.adam_beta2),
            eps=settings.adam_eps,
            fused=self.device.type == "cuda",
        )
        self.train_data = ParallelData(data_dir, "train", self.src_lang, self.tgt_lang, self.config.vocab_size)
        self.valid_data = ParallelData(data_dir, "valid", self.src_lang, self.tgt_lang, self.config.vocab_size)
        self.stream = BatchStream(self.train_data, settings.max_tokens, settings.seed)
        self.step = 0
        self.resumed_from: Path | None = None
        if resume:
            self._load_checkpoint(resume[-1])
        self.autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16)
            if self.device.type == "cuda" and torch.cuda.is_bf16_supported()
            else contextlib.nullcontext()
        )

    # --- resume ----------------------------------------------------------------------------------

    def _check_resumable(self, previous: dict[str, Any]) -> None:
        hint = f"train into a new dir with -o, or pass --restart to discard {self.run_dir}"
        if previous.get("model") != self.config.to_dict():
            changed = sorted(k for k, v in self.config.to_dict().items() if previous.get("model", {}).get(k) != v)
            raise NmtError(f"{self.run_dir} was trained with a different model shape ({', '.join(changed)})", hint)
        if previous["data"]["sentencepiece_sha256"] != self.run_config["data"]["sentencepiece_sha256"]:
            raise NmtError(f"{self.run_dir} was trained on other data ({previous['data']['dir']})", hint)
        for key in FIXED_ON_RESUME:
            if previous["training"].get(key) != getattr(self.settings, key):
                raise NmtError(
                    f"{self.run_dir} was trained with {key}={previous['training'].get(key)}, not {getattr(self.settings, key)}",
                    hint,
                )

    def _load_checkpoint(self, path: Path) -> None:
        load_state(self.model, load_weights(path / WEIGHTS_FILE), path / WEIGHTS_FILE)
        # weights_only: a run dir is data, never code; this refuses anything but tensors and primitives.
        state = torch.load(path / TRAINER_STATE, map_location="cpu", weights_only=True)
        self.optimizer.load_state_dict(state["optimizer"])
        self.stream.load_state_dict(state["stream"])
        self.step = int(state["step"])
        torch.set_rng_state(state["rng"]["torch"])
        if self.device.type == "cuda" and "cuda" in state["rng"]:
            torch.cuda.set_rng_state(state["rng"]["cuda"], self.device)
        self.resumed_from = path
        self._truncate_metrics(self.step)

    def _truncate_metrics(self, step: int) -> None:
        """Drop metrics logged after the checkpoint we resume from; they will be logged again."""
        path = self.run_dir / METRICS
        if path.is_file():
            kept = [line for line in path.read_text().splitlines() if line and json.loads(line).get("step", 0) <= step]
            atomic_write_text(path, "".join(line + "\n" for line in kept))

    # --- one step --------------------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        """One optimizer step over `update_freq` batches; loss normalized by the step's target tokens."""
        self.model.train()
        batches = [next(self.stream).to(self.device) for _ in range(self.settings.update_freq)]
        tokens = sum(b.target_tokens for b in batches)
        lr = inverse_sqrt_lr(self.step + 1, self.config.d_model, self.settings.warmup, self.settings.lr_scale)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        total_loss = total_nll = 0.0
        for batch in batches:
            with self.autocast:
                logits = self.model(batch.src, batch.tgt_in)
            loss, nll = label_smoothed_loss(logits, batch.tgt_out, self.settings.label_smoothing, self.config.pad_id)
            (loss / tokens).backward()
            total_loss += loss.item()
            total_nll += nll.item()
        self.optimizer.step()
        self.step += 1
        return {"loss": total_loss / tokens, "nll": total_nll / tokens, "lr": lr, "target_tokens": tokens}

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Perplexity of the reference translations of the valid split (label smoothing off)."""
        if len(self.valid_data) == 0:
            return {}
        self.model.eval()
        total_nll, tokens = 0.0, 0
        for indices in make_batches(self.valid_data.src.lengths, self.valid_data.tgt.lengths, self.settings.max_tokens, 0, 0):
            batch = self.valid_data.batch(indices).to(self.device)
            with self.autocast:
                logits = self.model(batch.src, batch.tgt_in)
            _, nll = label_smoothed_loss(logits, batch.tgt_out, 0.0, self.config.pad_id)
            total_nll += nll.item()
            tokens += batch.target_tokens
        nll = total_nll / max(tokens, 1)
        return {"valid_nll": nll, "valid_ppl": perplexity(nll)}

    # --- checkpoints -----------------------------------------------------------------------------

    def save_checkpoint(self) -> Path:
        """Write checkpoints/<step>/ as a whole: built in a hidden dir, then renamed into place."""
        root = self.run_dir / "checkpoints"
        final = root / str(self.step)
        tmp = root / f".tmp-{self.step}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_weights(tmp / WEIGHTS_FILE, self.model.state_dict(), {"step": str(self.step)})
        atomic_write_json(tmp / CONFIG_FILE, {"model": self.config.to_dict(), "step": self.step})
        rng = {"torch": torch.get_rng_state()}
        if self.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(self.device)
        state = {"step": self.step, "optimizer": self.optimizer.state_dict(), "stream": self.stream.state_dict(), "rng": rng}
        torch.save(state, tmp / TRAINER_STATE)
        for name in os.listdir(tmp):
            with open(tmp / name, "rb") as f:
                os.fsync(f.fileno())
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
        for old in checkpoint_dirs(self.run_dir)[: -self.settings.keep_last]:
            shutil.rmtree(old)
        return final

    # --- the loop --------------------------------------------------------------------------------

    def _log(self, values: dict[str, Any]) -> None:
        with open(self.run_dir / METRICS, "a", encoding="utf-8") as f:
            f.write(json.dumps(values) + "\n")

    def run(self) -> dict[str, Any]:
        s = self.settings
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.resumed_from is None:
            atomic_write_json(self.run_dir / CONFIG_FILE, self.run_config)
            atomic_copy(self.data_dir / SPM_FILE, self.run_dir / SPM_FILE)
        for stale in (self.run_dir / "checkpoints").glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a write that was interrupted
        self.on_event("start", {
            "step": self.step,
            "max_steps": s.max_steps,
            "parameters": self.model.num_parameters(),
            "device": str(self.device),
            "resumed_from": str(self.resumed_from) if self.resumed_from else None,
            "train_pairs": len(self.train_data),
        })
        window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "steps": 0}
        window_start = time.perf_counter()
        last: dict[str, Any] = {}
        while self.step < s.max_steps:
            m = self.train_step()
            window["loss"] += m["loss"] * m["target_tokens"]
            window["nll"] += m["nll"] * m["target_tokens"]
            window["tokens"] += m["target_tokens"]
            window["steps"] += 1
            self.on_event("step", {"step": self.step, "loss": m["loss"], "lr": m["lr"]})
            if self.step % s.log_every == 0 or self.step == s.max_steps:
                elapsed = time.perf_counter() - window_start
                nll = window["nll"] / window["tokens"]
                last = {
                    "step": self.step,
                    "epoch": self.stream.epoch,
                    "loss": round(window["loss"] / window["tokens"], 4),
                    "nll": round(nll, 4),
                    "ppl": round(perplexity(nll), 3),
                    "lr": m["lr"],
                    "target_tokens_per_s": round(window["tokens"] / elapsed, 1),
                }
                self._log(last)
                self.on_event("log", last)
                window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "steps": 0}
                window_start = time.perf_counter()
            if self.step % s.valid_every == 0 or self.step == s.max_steps:
                valid = {"step": self.step, **{k: round(v, 4) for k, v in self.validate().items()}}
                self._log(valid)
                self.on_event("valid", valid)
                last.update(valid)
            if self.step % s.save_every == 0 or self.step == s.max_steps:
                path = self.save_checkpoint()
                self.on_event("checkpoint", {"step": self.step, "path": str(path)})
        done = {"step": self.step, "run_dir": str(self.run_dir), **{k: v for k, v in last.items() if k != "step"}}
        self.on_event("done", done)
        return done


def train_settings_for(preset: str, **overrides: Any) -> tuple[ModelConfig, TrainSettings]:
    if preset not in PRESETS:
        raise NmtError(f"unknown preset {preset!r}", f"choose one of {', '.join(PRESETS)}")
    known = {f.name for f in fields(TrainSettings)}
    settings = TRAIN_PRESETS[preset].for_preset(**{k: v for k, v in overrides.items() if k in known})
    for name in ("max_steps", "max_tokens", "update_freq", "warmup", "save_every", "keep_last", "valid_every", "log_every"):
        if getattr(settings, name) < 1:
            raise NmtError(f"--{name.replace('_', '-')} must be at least 1, not {getattr(settings, name)}", "pass a positive number", exit_code=2)
    if not math.isfinite(settings.lr_scale) or settings.lr_scale <= 0:
        raise NmtError("--lr-scale must be a positive number", "1.0 is the paper's schedule", exit_code=2)
    return PRESETS[preset], settings
