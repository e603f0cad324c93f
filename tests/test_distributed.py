"""Training at scale on the CPU: torchrun with gloo, crashes with SIGKILL, failing ranks.

Every run here is a real `nmt train` process (or several under torchrun) on the tiny preset with a
few small steps. OMP_NUM_THREADS=1 keeps CPU kernels deterministic and the shared machine usable.
The module's 2-rank `nmt train --gpus 2` run (and its resumption) is made once, by `two_rank_run`, and
shared read-only by the tests that check it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import NMT
from safetensors.torch import load_file

pytestmark = pytest.mark.slow  # torchrun and its ranks are processes that each import torch and train: ~85 s in all

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "200"}
SMALL = ["--preset", "tiny", "--batch-tokens", "300", "--log-every", "1", "--valid-every", "1000", "--device", "cpu"]


def nmt_train(prepared: Path, run_dir: Path, *args: str, env: dict | None = None, torchrun: int = 0, timeout: int = 300):
    command = [NMT, "train"]
    if torchrun:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(torchrun), "-m", "nmtcli", "train"]
    return subprocess.run([*command, "--data", str(prepared), "-o", str(run_dir), *SMALL, *args],
                          capture_output=True, text=True, env={**ENV, **(env or {})}, timeout=timeout)


def weights(run_dir: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / str(step) / "model.safetensors"))


@pytest.fixture(scope="module")
def two_rank_run(prepared, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """The module's one 2-rank run: `nmt train --gpus 2` (two gloo ranks) for 2 steps, then again to 4, resuming.

    Shared read-only by the tests below: (run dir, the first call, the resuming call).
    """
    run = tmp_path_factory.mktemp("two-ranks") / "run"
    steps = ["--save-every", "2", "--update-freq", "1"]
    first = subprocess.run([NMT, "train", "--gpus", "2", "--data", str(prepared), "-o", str(run), *SMALL, "--max-steps", "2", *steps],
                           capture_output=True, text=True, env=ENV, timeout=240)
    again = subprocess.run([NMT, "train", "--gpus", "2", "--data", str(prepared), "-o", str(run), *SMALL, "--max-steps", "4", *steps],
                           capture_output=True, text=True, env=ENV, timeout=240)
    return run, first, again


def test_two_ranks_train_what_one_process_trains_with_the_same_global_batch(two_rank_run, prepared, tmp_path):
    run, two, _ = two_rank_run  # two ranks x 1 batch a step, resumed at step 2: the same as straight (exact resume)
    assert two.returncode == 0, two.stderr
    one = nmt_train(prepared, tmp_path / "one", "--max-steps", "4", "--save-every", "4", "--update-freq", "2")
    assert one.returncode == 0, one.stderr

    info = json.loads((run / "checkpoints" / "4" / "config.json").read_text())
    assert info["world_size"] == 2
    fingerprints = info["rank_fingerprints"]  # sha256 of every parameter, computed on each rank
    assert len(fingerprints) == 2 and fingerprints[0] == fingerprints[1]
    a, b = weights(tmp_path / "one", 4), weights(run, 4)
    initial = weights_of_fresh_model(a)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6)
    assert any(not torch.equal(a[n], initial[n]) for n in a)  # training moved the weights
    # Both runs saw the same batches and report the same losses (summed over ranks).
    log_one = [json.loads(line) for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    log_two = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["loss"] for m in log_one if "loss" in m] == [m["loss"] for m in log_two if "loss" in m]
    assert len([m for m in log_one if "loss" in m]) == 4
    assert two.stderr.count("nmt: writing run") == 1  # rank 0 alone writes and talks


def weights_of_fresh_model(like: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    from nmtcli.model.config import PRESETS
    from nmtcli.model.transformer import Transformer

    torch.manual_seed(1)
    vocab = like["embedding.tokens.weight"].shape[0]
    return Transformer(PRESETS["tiny"].replace(vocab_size=vocab)).state_dict()


def test_sigkill_mid_run_and_during_a_checkpoint_write_then_resume_gives_the_same_weights(prepared, tmp_path):
    steps = ["--max-steps", "40", "--save-every", "4"]
    straight = nmt_train(prepared, tmp_path / "straight", *steps)
    assert straight.returncode == 0, straight.stderr

    # 1. Killed from outside, at whatever point training has reached after step 6.
    run = tmp_path / "killed"
    process = subprocess.Popen([NMT, "train", "--data", str(prepared), "-o", str(run), *SMALL, *steps],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    metrics = run / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        lines = metrics.read_text().splitlines() if metrics.is_file() else []
        if any(json.loads(line)["step"] >= 6 for line in lines if line.endswith("}")):
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL
    assert not (run / "checkpoints" / "40").exists()

    # 2. Killed by SIGKILL in the middle of writing checkpoint 12 (weights written, state not yet).
    resumed = nmt_train(prepared, run, *steps, env={"NMT_TEST_FAULT": "kill-in-checkpoint:12"})
    assert resumed.returncode == -signal.SIGKILL
    assert (run / "checkpoints" / ".tmp-12" / "model.safetensors").is_file()
    assert not (run / "checkpoints" / "12").exists()

    # 3. Started again: resumes from checkpoint 8 and ends exactly where the uninterrupted run ended.
    final = nmt_train(prepared, run, *steps)
    assert final.returncode == 0, final.stderr
    assert "resuming from" in final.stderr and "checkpoints/8" in final.stderr
    assert not (run / "checkpoints" / ".tmp-12").exists()
    a, b = weights(tmp_path / "straight", 40), weights(run, 40)
    assert all(torch.equal(a[k], b[k]) for k in a)
    ours = (tmp_path / "straight" / "checkpoints" / "40" / "trainer.pt")
    theirs = (run / "checkpoints" / "40" / "trainer.pt")
    s1 = torch.load(ours, weights_only=True)
    s2 = torch.load(theirs, weights_only=True)
    assert s1["stream"] == s2["stream"]
    for p1, p2 in zip(s1["optimizer"]["state"].values(), s2["optimizer"]["state"].values()):
        assert torch.equal(p1["exp_avg"], p2["exp_avg"]) and torch.equal(p1["exp_avg_sq"], p2["exp_avg_sq"])
    # The log reads like one uninterrupted run: each step once.
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in logged if "loss" in m] == list(range(1, 41))
    straight_log = [json.loads(line) for line in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert [m["loss"] for m in logged if "loss" in m] == [m["loss"] for m in straight_log if "loss" in m]


def test_a_failing_rank_stops_every_rank_with_one_message(prepared, tmp_path):
    # No rank waits for the dead one: a rank that did would block in the next all-reduce until gloo's timeout
    # (distributed.TIMEOUT, 15 minutes), which the time-out here, far below it, turns into a failure.
    from nmtcli.training.distributed import TIMEOUT

    hang = TIMEOUT.total_seconds() / 2
    result = subprocess.run(
        [NMT, "train", "--gpus", "2", "--data", str(prepared), "-o", str(tmp_path / "run"), *SMALL, "--max-steps", "50"],
        capture_output=True, text=True, env={**ENV, "NMT_TEST_FAULT": "fail:1:3"}, timeout=hang,
    )
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("nmt: error:")]
    assert errors == ["nmt: error: rank 1: injected failure at step 3 (NMT_TEST_FAULT) (unset NMT_TEST_FAULT)"], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run" / "checkpoints" / "50").exists()


def test_gpus_flag_launches_ranks_that_resume_a_run(two_rank_run, prepared, tmp_path):
    """`--gpus 2 --device cpu` starts two gloo ranks; a second call resumes the run it left."""
    run, first, again = two_rank_run
    assert first.returncode == 0, first.stderr
    assert "2 ranks x 1 batch" in first.stderr
    assert again.returncode == 0, again.stderr
    assert "resuming from" in again.stderr
    info = json.loads((run / "checkpoints" / "4" / "config.json").read_text())
    assert info["world_size"] == 2 and len(set(info["rank_fingerprints"])) == 1
    # One process cannot resume it with another global batch: 1 x 1 batch is not 2 x 1 (in a copy: the run is shared).
    shutil.copytree(run, tmp_path / "run")
    refused = nmt_train(prepared, tmp_path / "run", "--max-steps", "6", "--update-freq", "1")
    assert refused.returncode == 1
    assert "nmt: error:" in refused.stderr and "2 batches per step" in refused.stderr


def test_ranks_whose_batches_overshoot_the_step_get_smaller_batches_and_resume_with_them(prepared, tmp_path):
    """2 ranks x --batch-tokens 300 hold ~440 target tokens, over --tokens-per-step 300: each rank's batch is
    lowered (and the log says so), the checkpoint keeps that batch, and one process resumes the run with it."""
    lowered = ["--tokens-per-step", "300", "--save-every", "2"]
    two = nmt_train(prepared, tmp_path / "run", *lowered, "--max-steps", "2", torchrun=2)
    assert two.returncode == 0, two.stderr
    said = [line for line in two.stderr.splitlines() if "--batch-tokens 300 per GPU" in line]
    assert len(said) == 1 and "2 ranks x one batch would already make a step of" in said[0], two.stderr
    state = torch.load(tmp_path / "run" / "checkpoints" / "2" / "trainer.pt", weights_only=True)
    assert 150 < state["batch_tokens"] < 300 and f"<= {state['batch_tokens']} tokens instead" in said[0]
    assert state["batches_per_step"] == 2
    resumed = nmt_train(prepared, tmp_path / "run", *lowered, "--max-steps", "4")  # 1 process x 2 batches
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming from" in resumed.stderr and "1 rank x 2 batches" in resumed.stderr
    straight = nmt_train(prepared, tmp_path / "straight", *lowered, "--max-steps", "4", torchrun=2)
    assert straight.returncode == 0, straight.stderr
    a, b = weights(tmp_path / "straight", 4), weights(tmp_path / "run", 4)
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=1e-5, atol=1e-6)
