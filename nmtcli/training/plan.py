"""A run's plan: what a run does, worked out once from its settings, its data, its hardware and the checkpoint it
resumes, before anything is built. `Trainer` builds from the plan and decides nothing after it.

Where each decision is made, once: the model's vocabulary and special ids (the data's), the precision (`--precision`
auto: precision.choose), batches in shape classes or not (the GPU default; a resumed run keeps its own), the batch
and the batches per step (batch_size.batch_for_run: from --tokens-per-step, or --update-freq), the steps of a run
counted in epochs (settings.steps_for_epochs, on this data's batches), and how the model is compiled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from nmtcli.data.batching import ParallelData
from nmtcli.model.config import ModelConfig
from nmtcli.training import precision
from nmtcli.training.batch_size import BatchChoice, batch_for_run, batches_per_epoch
from nmtcli.training.finetune import InitModel
from nmtcli.training.settings import TrainSettings, steps_for_epochs, steps_per_epoch


@dataclass(frozen=True)
class RunPlan:
    settings: TrainSettings  # as given, with max_steps counted from --epochs on this data where it counts epochs
    config: ModelConfig  # the model as trained: the data's vocabulary and special ids (language tags on multilingual data)
    device: torch.device
    precision: str  # what --precision came to: fp32, bf16, bf16-master or fp16
    shape_classes: bool  # batches padded to shape classes (data/batching.py)
    batch: BatchChoice  # batches of at most batch.batch_tokens, batch.update_freq of them per rank a step
    world_size: int
    steps_per_epoch: int | None  # with --epochs: what max_steps was counted from
    compile: str  # "": eager; "layers": each kind of layer, sizes symbolic; "classes": the whole forward, one graph a class

    @property
    def update_freq(self) -> int:
        return self.batch.update_freq


def trained_config(model_config: ModelConfig, manifest: dict[str, Any], init: InitModel | None = None) -> ModelConfig:
    """The model a run trains: `model_config` (with --init, that model's own) in the data's vocabulary and special ids.

    Data prepared with --vocab-from is in that model's ids, special ids included (Marian: EOS 0); multilingual data
    (data/multilingual.py) puts the target's tag first, forced when translating."""
    config = (init.config if init is not None else model_config).replace(vocab_size=manifest["vocab_size"],
                                                                         **manifest.get("special_ids", {}))
    return config.replace(language_tags=True) if manifest.get("directions") else config


def plan_run(settings: TrainSettings, config: ModelConfig, train_data: ParallelData, device: torch.device, world_size: int,
             previous: dict[str, Any], run_dir: Path, shape_classes: bool | None = None) -> RunPlan:
    """The plan of a new run (`previous` empty) or of one resumed from a checkpoint's trainer state `previous`;
    `shape_classes` overrides the setting (the tests' way to make a CPU run batch as a GPU's does)."""
    label = precision.choose(settings.precision, device, world_size, settings.compile)
    # Shape classes by default on a GPU, where every new batch shape costs a plan (cuDNN, compile); a CPU pays for
    # padding in proportion. A resumed run keeps its checkpoint's way: its data position counts those batches.
    if previous:
        shape_classes = bool(previous["stream"].get("classes", 0))
    elif shape_classes is None:
        shape_classes = settings.shape_classes if settings.shape_classes is not None else device.type == "cuda"
    batch = batch_for_run(settings, world_size, train_data, previous, run_dir, shape_classes)
    per_epoch = None
    if settings.epochs and not settings.max_steps:  # steps from the data: epochs x steps per epoch, never under the floor
        per_step = world_size * batch.update_freq
        batches = batches_per_epoch(train_data, batch.batch_tokens, settings.seed, shape_classes)
        per_epoch = steps_per_epoch(batches, per_step)
        settings = replace(settings, max_steps=steps_for_epochs(settings, batches, per_step))
    compile = ("classes" if shape_classes else "layers") if settings.compile else ""
    return RunPlan(settings, config, device, label, shape_classes, batch, world_size, per_epoch, compile)
