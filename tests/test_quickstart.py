"""`nmt quickstart`: the whole pipeline on the bundled demo corpus learns to translate in a fixed number of steps.

Learning is asserted by steps (`--max-steps`), not by minutes, so that the result is the same on a slow
machine as on a fast one; how `--minutes` divides its budget is checked without training.
"""

from __future__ import annotations

import json
import re
import shlex
from types import SimpleNamespace

import pytest
from conftest import nmt_in_process, run_nmt

HELD_OUT = 100  # test lines both models translate for the comparison
# Pre-norm with a warmup of 100 leaves the plateau of the first steps (the model predicting frequent
# words: chrF 11-12, BLEU 0.4-1.5 around steps 150-250) by step ~280 on this corpus.
STEPS = 400


def _chrf_and_bleu(workspace, model: str) -> dict[str, float]:
    sources = (workspace / "data" / "demo" / "test.en").read_text(encoding="utf-8").splitlines()[:HELD_OUT]
    references = workspace / "references.de"
    references.write_text("\n".join((workspace / "data" / "demo" / "test.de").read_text(encoding="utf-8").splitlines()[:HELD_OUT]) + "\n")
    hypotheses = nmt_in_process("translate", "-m", model, "--device", "cpu", input="\n".join(sources) + "\n", cwd=workspace).stdout
    assert hypotheses.count("\n") == HELD_OUT
    scored = json.loads(nmt_in_process("score", "-", "--ref", str(references), "--json", input=hypotheses, cwd=workspace).stdout)
    return {s["name"]: s["score"] for s in scored["scores"]}


def _shown(stderr: str) -> list[str]:
    """The command lines quickstart showed before running each step."""
    return re.findall(r"^\$ (nmt .*)$", stderr, flags=re.MULTILINE)


@pytest.mark.slow
def test_quickstart_trains_for_its_steps_a_model_that_beats_an_untrained_one(tmp_path):
    workspace = tmp_path / "workspace"
    result = run_nmt("quickstart", "--max-steps", str(STEPS), "--device", "cpu", "--dir", str(workspace))
    shown = _shown(result.stderr)
    assert [shlex.split(c)[1] for c in shown] == ["prepare", "train", "average", "score", "translate"]
    train = shlex.split(next(c for c in shown if c.startswith("nmt train")))
    assert train[train.index("--max-steps") + 1] == str(STEPS) and "--max-time" not in train
    assert json.loads((workspace / "runs" / "tiny-demo" / "checkpoints" / str(STEPS) / "config.json").read_text())["step"] == STEPS

    # The run's scores were recorded by its `nmt score` step, and a table showed held-out sentences.
    recorded = json.loads((workspace / "models" / "tiny-demo" / "scores.json").read_text())["demo/test"]
    assert set(recorded) == {"BLEU", "chrF2"}
    assert "held-out en->de sentences" in result.stderr

    # Each command shown is the real one: re-running the average step by hand gives the same model.
    average = shlex.split(next(c for c in shown if c.startswith("nmt average")))
    weights = workspace / "models" / "tiny-demo" / "model.safetensors"
    before = weights.read_bytes()
    nmt_in_process(*average[1:], cwd=workspace)
    assert weights.read_bytes() == before

    # An untrained model of the same shape and vocabulary: one optimizer step on the same data.
    nmt_in_process("train", "--data", "data/demo", "--preset", "tiny", "--max-steps", "1", "--device", "cpu", "-o", "runs/untrained", cwd=workspace)
    nmt_in_process("average", "runs/untrained", "-o", "models/untrained", cwd=workspace)
    trained, untrained = _chrf_and_bleu(workspace, "models/tiny-demo"), _chrf_and_bleu(workspace, "models/untrained")
    print(f"quickstart --max-steps {STEPS}: trained {trained}, untrained {untrained}")
    assert trained["chrF2"] > untrained["chrF2"] + 10, (trained, untrained)
    assert trained["BLEU"] > untrained["BLEU"] + 2, (trained, untrained)


def test_quickstart_gives_training_what_its_minutes_leave(tmp_path, monkeypatch):
    """--minutes: the train step gets the budget less the time spent so far and the reserve for the rest,
    checkpoints every 1/20 of it, and stops by time; the other steps are stubbed (no training here)."""
    from nmtcli.cli import average, prepare, quickstart, score, train

    calls = {}
    for module in (prepare, train, average, score):
        monkeypatch.setattr(module, "command", lambda _name=module.NAME, **kw: calls.setdefault(_name, kw))
    monkeypatch.setattr(quickstart, "_show_examples", lambda *args: None)
    clock = iter([1000.0, 1010.0, 1100.0])  # started; 10 s preparing; done
    monkeypatch.setattr(quickstart, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    result = nmt_in_process("quickstart", "--minutes", "1.5", "--device", "cpu", "--dir", str(tmp_path / "w"))
    train_line = shlex.split(next(c for c in _shown(result.stderr) if c.startswith("nmt train")))
    train_s = 90 - 10 - quickstart.RESERVE_S  # what the budget leaves training
    assert train_line[train_line.index("--max-time") + 1] == calls["train"]["max_time"] == f"{round(train_s)}s"
    assert train_line[train_line.index("--save-every") + 1] == calls["train"]["save_every"] == f"{round(train_s / quickstart.SAVES)}s"
    assert calls["train"]["max_steps"] == quickstart.MAX_STEPS and calls["train"]["restart"] is True
    assert f"train the tiny preset for {quickstart._duration(train_s)}," in result.stderr and "done in 1 min 40 s" in result.stderr

    # --max-steps alone: no time limit; checkpoints every 1/20 of the steps; the same command shown as run.
    calls.clear()
    clock = iter([1000.0, 1010.0, 1100.0])
    result = nmt_in_process("quickstart", "--max-steps", "400", "--device", "cpu", "--dir", str(tmp_path / "w"))
    train_line = shlex.split(next(c for c in _shown(result.stderr) if c.startswith("nmt train")))
    assert "--max-time" not in train_line and calls["train"]["max_time"] is None
    assert train_line[train_line.index("--max-steps") + 1] == "400" and calls["train"]["max_steps"] == 400
    assert train_line[train_line.index("--save-every") + 1] == calls["train"]["save_every"] == "20"
    assert "larger --max-steps" in result.stderr
