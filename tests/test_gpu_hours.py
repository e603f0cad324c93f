"""benchmarks/gpu_hours.py: the GPU-hours table of docs/reproducing-the-paper.md comes from flops.py, not from hand."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from nmtcli.model.config import PRESETS
from nmtcli.model.transformer import count_parameters

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "gpu_hours.py"


@pytest.fixture(scope="module")
def gpu_hours():
    spec = importlib.util.spec_from_file_location("gpu_hours", SCRIPT)
    module = sys.modules["gpu_hours"] = importlib.util.module_from_spec(spec)  # dataclasses look it up there
    spec.loader.exec_module(module)
    return module


def test_a_step_costs_six_flops_per_parameter_and_token_plus_attention(gpu_hours):
    for preset, steps in (("base", 100_000), ("big", 300_000)):
        e = gpu_hours.estimate(preset, gpu_hours.assumed_lengths(25))
        # Each weight meets each of its side's 25,000 tokens: 6 x N x 25,000 (biases and norms, uncounted, are ~0.1%).
        weights = count_parameters(PRESETS[preset].replace(vocab_size=37_000))
        assert e.steps == steps
        assert 0.995 * 6 * weights * 25_000 < e.flops_per_step < 1.01 * 6 * weights * 25_000
        assert 0 < e.attention_share < 0.01
    assert gpu_hours.estimate("base", gpu_hours.assumed_lengths(25)).gpu_hours(1e15, 0.5) == pytest.approx(
        gpu_hours.estimate("base", gpu_hours.assumed_lengths(25)).total_flops / 5e14 / 3600)


def test_the_script_prints_the_table_and_the_papers_utilization(gpu_hours, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(SCRIPT)])  # `python benchmarks/gpu_hours.py`, run in-process
    gpu_hours.main()
    out = capsys.readouterr().out
    assert out.startswith("Estimated, not measured:")
    assert "| base | 100,000 | 9.52e+17 | H100 SXM (989 TFLOP/s) |" in out
    assert "| big | 300,000 | 9.67e+18 | A100 (312 TFLOP/s) |" in out
    assert "is 29% MFU (fp32)" in out and "is 42% MFU (fp32)" in out  # what the paper's P100 runs reached
