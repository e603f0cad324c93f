"""Models on disk: a model dir is `config.json` + `model.safetensors` + `sentencepiece.model` (+ `README.md`).

Weights are only ever read from safetensors, never unpickled. Every write goes to a temporary file
in the same directory and is renamed into place, so a crash leaves either the old file or the new
one, never half of one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from nmtcli.errors import NmtError
from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import Transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
SPM_FILE = "sentencepiece.model"
CARD_FILE = "README.md"


# --- atomic writes -------------------------------------------------------------------------------

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; the final file gets the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def atomic_copy(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def save_weights(path: Path, state: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    state = {name: t.detach().contiguous().cpu() for name, t in state.items()}
    with atomic_path(path) as tmp:
        save_file(state, str(tmp), metadata={"format": "pt", **(metadata or {})})


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    path = Path(path)
    if not path.is_file():
        raise NmtError(f"{path} does not exist", "is this a model dir or checkpoint written by nmt?")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as e:
        raise NmtError(f"{path} is not a readable safetensors file: {e}", "the file is truncated or corrupt; re-create or re-download it") from None


# --- model dirs ----------------------------------------------------------------------------------


def read_json(path: Path, missing: tuple[str, str], corrupt_hint: str) -> Any:
    """A JSON file nmt wrote. `missing` is the (message, hint) of the error when it does not exist."""
    path = Path(path)
    if not path.is_file():
        raise NmtError(*missing)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise NmtError(f"{path} is corrupt: {e}", corrupt_hint) from None


def read_model_dir_config(model_dir: Path) -> dict[str, Any]:
    """The parsed `config.json` of a model dir: {"model": {...}, "languages": {...}, "training": {...}, ...}."""
    path = Path(model_dir) / CONFIG_FILE
    hint = "re-create the model dir with `nmt average`"
    values = read_json(path, (f"{model_dir} has no {CONFIG_FILE}", "pass a model dir written by `nmt average`"), hint)
    try:
        ModelConfig.from_dict(values["model"])
    except (ValueError, KeyError, TypeError) as e:
        raise NmtError(f"{path} is not a valid nmt model config: {e}", hint) from None
    return values


def load_model(model_dir: Path, device: str | torch.device = "cpu") -> tuple[Transformer, dict[str, Any]]:
    """Build the Transformer of a model dir and load its weights; returns (model in eval mode, config.json)."""
    values = read_model_dir_config(model_dir)
    config = ModelConfig.from_dict(values["model"])
    model = Transformer(config)
    load_state(model, load_weights(Path(model_dir) / WEIGHTS_FILE), Path(model_dir) / WEIGHTS_FILE)
    return model.to(device).eval(), values


def load_state(model: Transformer, state: dict[str, torch.Tensor], source: Path) -> None:
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
    model.load_state_dict(state)


def write_model_dir(
    out_dir: Path,
    state: dict[str, torch.Tensor],
    config_values: dict[str, Any],
    spm_model: Path,
    card: str,
) -> None:
    """Write a self-contained model dir. `config.json` is written last: a dir with one is complete."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ModelConfig.from_dict(config_values["model"])  # refuse to write a config nothing can read back
    meta = {"nmt_config": json.dumps(config_values["model"], sort_keys=True)}
    save_weights(out_dir / WEIGHTS_FILE, state, meta)
    atomic_copy(spm_model, out_dir / SPM_FILE)
    atomic_write_text(out_dir / CARD_FILE, card)
    atomic_write_json(out_dir / CONFIG_FILE, config_values)


# --- averaging (sec. 6.1: the final model averages the last checkpoints) ------------------------


def average_weights(paths: Sequence[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the parameters stored in `paths`, accumulated in float64."""
    if not paths:
        raise NmtError("no checkpoints to average", "pass checkpoint dirs or a run dir that has some")
    total: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    for i, path in enumerate(paths):
        state = load_weights(path)
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
