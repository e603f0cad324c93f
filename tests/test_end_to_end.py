"""The whole pipeline through the installed `nmt` command, with the workspace defaults (no paths).

prepare -> train (tiny, CPU) -> average -> translate -> score on the synthetic corpus of corpus.py,
against the same pipeline stopped after one training step (an untrained model). The prepare, train
and average steps are the session's `workspace` (conftest.py), which the other tests share; this test
checks what each of them said, then translates and scores in a copy of the workspace.
"""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import nmt_in_process, run_nmt

# Measured on a 2-core CPU (see the CHANGELOG): 300 steps reach BLEU 96.5 (400: 97.5) on the held-out test split,
# the 1-step model scores ~0. The thresholds leave wide room for run-to-run noise on other CPUs.
TRAINED_BLEU_MIN = 60.0
UNTRAINED_BLEU_MAX = 10.0


def bleu_of(stdout: str) -> float:
    return next(s["score"] for s in json.loads(stdout)["scores"] if s["name"] == "BLEU")


@pytest.mark.slow
def test_pipeline_learns_the_synthetic_translation_rule(workspace, untrained_model, tmp_path):
    workspace.average()  # prepare, train and average, once per session (conftest.py)
    assert "writing prepared data to data/en-de" in workspace.steps["prepare"].stderr
    assert (workspace.root / "data" / "en-de" / "manifest.json").is_file()
    assert "using data dir data/en-de" in workspace.steps["train"].stderr
    assert (workspace.root / "runs" / "tiny-en-de" / "checkpoints" / "300").is_dir()
    assert "using run dir runs/tiny-en-de" in workspace.steps["average"].stderr
    assert "averaging 3 checkpoint(s), the newest: 100, 200, 300" in workspace.steps["average"].stderr

    # In a copy: `nmt score` records its scores in the model dir, and the workspace is shared.
    for name in ("data", "models"):
        shutil.copytree(workspace.root / name, tmp_path / name)
    run = lambda *args, **kw: run_nmt(*args, cwd=tmp_path, **kw)  # noqa: E731
    in_process = lambda *args, **kw: nmt_in_process(*args, cwd=tmp_path, **kw)  # noqa: E731

    source = (workspace.root / "corpus" / "test.en").read_text()
    translated = run("translate", input=source)
    assert "using model models/tiny-en-de" in translated.stderr
    assert translated.stdout.count("\n") == source.count("\n") == 200
    (tmp_path / "hyp.de").write_text(translated.stdout)

    scored = run("score", "hyp.de", "--ref", str(workspace.root / "corpus" / "test.de"), "--json")
    trained_bleu = bleu_of(scored.stdout)
    # Bare `nmt score` translates the prepared test split with the newest model: the same number.
    assert bleu_of(in_process("score", "--json").stdout) == pytest.approx(trained_bleu)

    # int8 on the CPU (--precision int8) keeps the trained model's BLEU.
    int8 = in_process("translate", "--precision", "int8", input=source).stdout
    assert int8.count("\n") == 200
    (tmp_path / "hyp-int8.de").write_text(int8)
    int8_bleu = bleu_of(in_process("score", "hyp-int8.de", "--ref", str(workspace.root / "corpus" / "test.de"), "--json").stdout)
    same = sum(a == b for a, b in zip(int8.splitlines(), translated.stdout.splitlines()))

    # The untrained baseline: the same pipeline stopped after one step (built once per session, in-process).
    shutil.copytree(untrained_model, tmp_path / "untrained")
    untrained_bleu = bleu_of(in_process("score", "-m", str(tmp_path / "untrained"), "--json").stdout)

    print(f"BLEU trained {trained_bleu:.1f} (int8 {int8_bleu:.1f}, {same}/200 lines identical), untrained {untrained_bleu:.1f}")
    assert untrained_bleu < UNTRAINED_BLEU_MAX
    assert trained_bleu > TRAINED_BLEU_MIN
    assert int8_bleu >= trained_bleu - 1.0 and same >= 180
