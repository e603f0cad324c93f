"""Training (sec. 5): the schedule, the loss, learning, checkpoints and exact resume."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from nmtcli.errors import NmtError
from nmtcli.model.checkpoint import load_weights
from nmtcli.training.loss import label_smoothed_loss
from nmtcli.training.schedule import inverse_sqrt_lr
from nmtcli.training.trainer import Trainer, checkpoint_dirs, train_settings_for


def test_schedule_is_equation_3():
    d, warmup = 512, 4000
    for step in (1, 100, 3999, 4000, 4001, 100_000):
        expected = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert inverse_sqrt_lr(step, d, warmup) == pytest.approx(expected)
    # Linear warmup, peak at step == warmup, then decay.
    assert inverse_sqrt_lr(2000, d, warmup) == pytest.approx(inverse_sqrt_lr(4000, d, warmup) / 2)
    assert inverse_sqrt_lr(16000, d, warmup) == pytest.approx(inverse_sqrt_lr(4000, d, warmup) / 2)


def test_label_smoothed_loss_matches_pytorch_and_ignores_padding():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    target = torch.randint(4, 11, (3, 5))
    target[0, 3:] = 0
    target[2, 1:] = 0
    loss, nll = label_smoothed_loss(logits, target, 0.1, pad_id=0)
    flat_logits, flat_target = logits.view(-1, 11), target.view(-1)
    expected = F.cross_entropy(flat_logits, flat_target, ignore_index=0, label_smoothing=0.1, reduction="sum")
    expected_nll = F.cross_entropy(flat_logits, flat_target, ignore_index=0, reduction="sum")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert nll.item() == pytest.approx(expected_nll.item(), rel=1e-5)


def test_training_learns(trained_model):
    metrics = [json.loads(line) for line in (trained_model.parent / "run" / "metrics.jsonl").read_text().splitlines()]
    valid = [m["valid_ppl"] for m in metrics if "valid_ppl" in m]
    vocab = json.loads((trained_model / "config.json").read_text())["model"]["vocab_size"]
    assert len(valid) == 2
    assert valid[-1] < valid[0] < vocab / 10  # far below the uniform guess over the vocabulary
    assert valid[-1] < 3.0


def small_settings(**overrides):
    args = {"max_steps": 6, "max_tokens": 300, "save_every": 3, "valid_every": 3, "log_every": 1, "device": "cpu", "keep_last": 5}
    return train_settings_for("tiny", **{**args, **overrides})


def test_interrupted_training_resumes_identically(prepared, tmp_path):
    config, settings = small_settings()
    Trainer(tmp_path / "straight", prepared, config, settings).run()

    config, first_half = small_settings(max_steps=3)
    Trainer(tmp_path / "resumed", prepared, config, first_half).run()
    resumed = Trainer(tmp_path / "resumed", prepared, config, settings)
    assert resumed.step == 3 and resumed.resumed_from is not None
    resumed.run()

    a = load_weights(tmp_path / "straight" / "checkpoints" / "6" / "model.safetensors")
    b = load_weights(tmp_path / "resumed" / "checkpoints" / "6" / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    # The log of the resumed run reads like one uninterrupted run.
    steps = [json.loads(line)["step"] for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(steps) and steps.count(6) == 2  # the train log line and the valid line


def test_resuming_with_another_model_shape_is_refused(prepared, tmp_path):
    config, settings = small_settings(max_steps=3)
    Trainer(tmp_path / "run", prepared, config, settings).run()
    big_config = config.replace(d_model=64)
    with pytest.raises(NmtError, match="different model shape .*d_model"):
        Trainer(tmp_path / "run", prepared, big_config, settings)
    _, other_batch = small_settings(max_steps=3, max_tokens=500)
    with pytest.raises(NmtError, match="max_tokens=300, not 500"):
        Trainer(tmp_path / "run", prepared, config, other_batch)
    # --restart discards the run instead.
    assert Trainer(tmp_path / "run", prepared, big_config, settings, restart=True).step == 0


def test_checkpoints_keep_the_last_k_and_no_partial_writes(prepared, tmp_path):
    config, settings = small_settings(max_steps=5, save_every=1, keep_last=2)
    (tmp_path / "run" / "checkpoints" / ".tmp-99").mkdir(parents=True)  # a write that crashed earlier
    Trainer(tmp_path / "run", prepared, config, settings).run()
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == ["4", "5"]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["4", "5", "best"]


def test_update_freq_accumulates_batches_into_one_step(prepared, tmp_path):
    config, settings = small_settings(max_steps=2, update_freq=3, save_every=2)
    trainer = Trainer(tmp_path / "run", prepared, config, settings)
    trainer.run()
    assert trainer.step == 2
    assert trainer.stream.state_dict()["position"] == 6  # 2 steps x 3 batches
