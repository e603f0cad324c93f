"""Shared fixtures: a prepared synthetic corpus and a briefly trained tiny model, made once per session."""

from __future__ import annotations

import json
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
    from nmtcli.training.settings import train_settings_for
    from nmtcli.training.trainer import Trainer

    root = tmp_path_factory.mktemp("trained")
    config, settings = train_settings_for("tiny", max_steps=200, save_every=100, valid_every=100, log_every=50, device="cpu")
    Trainer(root / "run", prepared, config, settings).run()
    average_checkpoints(last_checkpoints(root / "run", 2), root / "model")
    return root / "model"


@pytest.fixture(scope="session")
def marian_dir(tmp_path_factory) -> Path:
    """A small swish MarianMTModel saved by transformers' save_pretrained, like an OPUS-MT repo (needs transformers)."""
    pytest.importorskip("transformers")
    from marian_fixture import write_marian_model

    return write_marian_model(tmp_path_factory.mktemp("marian") / "opus-mt-en-de")


@pytest.fixture(scope="session")
def random_model(prepared, tmp_path_factory) -> Path:
    """An untrained tiny model dir (seeded) with the prepared vocabulary and a scores.json: made in a second."""
    import torch

    from nmtcli.model.checkpoint import write_model_dir
    from nmtcli.model.config import PRESETS
    from nmtcli.model.transformer import Transformer
    from nmtcli.provenance import versions

    torch.manual_seed(0)
    config = PRESETS["tiny"].replace(vocab_size=1000, d_model=64, d_ff=128, heads=2, max_positions=256)
    values = {"format": "nmt-model", "format_version": 1, "model": config.to_dict(),
              "languages": {"source": "en", "target": "de"}, "versions": versions()}
    out = tmp_path_factory.mktemp("random") / "tiny-en-de"
    write_model_dir(out, Transformer(config).state_dict(), values, {"sentencepiece.model": prepared / "sentencepiece.model"}, "# tiny-en-de\n")
    scores = {"en-de/test": {"BLEU": {"score": 12.3, "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"},
                             "chrF2": {"score": 40.1, "signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"}}}
    (out / "scores.json").write_text(json.dumps(scores))
    return out
