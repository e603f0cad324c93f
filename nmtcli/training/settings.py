"""Training settings: everything about a run but the model's shape, the presets' recipes (sec. 5, 6.1).

The checks that name `nmt train` flags are the command's (`cli/train.py: settings_from_flags`); this
module only merges a preset with what was given.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from nmtcli.model.config import PRESETS, ModelConfig


# Early stopping's minimum improvement: a validation must beat the one that last reset patience by more than
# this many BLEU points (or, validating perplexity only, lower it by more than this many percent) to reset it.
# 0.1 BLEU is about one or two words in the 500 valid lines BLEU is computed on: a gain that small is not
# progress. Replayed on six fine-tuning curves (benchmarks/finetune.py) it stopped no run sooner; 0.2 already cut
# two runs that were still climbing by 0.1-0.3 a validation, 1.5 and 3.8 BLEU short of where they went.
MIN_DELTA = 0.1


@dataclass(frozen=True)
class TrainSettings:
    """Everything about a run but the model's shape. Defaults come from the preset (TRAIN_PRESETS)."""

    preset: str = "base"
    max_steps: int = 100_000  # sec. 5.2: base 100k steps, big 300k; 0: from `epochs`
    epochs: int = 0  # > 0 with max_steps 0: max_steps is this many passes over the training pairs (steps_for_epochs)
    min_steps: int = 0  # with epochs: never fewer steps than this (a small corpus needs many passes), nor than 2 x warmup
    max_minutes: float = 0.0  # > 0: also stop after this much training time in this invocation
    max_tokens: int = 25_000  # padded tokens per batch (per GPU) on the longer side
    tokens_per_step: int | None = 25_000  # sec. 5.1: ~25,000 target tokens per step; None: use update_freq
    update_freq: int | None = None  # batches per rank per step; None: chosen from tokens_per_step
    warmup: int = 4000  # sec. 5.3
    lr_scale: float = 1.0
    lr: float | None = None  # the peak learning rate (at the end of warmup); None: the paper's d_model^-0.5 * warmup^-0.5
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
    min_delta: float = MIN_DELTA  # an improvement that resets patience: > this many BLEU points (or % of perplexity)
    log_every: int = 100
    seed: int = 1
    device: str = "auto"
    precision: str = "auto"  # auto: bf16 on a GPU that has it, fp32 otherwise; or fp32, bf16, fp16
    compile: bool = False  # torch.compile the model
    shape_classes: bool | None = None  # batches padded to shape classes (data/batching.py); None: on a GPU only
    # the step replayed from CUDA graphs (training/graphs.py): one GPU, shape classes, not fp16; None: where measured
    # to pay (graphs.wanted: one GPU, shape classes, bf16-master, no --compile)
    cuda_graphs: bool | None = None
    peak_tflops: float | None = None  # the device's peak, for MFU where nmt does not know it


# fairseq's IWSLT14 recipe for transformer_iwslt_de_en: inverse-sqrt with a peak of 5e-4 after 4,000 warmup steps,
# batches of 4,096 tokens on one GPU. Equation 3 with d_model 512 peaks at 512^-0.5 * 4000^-0.5 = 7.0e-4.
FAIRSEQ_IWSLT_LR_SCALE = 5e-4 / (512 ** -0.5 * 4000 ** -0.5)

# tiny and small train for a number of epochs, not steps: what a corpus needs grows with it. The
# epochs are a ceiling; the stop is early stopping on validation BLEU (the first `valid_bleu` lines,
# `patience` validations without a better score). A --max-steps given instead runs to its end, with
# no BLEU validation unless --valid-bleu / --patience ask for it (train_settings_for).
# A small corpus needs more passes than a large one: tiny on the demo corpus (3,500 pairs, 15-29 steps
# an epoch) was still improving after 50 epochs and levelled off after about 100 (1,500 steps at 8,000
# pieces, 2,750-3,250 at 1,000), so tiny's ceiling is never under TINY_MIN_STEPS; a corpus of over 80
# steps an epoch (some 10-20k pairs in tiny's 2,048-token batches) gets its 50 epochs.
TINY_MIN_STEPS = 4_000
# They checkpoint `keep_last` times a validation: the checkpoints `nmt average` takes, those up to the
# best validation (which the run keeps), span one validation interval, as the paper's last 5 span the
# last 50 minutes of base's 12 hours, not the run's first fifth.
EPOCHS = 50
TRAIN_PRESETS: dict[str, TrainSettings] = {
    # tiny: a short warmup and a small batch for a CPU (the demo corpus: 23 steps an epoch, ~1,150 steps).
    "tiny": TrainSettings(preset="tiny", max_steps=0, epochs=EPOCHS, max_tokens=2048, tokens_per_step=None, update_freq=1,
                          min_steps=TINY_MIN_STEPS, warmup=200, save_every=50, keep_last=5, valid_every=250, valid_bleu=500, patience=5, log_every=25),
    # small: fairseq's transformer_iwslt_de_en recipe (one GPU, 4,096-token batches, lr 5e-4), for 100k-1M pairs.
    "small": TrainSettings(preset="small", max_steps=0, epochs=EPOCHS, max_tokens=4096, tokens_per_step=None, update_freq=1,
                           lr_scale=FAIRSEQ_IWSLT_LR_SCALE, save_every=200, keep_last=5, valid_every=1000, valid_bleu=500,
                           patience=5),
    "base": TrainSettings(preset="base", save_minutes=10.0),  # sec. 6.1: "checkpoints written at 10-minute intervals"
    "big": TrainSettings(preset="big", max_steps=300_000, keep_last=20, save_minutes=10.0),
}

# Settings that fix what a run is; resuming with a different value would silently train something else.
FIXED_ON_RESUME = ("preset", "max_tokens", "tokens_per_step", "update_freq", "seed", "label_smoothing", "warmup", "lr_scale", "lr")


def train_settings_for(preset: str, **overrides: Any) -> tuple[ModelConfig, TrainSettings]:
    """The preset's model and recipe with `overrides` (None: keep the preset's value) applied.

    An explicit update_freq replaces the preset's token target, tokens_per_step the preset's fixed
    accumulation, and save_every in steps the preset's checkpoints every 10 minutes. An explicit
    max_steps replaces the epochs of a preset that counts them (and, unless given too, its BLEU
    validation and early stopping: a step budget chosen by hand runs to its end); explicit epochs
    replace its max_steps.
    """
    return PRESETS[preset], with_overrides(TRAIN_PRESETS[preset], **overrides)


def with_overrides(recipe: TrainSettings, **overrides: Any) -> TrainSettings:
    """`recipe` with `overrides` (None: keep the recipe's value) applied, as train_settings_for says."""
    known = {f.name for f in fields(TrainSettings)}
    given = {k: v for k, v in overrides.items() if k in known and v is not None}
    if "update_freq" in given and "tokens_per_step" in given:
        raise ValueError("update_freq and tokens_per_step both set the batches per step; pass one of them")
    if "update_freq" in given:
        given["tokens_per_step"] = None
    elif "tokens_per_step" in given:
        given["update_freq"] = None
    if "save_every" in given and "save_minutes" not in given:
        given["save_minutes"] = 0.0
    if recipe.epochs and "max_steps" in given:  # a step budget chosen by hand runs to its end
        given["epochs"] = 0
        given.setdefault("valid_bleu", 0)
        given.setdefault("patience", 0)
    elif "epochs" in given:  # passes chosen by hand: that many, with no floor but the warmup's
        given["max_steps"] = 0
        given.setdefault("min_steps", 0)
    return replace(recipe, **given)


def steps_per_epoch(batches_per_epoch: int, batches_per_step: int) -> int:
    """Optimizer steps in one pass over the data (a part-filled last step counts)."""
    return -(-batches_per_epoch // batches_per_step)


def step_floor(settings: TrainSettings) -> int:
    """The fewest steps an epoch-counted run takes: the preset's `min_steps`, and twice the warmup (a
    tiny corpus still gets a learning rate past its peak)."""
    return max(settings.min_steps, 2 * settings.warmup)


def steps_for_epochs(settings: TrainSettings, batches_per_epoch: int, batches_per_step: int) -> int:
    """max_steps for `settings.epochs` passes over the data, and never fewer than `step_floor`."""
    return max(settings.epochs * steps_per_epoch(batches_per_epoch, batches_per_step), step_floor(settings))
