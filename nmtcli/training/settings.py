"""Training settings: everything about a run but the model's shape, the presets' recipes (sec. 5, 6.1).

Each setting is declared once, here: its default, its help and its check live with its field
(`setting`). `nmt train` builds one flag from each field (`--batch-tokens` from `batch_tokens`), a
`--config` file and a run dir's config.json use the field names as keys, and `TrainSettings` checks
itself on construction, so a new setting is one edit. The names are docs/architecture.md's (Names);
earlier names still load (`current_names`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from nmtcli.errors import NmtError
from nmtcli.model.config import PRESETS, ModelConfig

PRECISIONS = ("auto", "fp32", "bf16", "bf16-master", "fp16")

# The --help panels of `nmt train` the settings fall in.
SCHEDULE, CHECKPOINTS, HARDWARE = "Batches and schedule", "Checkpoints and validation", "Hardware"

Check = Callable[[Any], "str | None"]  # a value -> what is wrong with it, or None


def setting(default: Any, help: str, panel: str = SCHEDULE, check: Check | None = None,
            parse: Callable[[Any], Any] | None = None, flag_type: type | None = None) -> Any:
    """A TrainSettings field with what `nmt train` needs to make its flag: the help text, its --help panel,
    `check` (what is wrong with a value, or None), and `parse` (the flag's or config file's text -> the
    value, for a `flag_type` other than the field's own)."""
    return field(default=default, metadata={"help": help, "panel": panel, "check": check, "parse": parse, "flag_type": flag_type})


def at_least(low: int) -> Check:
    return lambda v: None if v is None or v >= low else f"must be at least {low}, not {v}"


def positive(v: float | None) -> str | None:
    return None if v is None or (math.isfinite(v) and v > 0) else f"must be a positive number, not {v}"


def one_of(*choices: str) -> Check:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}, not {v!r}"


# A time is a number and a unit: "30s", "10m", "1.5h" (or the words: "10 minutes").
_TIME = re.compile(r"(\d+(?:\.\d+)?)\s*(s|sec|seconds?|m|min|minutes?|h|hours?)")
_MINUTES_PER = {"s": 1 / 60, "m": 1.0, "h": 60.0}


def minutes_of(text: str) -> float | None:
    """A time with its unit in minutes; None when `text` is not one."""
    m = _TIME.fullmatch(str(text).strip().lower())
    return float(m.group(1)) * _MINUTES_PER[m.group(2)[0]] if m else None


def parse_duration(value: str | float) -> float:
    """--max-time: "90s", "5m", "1.5h" or a bare number of minutes -> minutes. A number in a config file is minutes
    as the setting holds them (0: no limit, what a run dir records without one)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    text = str(value).strip().lower()
    minutes = float(text) if re.fullmatch(r"\d+(?:\.\d+)?", text) else minutes_of(text)
    if minutes is not None and minutes > 0:
        return minutes
    raise NmtError(f"--max-time {value!r} is not a duration", "write e.g. 90s, 5m or 2h", exit_code=2)


def parse_save_every(value: str | int) -> int | str:
    """--save-every: "1000" -> 1000 steps; "10m", "10min", "30s" -> that time, kept as written (`save_interval`)."""
    text = str(value).strip().lower()
    if m := re.fullmatch(r"(\d+)\s*(steps?)?", text):
        return int(m.group(1))
    if minutes_of(text) is not None:
        return text
    raise NmtError(f"--save-every {value!r} is neither steps nor minutes", "write e.g. 1000 (steps), 10m (minutes) or 30s (seconds)", exit_code=2)


def _save_every_check(v: int | str) -> str | None:
    if isinstance(v, str):
        return None if (minutes_of(v) or 0) > 0 else f"must be a number of steps or a time such as 10m, not {v!r}"
    return at_least(1)(v)


# Early stopping's minimum improvement: a validation must beat the one that last reset patience by more than this
# many BLEU points (or, validating perplexity only, lower it by more than this many percent) to reset it: about one
# or two words in the 500 valid lines BLEU is computed on, no progress. docs/training.md has the replay that set it.
MIN_DELTA = 0.1


@dataclass(frozen=True)
class TrainSettings:
    """Everything about a run but the model's shape. Defaults come from the preset (TRAIN_PRESETS)."""

    preset: str = "base"  # chosen by `nmt train --preset` (with the model shape), not a flag of its own here
    max_steps: int = setting(100_000, "Optimizer steps (sec. 5.2: base 100k, big 300k). tiny, small and the students count --epochs instead; "
                             "with --max-steps they run exactly that many steps, without BLEU validation or early stopping unless "
                             "--valid-bleu / --patience ask for them.", check=at_least(0))
    epochs: int = setting(0, "Passes over the training data, when --max-steps is not given (tiny, small and the students: 50, a ceiling: early "
                          "stopping on validation BLEU is the real stop). At least twice --warmup steps.", check=at_least(0))
    min_steps: int = setting(0, "With --epochs: never fewer steps than this (a small corpus needs many passes; tiny 4,000), nor than "
                             "twice --warmup.", check=at_least(0))
    max_time: float = setting(0.0, "Also stop after this much training time, e.g. 90s, 5m, 2h (validates and saves a checkpoint "
                              "first). Kept in minutes; 0: no limit.", check=at_least(0), parse=parse_duration, flag_type=str)
    batch_tokens: int = setting(25_000, "Padded tokens per batch per GPU on the longer side (base/big 25,000, small 4,096, tiny "
                                "2,048). Lower it if a GPU runs out of memory.", check=at_least(1))
    tokens_per_step: int | None = setting(25_000, "Target tokens per optimizer step over all GPUs (sec. 5.1: base/big "
                                          "25,000, the paper's batch); gradient accumulation makes up what --batch-tokens x "
                                          "GPUs does not (replaces --update-freq).", check=at_least(1))
    update_freq: int | None = setting(None, "Batches accumulated per GPU per step, set by hand (replaces --tokens-per-step; tiny: 1).",
                                      check=at_least(1))
    warmup: int = setting(4000, "Warmup steps of the learning-rate schedule (sec. 5.3: 4,000; tiny 200).", check=at_least(1))
    lr_scale: float = setting(1.0, "Multiplies the learning-rate schedule (1.0 is the paper's; small 0.716: fairseq's IWSLT peak of "
                              "5e-4).", check=positive)
    lr: float | None = setting(None, "Peak learning rate, reached at the end of warmup, then 1/sqrt(step) decay. Default: the paper's "
                               "d_model^-0.5 x warmup^-0.5; with --init 1.4e-4 x 512 / d_model (d_model^-0.5 x 100000^-0.5 at "
                               "d_model 512, as 1/d_model for other widths).",
                               check=positive)
    label_smoothing: float = setting(0.1, "Label smoothing epsilon (sec. 5.4: 0.1).",
                                     check=lambda v: None if 0 <= v < 1 else f"must be in [0, 1), not {v}")
    adam_beta1: float = setting(0.9, "Adam's beta1 (sec. 5.3: 0.9).", check=lambda v: None if 0 <= v < 1 else f"must be in [0, 1), not {v}")
    adam_beta2: float = setting(0.98, "Adam's beta2 (sec. 5.3: 0.98).", check=lambda v: None if 0 <= v < 1 else f"must be in [0, 1), not {v}")
    adam_eps: float = setting(1e-9, "Adam's epsilon (sec. 5.3: 1e-9).", check=positive)
    seed: int = setting(1, "Seed for weights, data order and dropout.")
    save_every: int | str = setting(1000, "Checkpoint every N steps (e.g. 1000) or a time (e.g. 10m or 30s; base/big: 10m as in the "
                                    "paper; tiny 50 and small 200 steps: five a validation, what `nmt average` takes).", CHECKPOINTS,
                                    check=_save_every_check, parse=parse_save_every, flag_type=str)
    keep_last: int = setting(5, "Checkpoints kept (sec. 6.1: base 5, big 20, what averaging uses); the best one is kept apart.",
                             CHECKPOINTS, check=at_least(1))
    valid_every: int = setting(1000, "Steps between validations (perplexity, and BLEU with --valid-bleu).", CHECKPOINTS, check=at_least(1))
    valid_bleu: int = setting(0, "BLEU on the first N lines of the valid split at each validation, through beam search and sacreBLEU "
                              "as `nmt score` (0: off, -1: all lines; tiny, small and the students 500 when counting --epochs).", CHECKPOINTS,
                              check=at_least(-1))
    patience: int = setting(0, "Stop after this many validations without a better BLEU (or perplexity) (0: never; tiny, small and the students 5 "
                            "when counting --epochs).", CHECKPOINTS, check=at_least(0))
    min_delta: float = setting(MIN_DELTA, "Early stopping's minimum improvement: a validation resets --patience only where "
                               "it beats the one that last did by more than this many BLEU points (or lowers perplexity by "
                               "more than this many percent). Default: 0.1, about one word in 500 valid lines.", CHECKPOINTS,
                               check=at_least(0))
    log_every: int = setting(100, "Steps between log lines.", CHECKPOINTS, check=at_least(1))
    device: str = setting("auto", "auto (each rank's GPU, else CPU), cpu, cuda or cuda:N.", HARDWARE)
    precision: str = setting("auto", "auto (bf16-master on a GPU that has bf16, bf16 with several GPUs or --compile, else fp32), fp32, "
                             "bf16 (autocast: fp32 weights, bf16 products), bf16-master (bf16 weights trained with fp32 master weights "
                             "in the optimizer: no cast per use), or fp16 (with a dynamic loss scaler).", HARDWARE, check=one_of(*PRECISIONS))
    compile: bool = setting(False, "torch.compile the model (with shape classes the whole forward, one graph per class, all compiled "
                            "before the first step; the compiled code is cached in the run dir).", HARDWARE)
    shape_classes: bool | None = setting(None, "Pad batches to a few shapes (15 lengths, rows filled to --batch-tokens): a GPU plans "
                                         "each new shape once. Default: on a GPU, off on a CPU (padding costs a CPU in proportion). "
                                         "A resumed run keeps its own.", HARDWARE)
    # the step replayed from CUDA graphs (training/graphs.py): one GPU, shape classes, not fp16; None: where measured
    # to pay (graphs.by_default)
    cuda_graphs: bool | None = setting(None, "Replay each step from CUDA graphs (one per batch shape, one for Adam) instead of "
                                       "launching its kernels one by one from Python. One GPU, batches in shape classes, and not fp16; "
                                       "a capture that fails warns once and training goes on without them. Default: on where measured "
                                       "to pay (one GPU, shape classes, --precision bf16-master, the default there, without --compile; "
                                       "docs/training.md), off elsewhere.", HARDWARE)
    peak_tflops: float | None = setting(None, "The GPU's peak TFLOP/s at this precision, for MFU in the log where nmt does not know "
                                        "the GPU.", HARDWARE, check=positive)

    def __post_init__(self) -> None:
        for f in fields(self):
            check = f.metadata.get("check")
            problem = check(getattr(self, f.name)) if check else None
            if problem:
                raise NmtError(f"{flag_of(f.name)} {problem}", "see `nmt train --help`", exit_code=2)
        if self.max_steps < 1 and self.epochs < 1:
            raise NmtError(f"--max-steps must be at least 1, not {self.max_steps}", "pass a positive number, or --epochs N", exit_code=2)
        if (self.update_freq is None) == (self.tokens_per_step is None):
            raise NmtError("--update-freq and --tokens-per-step both set the batches per step" if self.update_freq else
                           "neither --update-freq nor --tokens-per-step is set", "pass one of them", exit_code=2)
        if self.cuda_graphs and self.precision == "fp16":  # its loss scaler decides on the host whether a step counts
            raise NmtError("--cuda-graphs cannot replay fp16 steps (the loss scaler skips steps from the host)",
                           "use --precision bf16-master or bf16, or leave out --cuda-graphs", exit_code=2)

    def save_interval(self) -> tuple[int | None, float | None]:
        """--save-every as (steps, None) or (None, minutes)."""
        if isinstance(self.save_every, str):
            return None, minutes_of(self.save_every)
        return self.save_every, None


def flag_of(name: str) -> str:
    """The `nmt train` flag of a setting: `batch_tokens` -> `--batch-tokens`."""
    return "--" + name.replace("_", "-")


def flag_settings() -> list[Any]:
    """The settings that are `nmt train` flags (every field with a help text), in declaration order."""
    return [f for f in fields(TrainSettings) if f.metadata.get("help")]


# Earlier versions' names of settings: a --config file or run dir written with them still loads (docs/architecture.md, Names).
RENAMED = {"max_tokens": "batch_tokens", "max_minutes": "max_time"}


def current_names(values: dict[str, Any], on_rename: Callable[[str, str], None] | None = None) -> dict[str, Any]:
    """`values` (a config file's or run dir's "training" section) in today's names; `on_rename(old, new)` hears of each old one.
    The one setting that was two keys, save_every in steps beside save_minutes, becomes save_every "10m"."""
    values = dict(values)
    for old, new in RENAMED.items():
        if old in values:
            if on_rename:
                on_rename(old, new)
            values.setdefault(new, values.pop(old))
            values.pop(old, None)
    if "save_minutes" in values:
        minutes = values.pop("save_minutes")
        if on_rename:
            on_rename("save_minutes", "save_every")
        if minutes:
            values["save_every"] = f"{minutes:g}m"
    return values


# fairseq's IWSLT14 recipe for transformer_iwslt_de_en: inverse-sqrt with a peak of 5e-4 after 4,000 warmup steps,
# batches of 4,096 tokens on one GPU. Equation 3 with d_model 512 peaks at 512^-0.5 * 4000^-0.5 = 7.0e-4.
FAIRSEQ_IWSLT_LR_SCALE = 5e-4 / (512 ** -0.5 * 4000 ** -0.5)

# tiny, small and the students train for a number of epochs, not steps: what a corpus needs grows with it. The epochs are a
# ceiling; the stop is early stopping on validation BLEU. A --max-steps given instead runs to its end, with no BLEU
# validation unless asked for (with_overrides). A small corpus needs more passes than a large one, so tiny's
# ceiling is never under TINY_MIN_STEPS; docs/training.md ("Epochs") has the measurements that set both numbers.
TINY_MIN_STEPS = 4_000
EPOCHS = 50
# They checkpoint `keep_last` times a validation: the checkpoints `nmt average` takes, those up to the best
# validation, span one validation interval, as the paper's last 5 span the last 50 minutes of base's 12 hours.
TRAIN_PRESETS: dict[str, TrainSettings] = {
    # tiny: a short warmup and a small batch for a CPU.
    "tiny": TrainSettings(preset="tiny", max_steps=0, epochs=EPOCHS, batch_tokens=2048, tokens_per_step=None, update_freq=1,
                          min_steps=TINY_MIN_STEPS, warmup=200, save_every=50, keep_last=5, valid_every=250, valid_bleu=500, patience=5, log_every=25),
    # small: fairseq's transformer_iwslt_de_en recipe (one GPU, 4,096-token batches, lr 5e-4), for 100k-1M pairs.
    "small": TrainSettings(preset="small", max_steps=0, epochs=EPOCHS, batch_tokens=4096, tokens_per_step=None, update_freq=1,
                           lr_scale=FAIRSEQ_IWSLT_LR_SCALE, save_every=200, keep_last=5, valid_every=1000, valid_bleu=500,
                           patience=5),
    "base": TrainSettings(preset="base", save_every="10m"),  # sec. 6.1: "checkpoints written at 10-minute intervals"
    "big": TrainSettings(preset="big", max_steps=300_000, keep_last=20, save_every="10m"),
}
# The students (model/config.py) learn from a teacher's translations of a corpus: as many pairs as the corpus, clean,
# so small's recipe: up to 50 epochs of 4,096-token batches, equation 3 x 0.716 (student-base's peak is fairseq's
# 5e-4, student-tiny's 7.1e-4: d_model^-0.5), and early stopping on BLEU of 500 validation lines (patience 5), which
# stops a student where its BLEU stops rising rather than at a step count chosen for one size of data. No floor of
# steps as tiny's: a distilled corpus is the teacher's whole training data, not a few thousand pairs.
for _student in ("student-tiny", "student-base"):
    TRAIN_PRESETS[_student] = replace(TRAIN_PRESETS["small"], preset=_student)

# Settings that fix what a run is; resuming with a different value would silently train something else.
FIXED_ON_RESUME = ("preset", "batch_tokens", "tokens_per_step", "update_freq", "seed", "label_smoothing", "warmup", "lr_scale", "lr")


# The preset `nmt train` takes when none is given, by the training pairs (the presets' help: tiny for a CPU and up to
# ~50k pairs, small for fairseq's IWSLT-sized 100k-1M, base for WMT-sized data on GPUs; on a CPU, never base).
TINY_PAIRS, SMALL_PAIRS = 50_000, 1_000_000


def preset_for(pairs: int | None, gpu: bool) -> tuple[str, str]:
    """The preset for `pairs` training pairs on a GPU or a CPU, and why, in words for the line `nmt train` says."""
    where = "a GPU" if gpu else "a CPU"
    if pairs is None:
        return "base", "the data's manifest does not count its training pairs: the paper's base"
    if pairs <= TINY_PAIRS:
        return "tiny", f"{pairs:,} training pairs on {where} (tiny: up to ~{TINY_PAIRS // 1000}k pairs)"
    if pairs <= SMALL_PAIRS or not gpu:
        size = f"{TINY_PAIRS // 1000}k-{SMALL_PAIRS // 1_000_000}M pairs" if pairs <= SMALL_PAIRS else "the most a CPU trains in hours"
        return "small", f"{pairs:,} training pairs on {where} (small: {size})"
    return "base", f"{pairs:,} training pairs on {where} (base: WMT-sized data, the paper's)"


def train_settings_for(preset: str, **overrides: Any) -> tuple[ModelConfig, TrainSettings]:
    """The preset's model and recipe with `overrides` (None: keep the preset's value) applied (with_overrides)."""
    if preset not in PRESETS:
        raise NmtError(f"unknown preset {preset!r}", f"choose one of {', '.join(PRESETS)}", exit_code=2)
    return PRESETS[preset], with_overrides(TRAIN_PRESETS[preset], **overrides)


def with_overrides(recipe: TrainSettings, **overrides: Any) -> TrainSettings:
    """`recipe` with `overrides` (None: keep the recipe's value; earlier names accepted) applied.

    An explicit update_freq replaces the recipe's token target and tokens_per_step its fixed accumulation
    (both given: the settings refuse). An explicit max_steps replaces the epochs of a recipe that counts
    them (and, unless given too, its BLEU validation and early stopping: a step budget chosen by hand runs
    to its end); explicit epochs replace its max_steps.
    """
    known = {f.name for f in fields(TrainSettings)}
    given = {k: v for k, v in current_names(overrides).items() if k in known and v is not None}
    if "update_freq" in given and "tokens_per_step" not in given:
        given["tokens_per_step"] = None
    elif "tokens_per_step" in given and "update_freq" not in given:
        given["update_freq"] = None
    if "lr" in given and "lr_scale" not in given:  # a peak chosen by hand is the peak (small's 0.716 made --lr 1e-3 7.2e-4)
        given["lr_scale"] = 1.0
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
