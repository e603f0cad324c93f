"""Training (sec. 5): the schedule, the loss, learning, checkpoints and exact resume."""

from __future__ import annotations

import dataclasses
import json
import os
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import nmt_in_process
from reference_loss import label_smoothed_loss

from nmtcli.errors import NmtError
from nmtcli.model.checkpoint import load_weights
from nmtcli.training.loss import output_loss
from nmtcli.training.rundir import checkpoint_dirs
from nmtcli.training.schedule import inverse_sqrt_lr, peak_scale
from nmtcli.training.settings import train_settings_for
from nmtcli.training.trainer import Trainer


def test_schedule_is_equation_3():
    d, warmup = 512, 4000
    for step in (1, 100, 3999, 4000, 4001, 100_000):
        expected = d**-0.5 * min(step**-0.5, step * warmup**-1.5)
        assert inverse_sqrt_lr(step, d, warmup) == pytest.approx(expected)
    # Linear warmup, peak at step == warmup, then decay.
    assert inverse_sqrt_lr(2000, d, warmup) == pytest.approx(inverse_sqrt_lr(4000, d, warmup) / 2)
    assert inverse_sqrt_lr(16000, d, warmup) == pytest.approx(inverse_sqrt_lr(4000, d, warmup) / 2)


def test_lr_is_the_peak_whatever_the_presets_scale():
    # small's recipe scales eq. 3 by 0.716 (fairseq's IWSLT peak); that scale multiplied a peak given by hand too:
    # `--preset small --lr 1e-3` peaked at 7.2e-4. An --lr-scale given beside --lr still multiplies it.
    for preset in ("tiny", "small", "student-tiny", "base"):
        config, settings = train_settings_for(preset, lr=1e-3, warmup=500)
        peak = inverse_sqrt_lr(500, config.d_model, 500, settings.lr_scale * peak_scale(config.d_model, 500, settings.lr))
        assert peak == pytest.approx(1e-3)
    config, settings = train_settings_for("small")
    assert inverse_sqrt_lr(4000, config.d_model, 4000, settings.lr_scale) == pytest.approx(5e-4, rel=1e-3)  # fairseq's
    _, settings = train_settings_for("small", lr=1e-3, lr_scale=0.5)
    assert settings.lr_scale == 0.5


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


def test_label_smoothed_loss_gradient_is_autograds():
    torch.manual_seed(0)
    logits = torch.randn(4, 6, 50, dtype=torch.float64, requires_grad=True)
    target = torch.randint(4, 50, (4, 6))
    target[1, 2:] = 0
    loss, _ = label_smoothed_loss(logits, target, 0.1, pad_id=0)
    (loss * 0.37).backward()
    leaf = logits.detach().clone().requires_grad_()
    reference = F.cross_entropy(leaf.view(-1, 50), target.view(-1), ignore_index=0, label_smoothing=0.1, reduction="sum")
    (reference * 0.37).backward()
    torch.testing.assert_close(logits.grad, leaf.grad)
    assert torch.all(logits.grad[1, 2:] == 0)  # padding gets no gradient
    # bf16 logits (autocast) give a bf16 gradient computed in float32.
    half = logits.detach().bfloat16().requires_grad_()
    label_smoothed_loss(half, target, 0.1, pad_id=0)[0].backward()
    assert half.grad.dtype == torch.bfloat16
    torch.testing.assert_close(half.grad.double(), leaf.grad / 0.37, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize("bias", [False, True])
def test_chunked_output_loss_equals_the_loss_over_full_logits(monkeypatch, bias):
    """Training's loss projects hidden states a chunk of rows at a time; value and gradients are those of
    F.linear + label_smoothed_loss over the whole logits (the loss before chunking), in float32 on a CPU."""
    from nmtcli.training import loss as loss_module
    from nmtcli.training.loss import output_loss

    monkeypatch.setitem(loss_module.CHUNK_LOGITS, "cpu", 7 * 300)  # 7 rows per chunk: 6 chunks and a short one
    torch.manual_seed(0)
    hidden = torch.randn(5, 9, 32, requires_grad=True)
    weight = (torch.randn(300, 32) * 0.3).requires_grad_()
    logits_bias = torch.randn(300, requires_grad=True) if bias else None
    target = torch.randint(4, 300, (5, 9))
    target[0, 5:] = 0
    target[3, 1:] = 0
    tokens = int((target != 0).sum())

    def grads():
        leaves = [t for t in (hidden, weight, logits_bias) if t is not None]
        out = [t.grad.clone() for t in leaves]
        for t in leaves:
            t.grad = None
        return out

    loss, nll = output_loss(hidden, weight, logits_bias, target, 0.1, pad_id=0, tokens=tokens)
    (loss * 0.37).backward()
    chunked = grads()
    full_loss, full_nll = label_smoothed_loss(F.linear(hidden, weight, logits_bias), target, 0.1, pad_id=0)
    (full_loss * 0.37).backward()
    full = grads()
    torch.testing.assert_close(loss, full_loss, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(nll, full_nll, rtol=1e-6, atol=1e-5)
    for ours, reference in zip(chunked, full):
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-6)
    assert torch.all(chunked[0][0, 5:] == 0) and torch.all(chunked[0][3, 1:] == 0)  # padding gets no gradient
    with torch.no_grad():  # validation: the same numbers, no gradients computed
        assert output_loss(hidden, weight, logits_bias, target, 0.1, pad_id=0)[0].item() == pytest.approx(loss.item(), rel=1e-6)


def test_chunked_output_loss_under_autocast_is_the_full_loss_under_autocast():
    """bf16 autocast: the projection in bf16 as F.linear would run it, the softmax in float32."""
    from nmtcli.training.loss import output_loss

    torch.manual_seed(1)
    hidden = torch.randn(40, 64, requires_grad=True)
    weight = (torch.randn(500, 64) * 0.2).requires_grad_()
    target = torch.randint(4, 500, (40,))
    target[30:] = 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, nll = output_loss(hidden, weight, None, target, 0.1, pad_id=0)
    loss.backward()
    ours = (hidden.grad.clone(), weight.grad.clone())
    hidden.grad = weight.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = F.linear(hidden, weight)
    assert logits.dtype == torch.bfloat16
    reference, reference_nll = label_smoothed_loss(logits, target, 0.1, pad_id=0)
    reference.backward()
    assert loss.dtype == torch.float32 and hidden.grad.dtype == torch.float32
    torch.testing.assert_close(loss, reference, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(nll, reference_nll, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(ours[0], hidden.grad, rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(ours[1], weight.grad, rtol=2e-2, atol=2e-3)


def test_the_rows_of_real_targets_are_found_without_a_device_wait():
    from nmtcli.training.loss import first_true

    torch.manual_seed(2)
    mask = torch.rand(1000) > 0.3
    assert torch.equal(first_true(mask, int(mask.sum())), mask.nonzero().squeeze(1))


def test_training_learns(trained_model, trained_run):
    metrics = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    valid = [m["valid_ppl"] for m in metrics if "valid_ppl" in m]
    vocab = json.loads((trained_model / "config.json").read_text())["model"]["vocab_size"]
    assert len(valid) == 3  # steps 100, 200, 300
    assert valid[-1] < valid[0] < vocab / 10  # far below the uniform guess over the vocabulary
    assert valid[-1] < 3.0


def small_settings(**overrides):
    args = {"max_steps": 6, "batch_tokens": 300, "save_every": 3, "valid_every": 3, "log_every": 1, "device": "cpu", "keep_last": 5}
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


def test_bf16_master_weights_train_a_bf16_copy_save_the_fp32_masters_and_resume_identically(prepared, tmp_path):
    # update_freq 2: the batches' gradients are summed into the masters' fp32 gradients (copied, then added).
    config, settings = small_settings(precision="bf16-master", update_freq=2)
    straight = Trainer(tmp_path / "straight", prepared, config, settings)
    assert straight.precision.label == "bf16-master" and straight.precision.name == "bf16"
    assert {p.dtype for p in straight.train_model.parameters()} == {torch.bfloat16}
    assert straight.train_model.embedding.positions.dtype == torch.bfloat16
    masters = [p for group in straight.optimizer.param_groups for p in group["params"]]
    assert [m is p for m, p in zip(masters, straight.model.parameters())] == [True] * len(masters)
    assert {m.dtype for m in masters} == {torch.float32}
    straight.run()
    # After every step the bf16 weights are the masters rounded; the masters keep what bf16 cannot hold
    # (early in the warmup most updates are smaller than a bf16 weight's rounding step).
    assert all(torch.equal(p, m.bfloat16()) for p, m in zip(straight.train_model.parameters(), masters))
    assert any(not torch.equal(m, m.bfloat16().float()) for m in masters)

    config, first_half = small_settings(precision="bf16-master", update_freq=2, max_steps=3)
    Trainer(tmp_path / "resumed", prepared, config, first_half).run()
    resumed = Trainer(tmp_path / "resumed", prepared, config, settings)
    assert resumed.step == 3
    resumed.run()
    a = load_weights(tmp_path / "straight" / "checkpoints" / "6" / "model.safetensors")
    b = load_weights(tmp_path / "resumed" / "checkpoints" / "6" / "model.safetensors")
    assert {t.dtype for t in a.values()} == {torch.float32}
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert all(torch.equal(a[k], v) for k, v in straight.model.state_dict().items())


def test_a_bf16_master_step_computes_the_gradients_of_an_fp32_step(prepared, tmp_path):
    from nmtcli.training.loader import StepLoader

    gradients = {}
    for precision in ("fp32", "bf16-master"):
        config, settings = small_settings(precision=precision, max_steps=1)
        trainer = Trainer(tmp_path / precision, prepared, config.replace(dropout=0.0), settings)
        loader = StepLoader(trainer.stream, 1, 0, 1, trainer.device)
        trainer.train_step(next(loader))
        loader.close()
        gradients[precision] = torch.cat([p.grad.flatten() for p in trainer.model.parameters()])
    ours, exact = gradients["bf16-master"], gradients["fp32"]
    assert ours.dtype == torch.float32
    assert F.cosine_similarity(ours, exact, dim=0) > 0.999
    assert (ours - exact).norm() < 0.03 * exact.norm()


def test_resuming_with_another_model_shape_is_refused(prepared, tmp_path):
    config, settings = small_settings(max_steps=3)
    Trainer(tmp_path / "run", prepared, config, settings).run()
    big_config = config.replace(d_model=64)
    with pytest.raises(NmtError, match="different model shape .*d_model"):
        Trainer(tmp_path / "run", prepared, big_config, settings)
    _, other_batch = small_settings(max_steps=3, batch_tokens=500)
    with pytest.raises(NmtError, match="batch_tokens=300, not 500") as refused:
        Trainer(tmp_path / "run", prepared, config, other_batch)
    assert "resume it with --batch-tokens 300" in str(refused.value.hint)  # the flag that resumes it as it was
    # A decoder of another depth is another shape, though config.json wrote no decoder_layers for the run's own.
    with pytest.raises(NmtError, match="different model shape \\(decoder_layers 2 there; decoder_layers 1 now\\)"):
        Trainer(tmp_path / "run", prepared, config.replace(decoder_layers=1), settings)
    # --restart discards the run instead.
    assert Trainer(tmp_path / "run", prepared, big_config, settings, restart=True).step == 0


def test_a_run_resumed_without_norm_keeps_the_norm_it_was_started_with(prepared, tmp_path):
    """A tiny run started with --norm post (tiny's default before it became pre-norm) goes on as post-norm when resumed
    without --norm (it was refused as another model shape); --norm pre on it is refused; --restart starts over with the
    preset's pre-norm."""
    from nmtcli.model.config import PRESETS

    assert PRESETS["tiny"].norm == "pre"
    run = tmp_path / "run"
    flags = ("--data", str(prepared), "--preset", "tiny", "-o", str(run), "--device", "cpu", "--save-every", "1")
    norm = lambda: json.loads((run / "config.json").read_text())["model"]["norm"]  # noqa: E731
    nmt_in_process("train", *flags, "--max-steps", "1", "--norm", "post")
    nmt_in_process("train", *flags, "--max-steps", "2")
    assert norm() == "post" and [p.name for p in checkpoint_dirs(run)] == ["1", "2"]
    refused = nmt_in_process("train", *flags, "--max-steps", "3", "--norm", "pre", check=False)
    assert refused.returncode != 0 and "different model shape (norm post there; norm pre now)" in refused.stderr
    nmt_in_process("train", *flags, "--max-steps", "1", "--restart")
    assert norm() == "pre"


def test_checkpoints_keep_the_last_k_and_no_partial_writes(prepared, tmp_path):
    config, settings = small_settings(max_steps=5, save_every=1, keep_last=2)
    (tmp_path / "run" / "checkpoints" / ".tmp-99").mkdir(parents=True)  # a write that crashed earlier
    Trainer(tmp_path / "run", prepared, config, settings).run()
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == ["4", "5"]
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["4", "5", "best"]
    # TensorBoard events beside metrics.jsonl (tensorboard is in the test extra).
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("train/loss")] == [1, 2, 3, 4, 5]
    assert {"train/ppl", "train/lr", "train/target_tokens_per_s", "valid/valid_ppl"} <= set(events.Tags()["scalars"])


def test_update_freq_accumulates_batches_into_one_step(prepared, tmp_path):
    config, settings = small_settings(max_steps=2, update_freq=3, save_every=2)
    trainer = Trainer(tmp_path / "run", prepared, config, settings)
    trainer.run()
    assert trainer.step == 2
    assert trainer.data_state["position"] == 6  # 2 steps x 3 batches


# --- at scale: the effective batch, precision, FLOPs, validation, configuration -----------------


def test_tokens_per_step_chooses_the_accumulation_and_normalizes_by_the_true_token_count(prepared, tmp_path):
    events = []
    config, settings = small_settings(max_steps=2, tokens_per_step=1200, update_freq=None, save_every=2)
    trainer = Trainer(tmp_path / "run", prepared, config, settings, on_event=lambda kind, v: events.append((kind, v)))
    mean = trainer.mean_batch_tokens
    assert 0 < mean < 300 and trainer.update_freq == round(1200 / mean) > 1
    trainer.run()
    start = dict(events)["start"]
    assert start["update_freq"] == trainer.update_freq and start["expected_step_target_tokens"] > 900
    assert trainer.data_state["position"] == 2 * trainer.update_freq
    # The logged loss is the step's summed loss over its true target-token count.
    from nmtcli.data.batching import BatchStream

    stream = BatchStream(trainer.train_data, 300, 1)
    first_step = [stream.next_indices() for _ in range(trainer.update_freq)]
    logged = [v for kind, v in events if kind == "log"]
    assert logged[0]["target_tokens_per_s"] > 0
    tokens = sum(stream.target_tokens(i) for i in first_step)
    assert tokens == sum(trainer.train_data.batch(i).target_tokens for i in first_step)


def test_an_explicit_update_freq_replaces_the_token_target():
    from nmtcli.cli.train import settings_from_flags

    _, settings = train_settings_for("base", update_freq=4)
    assert settings.update_freq == 4 and settings.tokens_per_step is None
    _, settings = train_settings_for("base")
    assert settings.tokens_per_step == 25_000 and settings.update_freq is None and settings.save_interval() == (None, 10.0)
    _, settings = train_settings_for("base", save_every=500)
    assert settings.save_every == 500 and settings.save_interval() == (500, None)
    with pytest.raises(NmtError, match="precision"):
        settings_from_flags("tiny", {"precision": "fp8"})


def test_fp16_skips_a_step_whose_gradients_overflow_and_lowers_the_scale(prepared, tmp_path):
    config, settings = small_settings(max_steps=3, precision="fp16")
    trainer = Trainer(tmp_path / "run", prepared, config, settings)
    scaler = trainer.precision.scaler
    assert scaler.is_enabled() and trainer.precision.dtype == torch.float16
    from nmtcli.training.loader import StepLoader

    loader = StepLoader(trainer.stream, 1, 0, 1, trainer.device)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    def set_scale(value: float) -> None:
        scaler.load_state_dict({**scaler.state_dict(), "scale": value, "_growth_tracker": 0})

    set_scale(2.0**100)  # loss x 2^100 overflows fp16 (and fp32) gradients
    m = trainer.train_step(next(loader))
    assert m["skipped"] and trainer.step == 0 and m["loss_scale"] == 2.0**99
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert trainer.data_state["position"] == 1  # the batch is consumed, not retried
    set_scale(1024.0)
    m = trainer.train_step(next(loader))
    assert not m["skipped"] and trainer.step == 1
    assert any(not torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    loader.close()
    trainer.save_checkpoint()
    state = torch.load(tmp_path / "run" / "checkpoints" / "1" / "trainer.pt", weights_only=True)
    assert state["scaler"]["scale"] == 1024.0  # the loss scale resumes with the run


def test_flop_count_matches_pytorchs_flop_counter():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from nmtcli.model.config import PRESETS
    from nmtcli.model.transformer import Transformer
    from nmtcli.training.flops import LengthStats, forward_flops, mfu, peak_flops, training_flops

    tiny = PRESETS["tiny"].replace(vocab_size=1000, dropout=0.0)
    for config in (tiny, tiny.replace(layers=3, decoder_layers=1)):  # the paper's N + N, and a student's deeper encoder
        model = Transformer(config)
        src_len, tgt_len, n = 9, 7, 3  # lengths with EOS / BOS: no padding, so model FLOPs = executed FLOPs
        src = torch.randint(4, 1000, (n, src_len))
        tgt = torch.randint(4, 1000, (n, tgt_len))
        lengths = LengthStats.of(torch.full((n,), src_len - 1).numpy(), torch.full((n,), tgt_len - 1).numpy())
        # The math backend runs attention as plain matmuls, which the counter sees (fused kernels it may not).
        with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
            model(src, tgt).sum().backward()
        assert forward_flops(config, lengths) * 3 == counter.get_total_flops()
        assert training_flops(config, lengths) == counter.get_total_flops()
    assert peak_flops("NVIDIA H100 80GB HBM3", "bf16") == 989.4e12
    assert peak_flops("NVIDIA H100 PCIe", "bf16") == 756.0e12
    assert peak_flops("Some Other GPU", "bf16") is None
    assert mfu(989.4e12, 2.0, 989.4e12, 1) == 0.5


def test_validation_bleu_is_what_nmt_translate_and_nmt_score_give(trained_model, prepared, tmp_path, nmt_main):
    from nmtcli.data.text import load_sentencepiece
    from nmtcli.model.checkpoint import load_model
    from nmtcli.training.distributed import Ranks
    from nmtcli.training.precision import resolve
    from nmtcli.training.validation import BleuSettings, valid_bleu

    model, _ = load_model(trained_model)
    sources = (prepared / "valid.en").read_text().splitlines()
    references = (prepared / "valid.de").read_text().splitlines()
    ours = valid_bleu(model, load_sentencepiece(prepared / "sentencepiece.model"), sources, references, BleuSettings(lines=30),
                      resolve("fp32", torch.device("cpu")).autocast, torch.device("cpu"), Ranks())
    (tmp_path / "src.txt").write_text("\n".join(sources[:30]) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(references[:30]) + "\n")
    nmt_main("translate", "-m", str(trained_model), "-i", str(tmp_path / "src.txt"), "-o", str(tmp_path / "hyp.txt"))
    scored = json.loads(nmt_main("score", str(tmp_path / "hyp.txt"), "--ref", str(tmp_path / "ref.txt"), "--json").stdout)
    assert ours["valid_bleu"] == pytest.approx(scored["scores"][0]["score"], abs=1e-9)
    assert ours["valid_bleu"] > 20


def test_early_stopping_keeps_the_best_checkpoint(prepared, tmp_path):
    # A model whose translations cannot change (lr ~0): the first validation is the best, the next two are not.
    config, settings = small_settings(max_steps=50, lr_scale=1e-9, valid_every=1, valid_bleu=2, patience=2, save_every=100)
    events = []
    result = Trainer(tmp_path / "run", prepared, config, settings, on_event=lambda k, v: events.append((k, v))).run()
    bleu = [v["valid_bleu"] for k, v in events if k == "valid"]
    assert result["early_stopped"] and result["step"] == 3 and len(bleu) == 3 and len(set(bleu)) == 1
    assert result["best"]["metric"] == "valid_bleu" and result["best"]["step"] == 1
    assert result["best"]["value"] == pytest.approx(bleu[0], abs=1e-4)  # the event rounds to 4 places
    best = json.loads((tmp_path / "run" / "checkpoints" / "best" / "config.json").read_text())
    assert best["step"] == 1
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == ["3"]  # saved where it stopped
    # Resuming the stopped run keeps its early-stopping state: the next validation stops it again.
    _, longer = small_settings(max_steps=50, lr_scale=1e-9, valid_every=1, valid_bleu=2, patience=2, save_every=100)
    again = Trainer(tmp_path / "run", prepared, config, longer)
    assert again.best == result["best"] and again.bad_validations == 2
    assert again.run()["step"] == 4


def test_a_run_that_stops_early_is_averaged_up_to_its_best_validation(prepared, tmp_path):
    # BLEU validations at steps 2, 4, 6 of a model whose translations cannot change (the first is the best);
    # a checkpoint every step, the newest 2 kept: the run stops at 6 and keeps 5, 6 and the 2 up to its best.
    config, settings = small_settings(max_steps=50, lr_scale=1e-9, valid_every=2, valid_bleu=1, patience=2, save_every=1, keep_last=2)
    result = Trainer(tmp_path / "run", prepared, config, settings).run()
    assert result["early_stopped"] and result["step"] == 6 and result["best"]["step"] == 2
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == ["1", "2", "5", "6"]

    def averaged(*flags: str) -> tuple[list[int], str]:
        out = tmp_path / f"model{len(list(tmp_path.iterdir()))}"
        said = nmt_in_process("average", str(tmp_path / "run"), "--last", "2", *flags, "-o", str(out)).stderr
        return json.loads((out / "config.json").read_text())["training"]["averaged_checkpoints"], said

    steps, said = averaged()
    assert steps == [1, 2] and f"averaging 2 checkpoint(s), up to the best validation (step 2, BLEU {result['best']['value']:.2f}): 1, 2" in said
    assert averaged("--at", "last")[0] == [5, 6]
    # A run whose best checkpoint is gone (one `nmt train` wrote before it kept them): auto takes the newest.
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "2")
    steps, said = averaged()
    assert steps == [5, 6] and "averaging 2 checkpoint(s), the newest: 5, 6" in said
    assert averaged("--at", "best")[0] == [1]
    wrong = nmt_in_process("average", str(tmp_path / "run"), "--at", "first", check=False)
    assert wrong.returncode == 2 and wrong.stderr.strip().splitlines()[-1].startswith("nmt: error: unknown --at 'first'")


def test_a_run_without_validation_is_averaged_over_its_newest_checkpoints(prepared, tmp_path):
    config, settings = small_settings(max_steps=4, save_every=1, keep_last=3, valid_every=100)
    Trainer(tmp_path / "run", prepared, config, settings).run()
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == ["2", "3", "4"]
    said = nmt_in_process("average", str(tmp_path / "run"), "-o", str(tmp_path / "model")).stderr
    assert "averaging 3 checkpoint(s), the newest: 2, 3, 4" in said
    # The last step validates perplexity: --at best asks for the checkpoints up to the best of that.
    best = nmt_in_process("average", str(tmp_path / "run"), "--at", "best", "--last", "1", "-o", str(tmp_path / "best")).stderr
    assert "averaging 1 checkpoint(s), up to the best validation (step 4, valid nll " in best
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "best")
    none = nmt_in_process("average", str(tmp_path / "run"), "--at", "best", "-o", str(tmp_path / "none"), check=False)
    assert none.returncode == 1 and "recorded no validation to average at" in none.stderr.strip().splitlines()[-1]


def test_config_file_with_flags_overriding_it(prepared, tmp_path, nmt_main):
    (tmp_path / "train.json").write_text(json.dumps({
        "preset": "tiny", "max-steps": 3, "batch_tokens": 300, "save_every": "2", "valid_every": 100, "log_every": 1,
        "device": "cpu", "data": str(prepared), "output": str(tmp_path / "run"),
    }))
    nmt_main("train", "--config", str(tmp_path / "train.json"), "--max-steps", "2")
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["training"]
    assert saved["max_steps"] == 2 and saved["batch_tokens"] == 300 and saved["save_every"] == 2
    # The run's own config.json reruns the same recipe (and so resumes it).
    again = nmt_main("train", "--config", str(tmp_path / "run" / "config.json"), "--data", str(prepared), "-o", str(tmp_path / "run"),
                    "--max-steps", "4")
    assert "resuming from" in again.stderr
    (tmp_path / "bad.toml").write_text('max_step = 3\n')
    bad = nmt_main("train", "--config", str(tmp_path / "bad.toml"), check=False)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("nmt: error: --config")
    assert "max_step" in bad.stderr and "Traceback" not in bad.stderr
    assert nmt_main("train", "--save-every", "ten", "--data", str(prepared), check=False).returncode == 2


def test_max_time_stops_training_validated_and_checkpointed(prepared, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from nmtcli.training.settings import parse_duration
    from nmtcli.training import trainer as trainer_module

    assert [parse_duration(v) for v in ("90s", "5m", "1.5h", "2")] == [1.5, 5.0, 90.0, 2.0]
    with pytest.raises(NmtError):
        parse_duration("0s")
    # The trainer's clock advances 0.25 s each time it is read (every step reads it at least once), whatever
    # the machine's speed: a 1.5-second budget is spent within 6 steps.
    readings = iter(range(1_000_000))
    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(perf_counter=lambda: 0.25 * next(readings)))
    config, settings = small_settings(max_steps=1_000_000, max_time=1.5 / 60, save_every=1_000_000, valid_every=1_000_000)
    events = []
    done = Trainer(tmp_path / "run", prepared, config, settings, on_event=lambda kind, v: events.append((kind, v))).run()
    assert 0 < done["step"] <= 6  # stopped as soon as its clock said the time was up
    assert done["time_limit_reached"] and 0 < done["step"] < 1_000_000
    kinds = [kind for kind, _ in events]
    assert kinds[-3:] == ["checkpoint", "time_limit", "done"] and "valid" in kinds
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == [str(done["step"])]


def test_a_loss_that_is_not_finite_stops_training_before_the_next_checkpoint(prepared, tmp_path, monkeypatch):
    """The loss is checked where the host waits for the device anyway (log, validation, checkpoint),
    not every step; a non-finite loss still names its step and never reaches a checkpoint."""
    from nmtcli.training import trainer as trainer_module

    calls = []

    def nan_at_step_3(*args, **kwargs):
        loss, nll = output_loss(*args, **kwargs)
        calls.append(1)
        return (loss * float("nan"), nll) if len(calls) == 3 else (loss, nll)

    monkeypatch.setattr(trainer_module, "output_loss", nan_at_step_3)
    config, settings = small_settings(max_steps=10, save_every=2, log_every=100, valid_every=100)
    with pytest.raises(NmtError, match=r"the loss became nan at step 3"):
        Trainer(tmp_path / "run", prepared, config, settings).run()
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == ["2"]


@pytest.mark.slow  # tracing a graph takes seconds on 2 shared CPU cores, and this traces about 30
def test_compile_builds_one_graph_per_length_bucket_not_one_per_batch(prepared, tmp_path, monkeypatch):
    """--compile compiles each kind of layer once, its rows and lengths symbolic: one graph for the encoder
    layers and one for the decoder layers, whatever the (source, target) lengths (issue 19: a graph per
    length bucket pair was dozens of compiles)."""
    import random

    from torch._dynamo.testing import CompileCounter

    from nmtcli.data.batching import BatchStream, collate
    from nmtcli.model.config import PRESETS
    from nmtcli.model.transformer import Transformer
    from nmtcli.training import compiling
    from nmtcli.training.loader import pad_lengths

    def graphs(pairs):  # what compiling these (source, target) bucket pairs costs: one encoder, one decoder graph
        return 2

    # 1. 60 batches of WMT-like variety through the compiled layers: 60 shapes, 13 bucket pairs, 2 graphs.
    torch._dynamo.reset()
    counter = CompileCounter()
    monkeypatch.setattr(compiling, "BACKEND", counter)
    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"].replace(vocab_size=100, layers=2))
    compiling.compile_layers(model)
    rng = random.Random(0)
    raw, pairs = set(), set()
    for _ in range(60):
        rows, src_len = rng.randint(2, 40), rng.randint(3, 40)
        tgt_len = max(2, round(src_len * rng.uniform(0.8, 1.25)))
        src = [torch.randint(4, 100, (rng.randint(1, src_len),)).numpy() for _ in range(rows)]
        tgt = [torch.randint(4, 100, (rng.randint(1, tgt_len),)).numpy() for _ in range(rows)]
        batch = pad_lengths(collate(src, tgt), compiling.bucket_length)
        raw.add((rows, max(len(x) for x in src), max(len(x) for x in tgt)))
        pairs.add((batch.src.size(1), batch.tgt_in.size(1)))
        model(batch.src, batch.tgt_in, hidden=True).sum().backward()
    assert len(raw) == 60 and len(pairs) > 10 and counter.frame_count == graphs(pairs)
    model.eval()
    model(batch.src, batch.tgt_in)  # validation and beam search run the layers eagerly: nothing compiles
    assert counter.frame_count == graphs(pairs)

    # 2. `nmt train --compile`: the trainer's batches go through the same buckets.
    torch._dynamo.reset()
    counter = CompileCounter()
    monkeypatch.setattr(compiling, "BACKEND", counter)
    config, settings = small_settings(max_steps=10, batch_tokens=300, save_every=10, valid_every=10, log_every=10,
                                      compile=True)
    trainer = Trainer(tmp_path / "run", prepared, config, settings)
    checked = counter.frame_count  # the start-up check compiles a one-line function
    trainer.run()
    stream = BatchStream(trainer.train_data, 300, settings.seed)
    batches = [trainer.train_data.batch(stream.next_indices()) for _ in range(10)]
    pairs = {(compiling.bucket_length(b.src.size(1)), compiling.bucket_length(b.tgt_in.size(1))) for b in batches}
    assert counter.frame_count - checked == graphs(pairs)
    torch._dynamo.reset()


def test_tokens_per_step_lowers_the_batch_when_one_batch_per_rank_is_already_more(prepared):
    from nmtcli.data.batching import ParallelData
    from nmtcli.training.batch_size import choose_batch

    data = ParallelData(prepared, "train", "en", "de", 1000)
    fits = choose_batch(data, 300, 1200, 2, 1)  # 2 ranks x ~220 tokens: accumulate 3 batches
    assert fits.lowered_from is None and fits.batch_tokens == 300 and fits.update_freq == round(1200 / (2 * fits.mean_target_tokens))
    lowered = choose_batch(data, 300, 600, 4, 1)  # 4 ranks x ~220 tokens would be 880 > 600
    assert lowered.lowered_from == 300 and lowered.batch_tokens < 300 and lowered.update_freq == 1
    assert lowered.unlowered_step_tokens > 600
    assert abs(4 * lowered.mean_target_tokens - 600) < 0.15 * 600  # one batch per rank is now about the step


@pytest.fixture(scope="module")
def one_bucket_data(corpus, tmp_path_factory) -> Path:
    """Prepared data whose training batches all pad to one length bucket pair: pairs of 9 to 14 words a side.

    With this corpus' few dozen words each word is one piece: source (+ EOS) and target (BOS +) lengths of
    10 to 15 tokens, all in the bucket of 16.
    """
    from nmtcli.data.prepare import prepare_files
    from nmtcli.data.settings import PrepareSettings
    from nmtcli.data.text import read_lines

    root = tmp_path_factory.mktemp("one-bucket")
    for split in ("train", "valid"):
        pairs = [(s, t) for s, t in zip(read_lines(Path(f"{corpus[split]}.en")), read_lines(Path(f"{corpus[split]}.de")))
                 if 9 <= len(s.split()) <= 14 and 9 <= len(t.split()) <= 14]
        (root / f"{split}.en").write_text("".join(s + "\n" for s, _ in pairs))
        (root / f"{split}.de").write_text("".join(t + "\n" for _, t in pairs))
    prepare_files(root / "data", root / "train", root / "valid", None, PrepareSettings("en", "de", vocab_size=1000, max_tokens=15), "t")
    return root / "data"


@pytest.mark.slow  # inductor compiles C++ for the CPU: a minute or more on 2 shared cores
def test_compiled_training_computes_what_eager_training_computes(one_bucket_data, tmp_path):
    """`--compile` for real (inductor): with dropout off, the first steps' losses are eager's, to float rounding.

    On batches of one length bucket, so that inductor compiles each kind of layer once (the graphs per
    bucket are counted by test_compile_builds_one_graph_per_length_bucket_not_one_per_batch)."""
    from nmtcli.data.batching import BatchStream
    from nmtcli.training import compiling

    losses = {}
    for compiled in (False, True):
        config, settings = small_settings(max_steps=4, save_every=4, valid_every=4, compile=compiled)
        run = tmp_path / ("compiled" if compiled else "eager")
        trainer = Trainer(run, one_bucket_data, config.replace(dropout=0.0), settings)
        trainer.run()
        losses[compiled] = [json.loads(line)["loss"] for line in (run / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    stream = BatchStream(trainer.train_data, settings.batch_tokens, settings.seed)
    batches = [trainer.train_data.batch(stream.next_indices()) for _ in range(4)]
    assert {(compiling.bucket_length(b.src.size(1)), compiling.bucket_length(b.tgt_in.size(1))) for b in batches} == {(16, 16)}
    assert len({b.src.shape for b in batches}) > 1  # batches of several shapes all the same
    assert len(losses[True]) == 4
    assert losses[True] == pytest.approx(losses[False], abs=2e-3)
    torch._dynamo.reset()


def test_unigram_nll_is_the_entropy_of_the_target_tokens_with_one_eos_a_sentence():
    from nmtcli.training.loss import unigram_nll

    # Targets 5 5 6 and 7 (two sentences): tokens 5, 5, 6, 7, EOS, EOS -> p = 2/6, 1/6, 1/6, 2/6.
    expected = -(2 * (2 / 6) * math.log(2 / 6) + 2 * (1 / 6) * math.log(1 / 6))
    assert unigram_nll(np.array([5, 5, 6, 7]), 2, 10, 3) == pytest.approx(expected)


def test_a_loss_still_at_the_unigram_level_past_twice_the_warmup_is_reported(prepared, tmp_path, nmt_main):
    # A learning rate of 1e-9 of the paper's: the weights hardly move, so the loss stays where it started (above the unigram level).
    out = nmt_main("train", "--data", str(prepared), "-o", str(tmp_path / "run"), "--preset", "tiny", "--max-steps", "4",
                   "--warmup", "1", "--lr-scale", "1e-9", "--log-every", "2", "--save-every", "4", "--device", "cpu")
    assert out.stderr.count("is still at the level of predicting each target token by its frequency alone") == 1, out.stderr


# --- shape classes (issue 34) --------------------------------------------------------------------


def test_a_batch_padded_to_its_class_has_the_loss_and_gradients_of_the_batch_unpadded():
    """Padding rows (source EOS only, target all padding) and padded lengths change nothing real and
    produce no NaN. (An all-padding source row would leave attention no key: a fully masked softmax
    row, NaN in some kernels, and a sequence of length 0 for the varlen kernel; PyTorch's CPU kernel
    happens to return a finite row for it, so this pins the batch's values, not the guard.)"""
    import numpy as np

    from nmtcli.data.batching import ShapeClass, collate
    from nmtcli.model.config import PRESETS
    from nmtcli.model.transformer import Transformer

    torch.manual_seed(0)
    model = Transformer(PRESETS["tiny"].replace(vocab_size=200, dropout=0.0))
    rng = np.random.default_rng(0)
    src = [rng.integers(4, 200, n) for n in (5, 11, 3)]
    tgt = [rng.integers(4, 200, n) for n in (7, 2, 9)]

    def loss_and_grads(batch):
        model.zero_grad(set_to_none=True)
        hidden = model(batch.src, batch.tgt_in, hidden=True)
        assert torch.isfinite(hidden).all()  # the padding rows' too
        loss, nll = output_loss(hidden, model.embedding.tokens.weight, model.final_logits_bias, batch.tgt_out,
                                0.1, model.config.pad_id, batch.target_tokens)
        (loss / batch.target_tokens).backward()
        return loss.detach(), {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}

    plain, plain_grads = loss_and_grads(collate(src, tgt))
    padded_batch = collate(src, tgt, shape=ShapeClass(rows=8, src_len=16, tgt_len=16))
    assert padded_batch.src.shape == padded_batch.tgt_out.shape == (8, 16)
    padded, padded_grads = loss_and_grads(padded_batch)
    assert torch.isfinite(padded) and padded_grads.keys() == plain_grads.keys()
    torch.testing.assert_close(padded, plain, rtol=1e-5, atol=1e-5)
    for k in plain_grads:
        assert torch.isfinite(padded_grads[k]).all(), k
        torch.testing.assert_close(padded_grads[k], plain_grads[k], rtol=1e-4, atol=1e-6)


def test_the_loader_pads_every_batch_of_a_class_stream_to_its_class(prepared):
    from nmtcli.data.batching import BatchStream, ParallelData
    from nmtcli.data.prepare import read_manifest
    from nmtcli.training.loader import StepLoader, multiple_of_8

    data = ParallelData(prepared, "train", "en", "de", read_manifest(prepared)["vocab_size"])
    stream = BatchStream(data, 300, seed=1, classes=True)
    reference = BatchStream(data, 300, seed=1, classes=True)
    loader = StepLoader(stream, 2, 0, 1, torch.device("cpu"), pad_length=multiple_of_8)  # classes win over pad_length
    try:
        shapes = set()
        for _ in range(30):
            step = next(loader)
            for batch in step.batches:
                indices = reference.next_indices()
                assert tuple(batch.src.shape) == (reference.shape(indices).rows, reference.shape(indices).src_len)
                assert batch.target_tokens == reference.target_tokens(indices)
                shapes.add((tuple(batch.src.shape), tuple(batch.tgt_out.shape)))
            assert step.target_tokens == sum(b.target_tokens for b in step.batches)
    finally:
        loader.close()
    assert len(shapes) <= 8  # 60 batches of the demo corpus's short sentences: a few classes


def test_training_in_shape_classes_resumes_identically(prepared, tmp_path):
    config, settings = small_settings()
    straight = Trainer(tmp_path / "straight", prepared, config, settings, shape_classes=True)
    assert straight.stream.classes
    straight.run()

    config, first_half = small_settings(max_steps=3)
    Trainer(tmp_path / "resumed", prepared, config, first_half, shape_classes=True).run()
    resumed = Trainer(tmp_path / "resumed", prepared, config, settings)  # classes come from the checkpoint
    assert resumed.step == 3 and resumed.stream.classes and resumed.shape_classes
    resumed.run()

    a = load_weights(tmp_path / "straight" / "checkpoints" / "6" / "model.safetensors")
    b = load_weights(tmp_path / "resumed" / "checkpoints" / "6" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    # On a CPU batches are by length unless asked for, and a run without classes resumes without them.
    assert not Trainer(tmp_path / "plain", prepared, config, settings).stream.classes


def test_cuda_graphs_where_they_cannot_run_are_one_warning_and_the_run_trains_eagerly(prepared, tmp_path, nmt_main):
    """--cuda-graphs on a CPU: one warning line that says why, the run trains as it would without the flag, and the
    run's config.json records what was asked for. (The graphs themselves: tests/test_gpu_paths.py.)"""
    out = nmt_main("train", "--data", str(prepared), "-o", str(tmp_path / "run"), "--preset", "tiny", "--max-steps", "2",
                   "--save-every", "2", "--device", "cpu", "--cuda-graphs")
    assert out.stderr.count("nmt: warning: --cuda-graphs is ignored: they need a CUDA GPU") == 1, out.stderr
    start = next(line for line in out.stderr.splitlines() if "starting:" in line)
    assert "device cpu, fp32" in start and "CUDA graphs" not in start
    assert json.loads((tmp_path / "run" / "config.json").read_text())["training"]["cuda_graphs"] is True
    assert (tmp_path / "run" / "checkpoints" / "2").is_dir()


def test_shape_classes_are_the_compile_length_buckets():
    """--compile pads lengths to its buckets where classes are off; with classes on, the same ladder
    means the classes' lengths are buckets already and add no compiled graph."""
    from nmtcli.data.batching import CLASS_LENGTHS, class_length
    from nmtcli.training import compiling

    assert CLASS_LENGTHS == compiling.LENGTH_BUCKETS
    assert all(class_length(n) == compiling.bucket_length(n) for n in range(1, 700))


# --- checkpoints off the training thread (issue 34) ----------------------------------------------

def test_a_checkpoint_is_written_while_training_goes_on_and_resumes_identically(prepared, tmp_path, monkeypatch):
    """A save in the run is a snapshot the steps after it do not change, written by a thread while the
    next steps train, announced once written; the run's last save is written before it returns."""
    import threading

    from nmtcli.training import rundir
    from nmtcli.training import trainer as trainer_module

    config, settings = small_settings(max_steps=6, save_every=2, valid_every=100)
    step_3_trained, written_during_training = threading.Event(), []
    real_save, real_step = rundir.save_checkpoint, Trainer.train_step

    def slow_save(run_dir, step, *args):
        if step == 2:  # holds the write until the training thread has trained step 3 after it
            written_during_training.append(step_3_trained.wait(timeout=60))
        return real_save(run_dir, step, *args)

    def train_step(self, batches):
        out = real_step(self, batches)
        if self.step == 3:
            step_3_trained.set()
        return out

    monkeypatch.setattr(trainer_module.rundir, "save_checkpoint", slow_save)
    monkeypatch.setattr(Trainer, "train_step", train_step)
    events = []
    Trainer(tmp_path / "run", prepared, config, settings, on_event=lambda kind, v: events.append((kind, v))).run()
    assert written_during_training == [True]
    assert [p.name for p in checkpoint_dirs(tmp_path / "run")] == ["2", "4", "6"]
    kinds = [kind if kind != "checkpoint" else (kind, v["step"]) for kind, v in events if kind in ("step", "checkpoint")]
    assert kinds.index(("checkpoint", 2)) > kinds.index("step") + 2  # announced after step 3, once written
    assert [k for k in kinds if k != "step"] == [("checkpoint", 2), ("checkpoint", 4), ("checkpoint", 6)]
    monkeypatch.setattr(Trainer, "train_step", real_step)

    # Checkpoint 2 holds step 2's weights and trainer state, though steps 3 and 4 ran while it was written:
    # it equals a run that stopped at step 2, and a run resumed from it ends where the run ended.
    Trainer(tmp_path / "two", prepared, config, small_settings(max_steps=2, save_every=2, valid_every=100)[1]).run()
    a = load_weights(tmp_path / "run" / "checkpoints" / "2" / "model.safetensors")
    b = load_weights(tmp_path / "two" / "checkpoints" / "2" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    for later in ("4", "6"):
        shutil.copytree(tmp_path / "run" / "checkpoints" / later, tmp_path / f"kept-{later}")
        shutil.rmtree(tmp_path / "run" / "checkpoints" / later)
    resumed = Trainer(tmp_path / "run", prepared, config, settings)
    assert resumed.step == 2
    resumed.run()
    a = load_weights(tmp_path / "kept-6" / "model.safetensors")
    b = load_weights(tmp_path / "run" / "checkpoints" / "6" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_checkpoint_saves_are_not_counted_in_the_throughput_window(prepared, tmp_path, monkeypatch):
    """A save's time on the training thread (the snapshot, waiting for the last save) is left out of the
    log line's tokens/s, as validation's is."""
    from types import SimpleNamespace

    from nmtcli.training import trainer as trainer_module

    clock = [0.0]

    def perf_counter():  # 1 s each time it is read; a save costs 1000 s on the training thread
        clock[0] += 1.0
        return clock[0]

    real_save = Trainer.save_checkpoint

    def slow_save(self, background=False):
        clock[0] += 1000.0
        return real_save(self, background)

    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(perf_counter=perf_counter))
    monkeypatch.setattr(Trainer, "save_checkpoint", slow_save)
    config, settings = small_settings(max_steps=8, save_every=2, log_every=4, valid_every=100)
    events = []
    Trainer(tmp_path / "run", prepared, config, settings, on_event=lambda kind, v: events.append((kind, v))).run()
    logs = [v for kind, v in events if kind == "log"]
    assert [v["step"] for v in logs][0] == 1 and [v["step"] for v in logs if v["step"] % 4 == 0] == [4, 8]  # the first step: at once
    # Steps 5-8 (the first window began on the real clock) hold the saves of steps 4 and 6, ~1,500 target
    # tokens: counted in, that is under 1 token/s; left out, the window lasts some 20 clock readings.
    assert next(v for v in logs if v["step"] == 8)["target_tokens_per_s"] > 50


@pytest.mark.slow  # aot_eager traces the forward and backward of each class: half a minute on 2 shared CPU cores
def test_compiled_shape_classes_are_warmed_before_training_and_an_epoch_never_recompiles(prepared, tmp_path, monkeypatch):
    """--compile with shape classes (issue 34): the whole forward is compiled, one graph per class (aot_eager here;
    inductor on a GPU), every class of the data warmed before the first step; then more than an epoch under
    torch.compiler.set_stance("fail_on_recompile") compiles nothing more, and dynamo breaks no graph."""
    from torch._dynamo.testing import CompileCounterWithBackend
    from torch._dynamo.utils import counters

    from nmtcli.training import compiling

    torch._dynamo.reset()
    counters.clear()
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(compiling, "BACKEND", counter)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    from nmtcli.data.batching import ParallelData
    from nmtcli.training.batch_size import batches_per_epoch

    config, settings = small_settings(max_steps=1, batch_tokens=8000, compile=True, save_every=1000, valid_every=1000, log_every=1000)
    per_epoch = batches_per_epoch(ParallelData(prepared, "train", "en", "de", config.vocab_size), 8000, settings.seed, classes=True)
    settings = dataclasses.replace(settings, max_steps=per_epoch + 3)
    trainer = Trainer(tmp_path / "run", prepared, config, settings, shape_classes=True)
    assert trainer.update_freq == 1
    before = counter.frame_count
    trainer.warm_up()
    classes = trainer.stream.classes_present()
    assert len(classes) > 1 and counter.frame_count - before == len(classes)
    assert all(p.grad is None for p in trainer.train_model.parameters())
    with torch.compiler.set_stance("fail_on_recompile"):
        trainer.run()
    assert trainer.step == per_epoch + 3 and trainer.stream.epoch == 2
    assert counter.frame_count - before == len(classes) and not counters["graph_break"]
    assert os.environ.pop("TORCHINDUCTOR_CACHE_DIR") == str(tmp_path / "run" / "compile-cache")  # inductor's cache: the run's
    torch._dynamo.reset()


def test_a_run_is_planned_once_from_its_settings_data_and_checkpoint_before_anything_is_built(prepared, tmp_path):
    from nmtcli.data.batching import ParallelData, make_batches
    from nmtcli.data.prepare import read_manifest
    from nmtcli.training.plan import plan_run, trained_config
    from nmtcli.training.settings import steps_for_epochs

    config, settings = train_settings_for("tiny", epochs=3, warmup=2, batch_tokens=300, tokens_per_step=1200, device="cpu")
    config = trained_config(config, read_manifest(prepared))
    data = ParallelData(prepared, "train", "en", "de", config.vocab_size, config.pad_id, config.bos_id, config.eos_id)
    plan = plan_run(settings, config, data, torch.device("cpu"), 2, {}, tmp_path)
    per_epoch = len(make_batches(data.src.lengths, data.tgt.lengths, 300, settings.seed, 1))
    # the epochs counted on this data's batches, the accumulation chosen from --tokens-per-step for 2 ranks
    assert plan.settings.max_steps == steps_for_epochs(settings, per_epoch, 2 * plan.update_freq) == 3 * plan.steps_per_epoch
    assert plan.update_freq == round(1200 / (2 * plan.batch.mean_target_tokens)) and not plan.shape_classes
    assert (plan.precision, plan.compile, plan.config.vocab_size) == ("fp32", "", 1000)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.settings = settings  # type: ignore[misc]
    # a resumed run keeps its checkpoint's batches (and how they were made), whatever the settings say now
    resumed = plan_run(settings, config, data, torch.device("cpu"), 1, {"stream": {"classes": 1}, "batches_per_step": 6,
                                                                        "batch_tokens": 280}, tmp_path)
    assert resumed.shape_classes and (resumed.batch.batch_tokens, resumed.update_freq) == (280, 6)
    # the Trainer builds what the plan says
    trainer = Trainer(tmp_path / "run", prepared, *train_settings_for("tiny", max_steps=2, batch_tokens=300, device="cpu"))
    assert trainer.plan.settings is trainer.settings and trainer.stream.batch_tokens == trainer.plan.batch.batch_tokens == 300


def test_a_gain_under_min_delta_keeps_the_best_but_does_not_reset_patience(prepared, tmp_path):
    from nmtcli.training import rundir
    from nmtcli.training.early_stopping import validations_without_progress

    scores = [10.0, 10.3, 10.4, 10.45, 11.0, 10.9]
    config, settings = small_settings(patience=3, min_delta=0.5)
    trainer = Trainer(tmp_path / "run", prepared, config, settings)
    seen = []
    for step, score in enumerate(scores, 1):
        trainer.step = step
        trainer._improved({"valid_nll": 1.0, "valid_bleu": score})
        seen.append(trainer.bad_validations)
    # 0.5 BLEU: the gains of 0.3, 0.4 and 0.45 over step 1's 10.0 are not progress (the third would stop the
    # run), though each is the new best; 11.0 is progress.
    assert seen == [0, 1, 2, 3, 0, 1]
    assert trainer.best == {"metric": "valid_bleu", "value": 11.0, "step": 5} and trainer.patience_from == 11.0
    # `nmt info` replays the same rule from the metrics; with min_delta 0 every new best resets patience, as before.
    valid = [{"valid_bleu": s} for s in scores]
    assert [validations_without_progress(valid[:n], 0.5) for n in range(1, 7)] == seen
    assert [validations_without_progress(valid[:n], 0.0) for n in range(1, 7)] == [0, 0, 0, 0, 0, 1]
    # Perplexity alone: min_delta is the percent by which it must fall (1% of 2.0 is 0.02).
    assert [validations_without_progress([{"valid_nll": math.log(p)} for p in (2.0, 1.99, 1.97)][:n], 1.0) for n in (1, 2, 3)] == [0, 1, 0]
    # A resumed run goes on with the same state.
    rundir.start(trainer.run_dir, trainer.data_dir, trainer.run_config)  # as Trainer.run does before its first save
    trainer.save_checkpoint()
    resumed = Trainer(tmp_path / "run", prepared, config, settings)
    assert (resumed.best, resumed.bad_validations, resumed.patience_from) == (trainer.best, 1, 11.0)


def test_slow_steps_still_log_at_the_first_step_and_every_half_minute(prepared, tmp_path, monkeypatch):
    # issue 51: base on a CPU made steps of a minute and logged every 100 steps: 3 minutes showed nothing.
    from types import SimpleNamespace

    from nmtcli.training import trainer as trainer_module

    clock = [0.0]

    def perf_counter():  # every reading 40 s later: each step is slower than LOG_SECONDS
        clock[0] += 40.0
        return clock[0]

    monkeypatch.setattr(trainer_module, "time", SimpleNamespace(perf_counter=perf_counter))
    config, settings = small_settings(max_steps=4, save_every=100, log_every=100, valid_every=100)
    events = []
    Trainer(tmp_path / "run", prepared, config, settings, on_event=lambda kind, v: events.append((kind, v))).run()
    assert [v["step"] for kind, v in events if kind == "log"] == [1, 2, 3, 4]


@pytest.mark.parametrize("pairs, gpu, preset", [(5_000, False, "tiny"), (50_000, True, "tiny"), (200_000, False, "small"),
                                                (200_000, True, "small"), (4_500_000, False, "small"), (4_500_000, True, "base"),
                                                (None, False, "base")])
def test_the_preset_left_out_fits_the_training_pairs_and_the_device(pairs, gpu, preset):
    from nmtcli.training.settings import preset_for

    chosen, why = preset_for(pairs, gpu)
    assert chosen == preset and ("a GPU" if gpu else "a CPU") in why or pairs is None


@pytest.mark.parametrize("gpu", [False, True])
def test_the_preset_left_out_is_never_a_student(gpu):
    # A student learns from a teacher's translations: `nmt train` cannot tell such data from any other, so asks for it by name.
    from nmtcli.training.settings import preset_for

    assert all(not preset_for(pairs, gpu)[0].startswith("student") for pairs in (None, 1, 10_000, 50_001, 10**6, 10**6 + 1, 10**8))


def test_nmt_train_preset_student_tiny_trains_on_a_cpu_into_runs_student_tiny_and_averages(prepared, nmt_main, tmp_path):
    """The 6+2 student by its hyphenated name: the default run dir, a few small steps, the averaged model's depths."""
    nmt_main("train", "--data", str(prepared), "--preset", "student-tiny", "--max-steps", "2", "--batch-tokens", "256",
             "--save-every", "2", "--log-every", "1", "--device", "cpu", cwd=tmp_path)
    run = tmp_path / "runs" / f"student-tiny-{json.loads((prepared / 'manifest.json').read_text())['name']}"
    values = json.loads((run / "config.json").read_text())
    assert values["training"]["preset"] == "student-tiny" and values["training"]["max_steps"] == 2
    assert (values["model"]["layers"], values["model"]["decoder_layers"], values["model"]["d_model"], values["model"]["norm"]) == (6, 2, 256, "post")
    assert [c.name for c in checkpoint_dirs(run)] == ["2"]
    nmt_main("average", str(run), "-o", str(tmp_path / "model"), "--no-calibrate", "--device", "cpu")
    assert "6+2 layers, d_model 256, d_ff 1536, 8 heads" in nmt_main("info", str(tmp_path / "model")).stdout
    card = (tmp_path / "model" / "README.md").read_text()
    assert card.startswith("# Transformer en-de (student-tiny)") and "- Architecture: 6+2 layers, d_model 256" in card


def test_nmt_train_without_a_preset_on_a_cpu_trains_tiny_and_says_why(prepared, nmt_main, tmp_path):
    out = nmt_main("train", "--data", str(prepared), "--max-steps", "1", "--device", "cpu", "-o", str(tmp_path / "run"))
    assert "nmt: preset tiny: 5,000 training pairs on a CPU (tiny: up to ~50k pairs); --preset chooses another" in out.stderr
    assert json.loads((tmp_path / "run" / "config.json").read_text())["model"]["d_model"] == 128  # tiny's


def test_a_run_of_another_preset_cut_short_lends_no_norm_to_the_next(prepared, tmp_path):
    """A run dir whose run of another preset stopped before its first checkpoint: `nmt train --preset tiny -o` into it
    starts tiny as tiny is (pre-norm), not with the post-norm of the run that was there (nmt distill met this)."""
    import json

    from conftest import run_nmt

    run = tmp_path / "run"
    failed = run_nmt("train", "--data", str(prepared), "--preset", "student-tiny", "-o", str(run), "--max-steps", "2",
                     "--device", "cpu", env={"NMT_TEST_FAULT": "fail:0:1"}, check=False)
    assert failed.returncode != 0 and json.loads((run / "config.json").read_text())["model"]["norm"] == "post"
    run_nmt("train", "--data", str(prepared), "--preset", "tiny", "-o", str(run), "--max-steps", "1", "--device", "cpu")
    model = json.loads((run / "config.json").read_text())["model"]
    assert (model["norm"], model["d_model"]) == ("pre", 128)
