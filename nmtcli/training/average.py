"""Checkpoint averaging (sec. 6.1): the paper's final models average the last 5 (base) or 20 (big) checkpoints.
A run that stops early on validation BLEU (tiny, small) is averaged over the checkpoints up to its best;
a fine-tuning run (`nmt train --init`) takes its best checkpoint alone unless --last says otherwise.

The result is a self-contained model dir: everything `nmt translate` needs and nothing it doesn't.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nmtcli.card import local_card
from nmtcli.checksums import file_sha256
from nmtcli.errors import NmtError
from nmtcli.files import atomic_write_json, atomic_write_text, read_json
from nmtcli.model.checkpoint import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE, average_weights, model_dir_config, write_model_dir
from nmtcli.model.config import ModelConfig
from nmtcli.training.rundir import best_validation, checkpoint_dirs, ending_at, read_run_config, run_vocabulary


AT = ("auto", "best", "last")
DEFAULT_LAST = 5  # sec. 6.1: the base models average the last 5 checkpoints (big: 20)
# A fine-tuning run validates about once an epoch, and on a small set each epoch moves the model a long way
# towards the domain: its checkpoints before the best are less adapted, and averaging them in gives back part
# of what it learned (studies/finetune.py, docs/training.md). The best checkpoint alone is its model.
FINETUNE_LAST = 1
MULTILINGUAL = "mul"  # ISO 639-2 "multiple languages": a multilingual model's config.json source and target, as an import's


def default_last(run_dir: Path) -> int:
    """How many checkpoints `nmt average` takes when --last is not given: a fine-tuning run's best alone
    (FINETUNE_LAST), any other run's DEFAULT_LAST."""
    path = Path(run_dir) / "config.json"
    return FINETUNE_LAST if path.is_file() and read_run_config(run_dir).get("init") else DEFAULT_LAST


def checkpoints_to_average(run_dir: Path, last: int, at: str = "auto") -> tuple[list[Path], str]:
    """The `last` checkpoints of a run to average (its callers default it by `default_last`), and where they end, in words.

    at "last": the newest (sec. 6.1: the paper's runs end at a fixed step). "best": those up to the best
    validation, which a run that stopped early left `patience` validations behind it. "auto": "best" for
    a run that validated BLEU (tiny, small and the students, which stop on it; fine-tuning) and still has that
    checkpoint, else "last".
    """
    found = checkpoint_dirs(run_dir)
    if not found:
        raise NmtError(f"{run_dir} has no complete checkpoint", "train longer, or check the path")
    if at == "last":
        return found[-last:], "the newest"
    best = best_validation(run_dir)
    if at == "best":
        if best is None:
            raise NmtError(f"{run_dir} recorded no validation to average at", "average its newest checkpoints: --at last")
        upto = ending_at(found, best["step"])
        if not upto:
            raise NmtError(f"{run_dir} no longer has checkpoints up to its best validation (step {best['step']:,})",
                           "average its newest checkpoints: --at last")
        return upto[-last:], _up_to(best)
    upto = ending_at(found, best["step"]) if best is not None and best["metric"] == "valid_bleu" else []
    if upto and int(upto[-1].name) == best["step"]:
        return upto[-last:], _up_to(best)
    return found[-last:], "the newest"


def _up_to(best: dict[str, Any]) -> str:
    value = f"BLEU {best['value']:.2f}" if best["metric"] == "valid_bleu" else f"{best['metric'].replace('_', ' ')} {best['value']:.3f}"
    return f"up to the best validation (step {best['step']:,}, {value})"


def _checkpoint_model(checkpoint: Path, broken: str) -> dict[str, Any]:
    values = read_json(checkpoint / CONFIG_FILE, (f"{checkpoint} has no {CONFIG_FILE}", broken), broken)
    if not isinstance(values, dict) or not isinstance(values.get("model"), dict):
        raise NmtError(f"{checkpoint / CONFIG_FILE} is not a checkpoint config (no \"model\" section)", broken)
    return values["model"]


def average_checkpoints(checkpoints: list[Path], out_dir: Path) -> dict[str, Any]:
    """Average `checkpoints` (dirs written by `nmt train`) into the model dir `out_dir`; returns its config."""
    checkpoints = [Path(c) for c in checkpoints]
    for c in checkpoints:
        if not (c / WEIGHTS_FILE).is_file() or not (c / CONFIG_FILE).is_file():
            raise NmtError(f"{c} is not a checkpoint dir (needs {WEIGHTS_FILE} and {CONFIG_FILE})", "pass dirs under RUN_DIR/checkpoints/")
    broken = "leave that checkpoint out: pass the other checkpoint dirs"
    configs = [_checkpoint_model(c, broken) for c in checkpoints]
    for c, cfg in zip(checkpoints, configs):
        if cfg != configs[0]:
            changed = ", ".join(f"{k} {configs[0].get(k)} vs {cfg.get(k)}" for k in sorted(set(cfg) | set(configs[0])) if cfg.get(k) != configs[0].get(k))
            raise NmtError(f"{checkpoints[0]} and {c} have different model configs ({changed})",
                           "only checkpoints of one architecture can be averaged: pass checkpoints of one run")
    # A checkpoint lives in RUN_DIR/checkpoints/STEP: the run dir holds the vocabulary and the recipe.
    runs = [c.resolve().parent.parent for c in checkpoints]
    run_config = read_run_config(runs[-1])
    names = list(run_vocabulary(run_config["data"]))  # sentencepiece.model, or Marian's three files (--vocab-from)
    for r in runs:
        for name in names:
            if not (r / name).is_file():
                raise NmtError(f"{r} has no {name}, so the checkpoints' vocabulary is unknown", "pass checkpoint dirs as `nmt train` wrote them: RUN_DIR/checkpoints/STEP")
    vocab_shas = {r: tuple(file_sha256(r / name) for name in names) for r in runs}
    if len(set(vocab_shas.values())) > 1:
        other = next(r for r in runs if vocab_shas[r] != vocab_shas[runs[0]])
        differing = [name for name, a, b in zip(names, vocab_shas[runs[0]], vocab_shas[other]) if a != b]
        verb = "differs" if len(differing) == 1 else "differ"
        raise NmtError(f"{runs[0]} and {other} have different vocabularies ({', '.join(differing)} {verb})",
                       "their token ids mean different pieces, so their weights cannot be averaged: pass checkpoints of one run")
    config = ModelConfig.from_dict(configs[0])
    state = average_weights([c / WEIGHTS_FILE for c in checkpoints], broken)
    steps = [int(c.name) for c in checkpoints if c.name.isdigit()]
    data = run_config["data"]
    training = {
        "run": runs[-1].name,
        "preset": run_config["training"]["preset"],
        "steps": max(steps) if steps else None,
        "averaged_checkpoints": steps,
        "data": data["name"],
        "data_dir": data["dir"],
        "train_pairs": data["train_pairs"],
        "settings": run_config["training"],
    }
    sections: dict[str, Any] = {"training": training}
    if data.get("tokenizer"):
        sections = {"tokenizer": data["tokenizer"], **sections}
    if run_config.get("init"):  # fine-tuned: the base model, and its license (the weights derive from it)
        training["init"] = run_config["init"]
        if run_config["init"].get("license"):
            sections["license"] = run_config["init"]["license"]
    languages = (data["source_lang"], data["target_lang"])
    if data.get("directions"):  # multilingual: any of its languages into any other; the directions trained are recorded,
        training["directions"] = [f"{d['source']}-{d['target']}" for d in data["directions"]]  # the others are zero-shot
        languages = (MULTILINGUAL, MULTILINGUAL)
    values = model_dir_config(config, *languages, **sections)
    write_model_dir(out_dir, state, values, {name: runs[-1] / name for name in names}, local_card(values))
    return values



def record_search(model_dir: Path, search: dict[str, Any]) -> dict[str, Any]:
    """Put `search` (the calibrated brevity penalty: training/brevity.py) into a model dir's config.json, before its
    versions, and into the card `nmt average` wrote; each file replaced whole. Returns the new config."""
    broken = "average the run again"
    values = read_json(Path(model_dir) / CONFIG_FILE, (f"{model_dir} is not a model dir (no {CONFIG_FILE})", broken), broken)
    versions = values.pop("versions", None)
    values.pop("search", None)
    values = {**values, "search": search, **({"versions": versions} if versions is not None else {})}
    atomic_write_json(Path(model_dir) / CONFIG_FILE, values)  # first: the card never claims what config.json lacks
    if "training" in values:  # the card `nmt average` wrote (others' cards are theirs)
        atomic_write_text(Path(model_dir) / CARD_FILE, local_card(values))
    return values
