"""Models on disk: a model dir is `config.json` + `model.safetensors` + `sentencepiece.model` (+ `README.md`).

Weights are only ever read from safetensors, never unpickled. Every write goes to a temporary file
in the same directory and is renamed into place, so a crash or a full disk leaves either the old
file or the new one, never half of one; a model dir is written whole beside its place, then moved in.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from nmtcli.errors import NmtError
from nmtcli.files import atomic_copy, atomic_path, atomic_write_json, atomic_write_text, read_json, staged_dir
from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import Transformer, skeleton
from nmtcli.provenance import versions

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CARD_FILE = "README.md"
SHORTLIST_FILE = "shortlist.safetensors"  # a model's lexical shortlist, where it has one (inference/shortlist.py)


def save_weights(path: Path, state: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    state = {name: t.detach().contiguous().cpu() for name, t in state.items()}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp), metadata={"format": "pt", **(metadata or {})})
        _sort_metadata(tmp)


def _sort_metadata(path: Path) -> None:
    """Rewrite the header's metadata in key order, so that the same weights give the same bytes.

    safetensors writes the tensors in a fixed order but the metadata in a hash map's order, which
    changes from process to process. Sorting keeps the header's length, so it is rewritten in place.
    """
    with open(path, "r+b") as f:
        length = int.from_bytes(f.read(8), "little")
        raw = f.read(length)
        header = json.loads(raw)
        if len(header.get("__metadata__") or {}) < 2:
            return
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        # The same entries reordered: the same length, but for the padding safetensors adds at the end.
        if len(text) > length:
            return  # an escaping this JSON writer does differently: keep the file as written
        text = text.ljust(length)
        f.seek(8)
        f.write(text)


# Weights in these files are pickles: loading one can run any code its author wrote. nmt never does.
PICKLED_WEIGHTS = ("pytorch_model.bin", "*.pt", "*.pth", "*.ckpt")
BROKEN_HINT = "re-create the model dir with `nmt average`, or download it again with `nmt pull`"


def load_weights(path: Path, broken_hint: str = BROKEN_HINT, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, on `device` (read from the mapped file straight to it: a GPU's copy
    of a model needs no copy in host memory first); `broken_hint` says what to do when it is truncated or corrupt."""
    path = Path(path)
    check_weights(path, broken_hint)
    try:
        return load_file(str(path), device=str(torch.device(device)))
    except (SafetensorError, OSError, ValueError) as e:
        raise NmtError(f"{path} is not a readable safetensors file: {e}", f"it is truncated or corrupt; {broken_hint}") from None


def check_weights(path: Path, broken_hint: str = BROKEN_HINT) -> None:
    """Refuse a missing or truncated safetensors file by its header alone (no tensor is read)."""
    path = Path(path)
    if not path.is_file():
        pickles = sorted({p.name for pattern in PICKLED_WEIGHTS for p in path.parent.glob(pattern)}) if path.parent.is_dir() else []
        if pickles:
            raise NmtError(
                f"{path.parent} has no {path.name}, only {', '.join(pickles)}: pickled weights, which nmt never loads (they can run code)",
                "for a Hugging Face Marian model run `nmt import marian DIR`; otherwise convert the weights to safetensors",
            )
        raise NmtError(f"{path} does not exist", f"is this a model dir or checkpoint written by nmt? {broken_hint}")
    # The format: an 8-byte little-endian header length, a JSON header giving each tensor's byte
    # range, then the data. A file shorter than the header says is cut short.
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or length > size - 8:
                raise ValueError(f"{size:,} bytes, shorter than its header says")
            header = json.loads(f.read(length))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise NmtError(f"{path} is not a readable safetensors file: {e}", f"it is truncated or corrupt; {broken_hint}") from None
    if 8 + length + end > size:
        raise NmtError(f"{path} is not a readable safetensors file: truncated ({size:,} of {8 + length + end:,} bytes)", broken_hint)


# --- model dirs ----------------------------------------------------------------------------------


def read_model_dir_config(model_dir: Path) -> dict[str, Any]:
    """The parsed `config.json` of a model dir: {"model": {...}, "languages": {...}, "training": {...}, ...}."""
    path = Path(model_dir) / CONFIG_FILE
    hint = BROKEN_HINT
    values = read_json(path, (f"{model_dir} has no {CONFIG_FILE}", "pass a model dir written by `nmt average`"), hint)
    if not isinstance(values, dict) or "model" not in values:  # e.g. a Hugging Face transformers config
        raise NmtError(f"{path} is not an nmt model config (it has no \"model\" section)",
                       "pass a model dir written by `nmt average`; for a Hugging Face Marian model run `nmt import marian DIR`")
    try:
        ModelConfig.from_dict(values["model"])
    except (ValueError, KeyError, TypeError) as e:
        raise NmtError(f"{path} is not a valid nmt model config: {e}", hint) from None
    return values


def load_model(model_dir: Path, device: str | torch.device = "cpu") -> tuple[Transformer, dict[str, Any]]:
    """Build the Transformer of a model dir and load its weights; returns (model in eval mode, config.json)."""
    values = read_model_dir_config(model_dir)
    config = ModelConfig.from_dict(values["model"])
    # Built without memory or initialization (which alone costs a base model half a second of
    # start-up), then given the loaded tensors themselves.
    model = skeleton(config)
    load_state(model, load_weights(Path(model_dir) / WEIGHTS_FILE, device=device), Path(model_dir) / WEIGHTS_FILE, assign=True)
    model.embedding.reset_positions()
    return model.to(device).eval(), values


def load_state(model: Transformer, state: dict[str, torch.Tensor], source: Path, assign: bool = False) -> None:
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    wrong = sorted(k for k in set(expected) & set(state) if expected[k].shape != state[k].shape)
    if missing or unexpected or wrong:
        detail = "; ".join(
            f"{what}: {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
            for what, names in (("missing", missing), ("unexpected", unexpected), ("wrong shape", wrong))
            if names
        )
        raise NmtError(f"{source} does not match its config.json ({detail})", "the model dir is inconsistent; re-create it")
    model.load_state_dict(state, assign=assign)


def model_dir_config(config: ModelConfig, source_lang: str, target_lang: str, **sections: Any) -> dict[str, Any]:
    """The values of a model dir's `config.json`: its format, the model, the languages, then `sections` in the
    order given (nmt's own models: training; imported ones: tokenizer, imported_from, license), then the versions."""
    return {
        "format": "nmt-model",
        "format_version": 1,
        "model": config.to_dict(),
        "languages": {"source": source_lang, "target": target_lang},
        **sections,
        "versions": versions(),
    }


def write_model_dir(
    out_dir: Path,
    state: dict[str, torch.Tensor],
    config_values: dict[str, Any],
    tokenizer_files: dict[str, Path],
    card: str,
) -> None:
    """Write a self-contained model dir (see `staged_dir`). `config.json` goes in last: a dir with one is complete.

    `tokenizer_files` maps the names the model dir gives them to the files copied there (nmt's own
    models: {"sentencepiece.model": ...}; Marian's: source.spm, target.spm, vocab.json).
    """
    ModelConfig.from_dict(config_values["model"])  # refuse to write a config nothing can read back
    meta = {"nmt_config": json.dumps(config_values["model"], sort_keys=True)}
    with staged_dir(out_dir, last=CONFIG_FILE) as stage:
        save_weights(stage / WEIGHTS_FILE, state, meta)
        for name, source in tokenizer_files.items():
            atomic_copy(source, stage / name)
        atomic_write_text(stage / CARD_FILE, card)
        atomic_write_json(stage / CONFIG_FILE, config_values)


# --- averaging (sec. 6.1: the final model averages the last checkpoints) ------------------------


def average_weights(paths: Sequence[Path], broken_hint: str = BROKEN_HINT) -> dict[str, torch.Tensor]:
    """Element-wise mean of the parameters stored in `paths`, accumulated in float64."""
    if not paths:
        raise NmtError("no checkpoints to average", "pass checkpoint dirs or a run dir that has some")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for i, path in enumerate(paths):
        state = load_weights(path, broken_hint)
        if i == 0:
            total = {k: v.to(torch.float64) for k, v in state.items()}
            dtypes = {k: v.dtype for k, v in state.items()}
            continue
        if set(state) != set(total) or any(state[k].shape != total[k].shape for k in total):
            raise NmtError(
                f"{path} has different parameters than {paths[0]}",
                "only checkpoints of the same architecture and vocabulary can be averaged",
            )
        for k, v in state.items():
            total[k] += v.to(torch.float64)
    return {k: (v / len(paths)).to(dtypes[k]) for k, v in total.items()}
