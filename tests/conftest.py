"""Shared fixtures: a prepared synthetic corpus and a briefly trained tiny model, made once per session."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from corpus import write_corpus  # noqa: E402

NMT = str(Path(sys.executable).with_name("nmt"))


def run_nmt(*args: str, cwd: Path | None = None, input: str | bytes | None = None, env: dict | None = None, check: bool = True):
    """Run the installed `nmt` command; returns the CompletedProcess (text mode unless input is bytes)."""
    text = not isinstance(input, bytes)
    result = subprocess.run(
        [NMT, *args], cwd=cwd, input=input, capture_output=True, text=text,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"nmt {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> dict[str, Path]:
    return write_corpus(tmp_path_factory.mktemp("corpus"), {"train": 3000, "valid": 100, "test": 100})


@pytest.fixture(scope="session")
def prepared(corpus, tmp_path_factory) -> Path:
    from nmtcli.data.prepare import PrepareSettings, prepare_files

    out = tmp_path_factory.mktemp("data") / "en-de"
    prepare_files(out, corpus["train"], corpus["valid"], corpus["test"], PrepareSettings("en", "de", vocab_size=1000), "en-de")
    return out


@pytest.fixture(scope="session")
def trained_model(prepared, tmp_path_factory) -> Path:
    """A tiny model trained for a few hundred CPU steps and averaged into a model dir."""
    from nmtcli.training.average import average_checkpoints, last_checkpoints
    from nmtcli.training.trainer import Trainer, train_settings_for

    root = tmp_path_factory.mktemp("trained")
    config, settings = train_settings_for("tiny", max_steps=200, save_every=100, valid_every=100, log_every=50, device="cpu")
    Trainer(root / "run", prepared, config, settings).run()
    average_checkpoints(last_checkpoints(root / "run", 2), root / "model")
    return root / "model"
