"""`nmt train --init MODEL`: training that starts from a model's config and weights (fine-tuning).

The model dir (nmt's own, or one `nmt import marian` wrote from OPUS-MT) gives everything that
fixes the network: its shape, activation, positions, logits bias and special ids come from its
`config.json`, its weights are step 0. The data must be in its token ids, i.e. prepared with
`nmt prepare --vocab-from MODEL`: the tokenizer files' sha256 recorded in the data's manifest must be
the model's. Continued training of an nmt model on new data is the same thing.

The fine-tuning recipe (`FINETUNE`), where the paper's recipe (sec. 5.3) is for training from scratch:

- Peak learning rate `default_lr(d_model)` = 1.4e-4 x 512 / d_model: at d_model 512 the rate eq. 3 has
  reached at the end of a base run (d_model^-0.5 x 100,000^-0.5, step 100k), where continued training
  picks up (Luong & Manning 2015; Freitag & Al-Onaizan 2016), not the peak of a run from scratch (7e-4
  for base), which throws away much of what the model knows within a few hundred steps. Other widths
  scale it as 1/d_model, not eq. 3's d_model^-0.5: Adam's best rate for a Transformer's hidden weights
  falls in proportion to the width (Yang et al. 2022, "Tensor Programs V", muP), and eq. 3's rule left
  a narrow model four times below the rate that adapts it (studies/finetune.py, docs/training.md).
  It is then decayed as 1/sqrt(step) like eq. 3.
- Warmup of 100 steps: the optimizer starts with no moment estimates, and Adam's adaptive rate is
  unreliable for about 2 / (1 - beta2) = 100 steps (Ma & Yarats 2021, with the paper's beta2 0.98).
- Batches of ~4,096 target tokens; validation and a checkpoint about once an epoch (every 50 to 1,000
  steps), BLEU on the first 500 valid lines, and early stopping after 5 validations without a better
  BLEU: fine-tuning overfits a small set quickly, and the best checkpoint is kept in checkpoints/best/
  (and is what `nmt average` gives of a fine-tuning run: average.FINETUNE_LAST).
- How long is counted in epochs (`EPOCHS`, a ceiling: early stopping is the real stop), and never fewer
  than `MIN_STEPS`: a set of a few hundred pairs makes a step or two an epoch, and a fixed step count
  is too long for one size of set and too short for another.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nmtcli.checksums import file_sha256
from nmtcli.data.vocabulary import ModelVocabulary, data_vocabulary, read_vocabulary
from nmtcli.errors import NmtError
from nmtcli.model.checkpoint import WEIGHTS_FILE, check_weights, load_weights, read_model_dir_config
from nmtcli.model.config import ModelConfig
from nmtcli.training.settings import TrainSettings, train_settings_for, with_overrides

FINETUNE = TrainSettings(
    preset="finetune", max_steps=100_000, batch_tokens=4096, tokens_per_step=4096, warmup=100, keep_last=5,
    valid_bleu=500, patience=5, log_every=50,
)
EPOCHS = 100  # the ceiling, where neither --max-steps nor --epochs is given
MIN_STEPS = 2_000  # ... and never fewer steps: a few hundred pairs make one or two steps an epoch (measured: docs/training.md)
RATE_STEP = 100_000  # at d_model 512 the default peak rate is eq. 3's at this step: where the paper's base run ends
RATE_WIDTH = 512  # ... and scales as 1/d_model from there


def default_lr(d_model: int) -> float:
    """The fine-tuning peak learning rate: 512^-0.5 x 100,000^-0.5 (1.4e-4) at d_model 512, as 1/d_model
    for other widths (see the module docstring)."""
    return RATE_WIDTH**-0.5 * RATE_STEP**-0.5 * RATE_WIDTH / d_model


@dataclass(frozen=True)
class InitModel:
    """The model `--init` names: its config.json, shape, vocabulary and where it came from."""

    model_dir: Path
    values: dict[str, Any]  # its config.json
    config: ModelConfig
    vocabulary: ModelVocabulary
    name: str  # for the default run dir: the model dir's or Hub repo's name
    origin: dict[str, Any]  # {"model": Hub id or path, "revision": commit or None}

    def describe(self) -> dict[str, Any]:
        """What the run dir and the model card record of the base model."""
        described = {**self.origin, "weights_sha256": file_sha256(self.model_dir / WEIGHTS_FILE),
                     "vocabulary": dict(self.vocabulary.files)}
        for key in ("imported_from", "license"):
            if key in self.values:
                described[key] = self.values[key]
        return described

    def weights(self) -> dict[str, Any]:
        return load_weights(self.model_dir / WEIGHTS_FILE)


def read_init(model_dir: Path, origin: dict[str, Any] | None = None) -> InitModel:
    """The model dir `model_dir` as a starting point; one clear error where it cannot be one."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise NmtError(f"--init {model_dir} is not a directory", "pass a model dir or a Hub id (OWNER/NAME)")
    values = read_model_dir_config(model_dir)
    hint = "--init needs a model's weights: pass a model dir written by `nmt average`, `nmt import marian` or `nmt pull`"
    if not (model_dir / WEIGHTS_FILE).is_file():
        raise NmtError(f"{model_dir} has no {WEIGHTS_FILE}", hint)
    check_weights(model_dir / WEIGHTS_FILE, hint)
    origin = {"model": str(model_dir.resolve()), "revision": None, **(origin or {})}
    name = str(origin["model"]).rstrip("/").split("/")[-1]
    return InitModel(model_dir, values, ModelConfig.from_dict(values["model"]), read_vocabulary(model_dir, origin), name, origin)


def prepare_command(init: InitModel, manifest: dict[str, Any]) -> str:
    """The `nmt prepare` that encodes the data of `manifest` with the model's vocabulary."""
    model = init.origin["model"]
    if manifest.get("recipe"):
        return f"nmt prepare {manifest['name']} --vocab-from {model}"
    inputs = manifest.get("inputs", {})
    flags = []
    for split in ("train", "valid", "test"):
        files = inputs.get(split)
        if isinstance(files, list) and files:
            flags.append(f"--{split} {Path(files[0]).with_suffix('')}")
    return f"nmt prepare --vocab-from {model} {' '.join(flags) or '--train PREFIX --valid PREFIX'} -o DIR"


def check_data(init: InitModel, manifest: dict[str, Any], data_dir: Path) -> None:
    """The data must be in the model's direction and in its token ids."""
    v = init.vocabulary
    model = init.origin["model"]
    data = (manifest["source_lang"], manifest["target_lang"])
    if "" not in (v.source_lang, v.target_lang) and (v.source_lang, v.target_lang) != ("src", "tgt") and (v.source_lang, v.target_lang) != data:
        raise NmtError(f"{model} translates {v.source_lang}->{v.target_lang}, but {data_dir} holds {data[0]}->{data[1]} data",
                       f"prepare {v.source_lang}->{v.target_lang} data with `nmt prepare --vocab-from {model} -s {v.source_lang} -t {v.target_lang} ...`")
    if data_vocabulary(manifest) != v.files or manifest["vocab_size"] != v.size:
        raise NmtError(f"{data_dir} was not prepared with the vocabulary of {model}",
                       f"encode the data with it: `{prepare_command(init, manifest)}`, then train on that dir")


def finetune_settings(init: InitModel, manifest: dict[str, Any], preset: str | None, values: dict[str, Any]) -> TrainSettings:
    """The recipe of `nmt train --init`: FINETUNE sized to the data, or with --preset (which must be the
    model's shape) that preset's recipe; the flags' `values` override either."""
    if preset is not None:
        shape = ("d_model", "d_ff", "heads", "layers", "decoder_layers")
        theirs, recipe = train_settings_for(preset, **values)
        if any(getattr(theirs, k) != getattr(init.config, k) for k in shape):
            there = ", ".join(f"{k} {getattr(init.config, k)}" for k in shape)
            raise NmtError(f"--preset {preset} contradicts --init {init.origin['model']} ({there})",
                           "leave out --preset: the model's config.json fixes its shape, and fine-tuning has its own recipe", exit_code=2)
        return recipe
    recipe = with_overrides(FINETUNE, **values)
    if recipe.lr is None:
        recipe = replace(recipe, lr=default_lr(init.config.d_model))
    tokens = manifest["splits"]["train"]["target_tokens"] + manifest["splits"]["train"]["pairs"]  # + EOS
    per_step = recipe.tokens_per_step or recipe.batch_tokens * (recipe.update_freq or 1)
    epoch = max(1, math.ceil(tokens / per_step))
    sized: dict[str, Any] = {}
    if values.get("max_steps") is None and values.get("epochs") is None:  # the trainer counts the steps of EPOCHS
        sized.update(max_steps=0, epochs=EPOCHS, min_steps=MIN_STEPS)
    if values.get("valid_every") is None:
        sized["valid_every"] = min(max(epoch, 50), 1000)
    if values.get("save_every") is None:
        sized["save_every"] = sized.get("valid_every", recipe.valid_every)
    return replace(recipe, **sized)
