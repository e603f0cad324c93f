"""`nmt info` on a model dir, a run dir of `nmt train`, a Hub id, and on things that are none of these."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import nmt_forked, nmt_in_process
from hub_server import FakeHub
from safetensors.torch import load_file

from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import count_parameters

TOKEN = "hf_test_alice"


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def info(*args: str, **kwargs) -> dict:
    """`nmt info ARGS --json`, in-process."""
    return json.loads(nmt_in_process("info", *args, "--json", **kwargs).stdout)


def hub_info(*args: str, env: dict) -> dict:
    """`nmt info ARGS --json` against the loopback Hub: a process of its own (huggingface_hub reads $HF_* when imported)."""
    return json.loads(nmt_forked("info", *args, "--json", env=env).stdout)


def error_line(result) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("nmt: error:")]
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def run_dir(prepared, tmp_path_factory) -> Path:
    """4 tiny steps, a checkpoint and a validation (perplexity and BLEU on 2 lines) every 2: a few seconds, in-process."""
    run = tmp_path_factory.mktemp("info-run") / "run"
    nmt_in_process("train", "--data", str(prepared), "--preset", "tiny", "--max-steps", "4", "--save-every", "2", "--valid-every", "2",
            "--valid-bleu", "2", "--log-every", "2", "--batch-tokens", "512", "--device", "cpu", "-o", str(run))
    return run


@pytest.fixture(scope="module")
def model_info(random_model) -> tuple[dict, str, str]:
    """(JSON report, table, stderr of the JSON run) of `nmt info` on the random model dir."""
    result = nmt_in_process("info", str(random_model), "--json")
    return json.loads(result.stdout), nmt_in_process("info", str(random_model)).stdout, result.stderr


@pytest.fixture(scope="module")
def run_info(run_dir) -> dict:
    return info(str(run_dir))


# --- model dirs ----------------------------------------------------------------------------------


def test_model_dir_shows_each_file_with_its_sha256_and_size(random_model, model_info):
    report, table, _ = model_info
    assert report["kind"] == "model_dir" and report["model_dir"] == str(random_model)
    on_disk = sorted(p.name for p in random_model.iterdir() if p.is_file())
    assert sorted(report["files"]) == sorted(report["sha256"]) == on_disk
    for name in on_disk:
        assert report["files"][name] == (random_model / name).stat().st_size
        assert report["sha256"][name] == sha256(random_model / name)
    assert report["sha256"]["model.safetensors"] in table


def test_model_dir_shows_parameters_vocabulary_and_recorded_bleu(random_model, model_info):
    report, table, _ = model_info
    config = json.loads((random_model / "config.json").read_text())
    assert report["model"] == config["model"] and report["languages"] == {"source": "en", "target": "de"}
    weights = load_file(str(random_model / "model.safetensors"))
    assert report["parameters"] == count_parameters(ModelConfig.from_dict(config["model"])) == sum(t.numel() for t in weights.values())
    assert report["sentencepiece_pieces"] == config["model"]["vocab_size"] == 1000
    assert report["scores"]["en-de/test"]["BLEU"]["score"] == 12.3
    assert f"{report['parameters']:,}" in table and "BLEU 12.30, chrF2 40.10" in table


def test_a_student_shows_its_encoder_and_decoder_depths_in_info_and_both_cards(random_student):
    from nmtcli.card import hub_card

    report = info(str(random_student))
    assert (report["model"]["layers"], report["model"]["decoder_layers"]) == (3, 1)
    assert report["parameters"] == count_parameters(ModelConfig.from_dict(report["model"]))
    assert "3+1 layers, d_model 64" in nmt_in_process("info", str(random_student)).stdout
    assert "- Architecture: 3+1 layers, d_model 64" in (random_student / "README.md").read_text()
    values = json.loads((random_student / "config.json").read_text())
    assert "3+1 layers, d_model 64" in hub_card(values, "alice/student-tiny-en-de", {})


def test_a_student_preset_is_described_with_its_depths_and_recipe():
    preset = info("--preset", "student-tiny", "--vocab-size", "32000")
    assert preset["preset"] == "student-tiny" and preset["parameters"] == 17_138_688
    assert preset["recipe"]["epochs"] == 50 and preset["recipe"]["patience"] == 5 and preset["recipe"]["valid_bleu"] == 500
    table = nmt_in_process("info", "--preset", "student-base").stdout
    assert "6+2 layers, d_model 512, d_ff 2048, 8 heads, post-norm" in table and "early stop after 5 validations" in table


def test_hashing_streams_in_1_mib_pieces_and_matches_git(tmp_path):
    from nmtcli.checksums import file_digests

    path = tmp_path / "weights.bin"
    path.write_bytes(os.urandom((5 << 19) + 7))  # 2.5 MiB and a bit
    calls = []
    digests = file_digests(path, lambda name, done, total: calls.append((name, done, total)), git_blob=True)
    size = path.stat().st_size
    assert calls == [("weights.bin", 1 << 20, size), ("weights.bin", 2 << 20, size), ("weights.bin", size, size)]
    assert digests["sha256"] == sha256(path)
    git = shutil.which("git")
    expected_blob = (subprocess.run([git, "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip() if git
                     else hashlib.sha1(b"blob %d\0" % size + path.read_bytes()).hexdigest())
    assert digests["blob_id"] == expected_blob


def test_large_files_get_a_progress_bar(random_model, model_info, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(random_model, model)
    with open(model / "big.bin", "wb") as f:
        f.truncate(33 << 20)  # sparse: 33 MiB of zeros without writing them
    result = nmt_in_process("info", str(model), "--json")
    assert "sha256 big.bin" in result.stderr and "33/33" in result.stderr
    assert json.loads(result.stdout)["sha256"]["big.bin"] == sha256(model / "big.bin")
    assert "sha256" not in model_info[2]  # small files: no bar


def test_no_argument_describes_the_default_model(random_model, tmp_path):
    models = tmp_path / "models"
    for name in ("old", "new"):
        shutil.copytree(random_model, models / name)
    os.utime(models / "old" / "config.json", (1_000_000_000, 1_000_000_000))
    picked = nmt_in_process("info", "--json", cwd=tmp_path)
    assert json.loads(picked.stdout)["model_dir"] == "models/new" and "using model models/new" in picked.stderr
    chosen = nmt_in_process("info", "--json", cwd=tmp_path, env={"NMT_MODEL": str(models / "old")})
    assert json.loads(chosen.stdout)["model_dir"] == str(models / "old") and "from $NMT_MODEL" in chosen.stderr
    empty = nmt_in_process("info", cwd=models / "new", check=False)
    assert "no model found" in error_line(empty) and "pass a model dir, a run dir or a Hub id" in error_line(empty)


def test_what_is_neither_model_run_nor_hub_id_is_one_clear_error(prepared, random_model, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "config.json").write_text('{"architectures": ["MarianMTModel"]}')
    expected = "(pass a model dir, a run dir or a Hub id OWNER/NAME"
    cases = [
        (str(tmp_path / "missing"), "does not exist"),
        (str(tmp_path / "empty"), "has no config.json: it is not a model dir or a run dir"),
        (str(prepared), "is a prepared data dir"),
        (str(random_model / "config.json"), "is a file, not a model dir or a run dir"),
        (str(tmp_path / "foreign"), "config.json is not nmt's"),
    ]
    for target, message in cases:
        line = error_line(nmt_in_process("info", target, check=False))
        assert message in line and expected in line, line
    line = error_line(nmt_in_process("info", str(random_model), "--revision", "v1", check=False))
    assert "--revision needs a Hub id" in line


# --- run dirs ------------------------------------------------------------------------------------


def test_run_dir_shows_steps_checkpoints_and_validation(run_dir, run_info, prepared):
    report = run_info
    config = json.loads((run_dir / "config.json").read_text())
    assert report["kind"] == "run_dir" and report["training"]["preset"] == "tiny"
    assert report["data"]["dir"] == str(prepared.resolve()) and report["data"]["train_pairs"] == config["data"]["train_pairs"]
    assert report["steps"] == {"done": 4, "max": 4, "logged": 4} and report["status"] == "finished"
    weights = load_file(str(run_dir / "checkpoints" / "4" / "model.safetensors"))
    assert report["parameters"] == count_parameters(ModelConfig.from_dict(config["model"])) == sum(t.numel() for t in weights.values())
    assert [c["step"] for c in report["checkpoints"]] == [2, 4]
    for c in report["checkpoints"]:
        assert c["size"] == sum(p.stat().st_size for p in (run_dir / "checkpoints" / str(c["step"])).iterdir())
    log = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    validations = [e for e in log if "valid_nll" in e]
    assert [v["step"] for v in validations] == [2, 4] and report["validation"] == validations[-1]
    assert "valid_bleu" in report["validation"]
    best = json.loads((run_dir / "checkpoints" / "best" / "config.json").read_text())["best"]
    assert {k: report["best"][k] for k in ("metric", "value", "step")} == best
    for name in ("config.json", "sentencepiece.model", "metrics.jsonl"):
        assert report["sha256"][name] == sha256(run_dir / name)
    table = nmt_in_process("info", str(run_dir)).stdout
    assert "4 of 4 done, finished" in table and f"valid ppl {validations[-1]['valid_ppl']:.2f}" in table


def test_run_dir_says_what_average_would_pick_and_how_to_resume(run_dir, run_info, tmp_path):
    report = run_info
    # It validated BLEU: `nmt average` takes the checkpoints up to its best validation.
    best = report["best"]
    assert best["metric"] == "valid_bleu" and best["step"] in (2, 4)
    assert report["average"] == {"last": 5, "checkpoints": [2, 4][:best["step"] // 2], "output": f"models/{run_dir.name}",
                                 "which": f"up to the best validation (step {best['step']}, BLEU {best['value']:.2f})",
                                 "command": f"nmt average {run_dir}"}
    resume = report["resume"]
    assert resume["possible"] and resume["from_step"] == 4 and "max_steps (4) is reached" in resume["note"]
    # The command it prints resumes the run (here with more steps) from the newest checkpoint.
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    command = info(str(run))["resume"]["command"].split()
    assert command[:2] == ["nmt", "train"]
    resumed = nmt_in_process(*command[1:], "--max-steps", "6")
    assert f"resuming from {run}/checkpoints/4" in resumed.stderr
    after = info(str(run))
    assert after["steps"]["done"] == 6 and [c["step"] for c in after["checkpoints"]] == [2, 4, 6]
    assert after["average"]["checkpoints"] == [2, 4, 6][:after["best"]["step"] // 2]
    nmt_in_process("average", str(run), "-o", str(tmp_path / "model"))
    assert json.loads((tmp_path / "model" / "config.json").read_text())["training"]["averaged_checkpoints"] == after["average"]["checkpoints"]


def test_run_dir_that_cannot_resume_says_why(run_dir, tmp_path):
    interrupted = tmp_path / "interrupted"
    shutil.copytree(run_dir, interrupted)
    shutil.rmtree(interrupted / "checkpoints" / "4")  # as if killed between step 2's and step 4's checkpoints
    report = info(str(interrupted))
    assert report["status"] == "unfinished" and report["steps"]["done"] == 2 and report["steps"]["logged"] == 4
    assert report["resume"]["possible"] and report["resume"]["from_step"] == 2

    moved = tmp_path / "moved"
    shutil.copytree(run_dir, moved)
    config = json.loads((moved / "config.json").read_text())
    config["data"]["dir"] = str(tmp_path / "gone")
    (moved / "config.json").write_text(json.dumps(config))
    report = info(str(moved))
    assert report["resume"] == {"possible": False, "reason": f"its data dir {tmp_path / 'gone'} is gone (resuming needs the same prepared data)"}

    shutil.rmtree(moved / "checkpoints")
    report = info(str(moved))
    assert report["status"] == "not_started" and not report["resume"]["possible"] and report["average"]["checkpoints"] == []


# --- Hub models ----------------------------------------------------------------------------------


@pytest.fixture
def hub_env(tmp_path):
    with FakeHub({TOKEN: "alice"}) as hub:
        yield hub, {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN": TOKEN,
                    "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def test_hub_model_files_are_checked_against_the_hubs_own_checksums(random_model, model_info, hub_env):
    hub, env = hub_env
    nmt_forked("push", str(random_model), "alice/tiny-en-de", env=env)
    report = hub_info("alice/tiny-en-de", env=env)
    checked = report["hub"]
    assert report["kind"] == "hub_model" and checked["source"] == "hub" and checked["match"] is True
    assert checked["commit"] == hub.repos["alice/tiny-en-de"].branches["main"]
    weights = checked["files"]["model.safetensors"]
    assert weights["lfs"] is True and weights["expected"] == weights["actual"] == f"sha256:{sha256(random_model / 'model.safetensors')}"
    config = (random_model / "config.json").read_bytes()
    git_id = hashlib.sha1(b"blob %d\0" % len(config) + config).hexdigest()
    assert checked["files"]["config.json"] == {"lfs": False, "expected": f"git-sha1:{git_id}", "actual": f"git-sha1:{git_id}", "match": True}
    for name in ("model.safetensors", "sentencepiece.model", "scores.json", "config.json"):
        assert report["sha256"][name] == sha256(random_model / name)
    assert report["parameters"] == model_info[0]["parameters"] and report["scores"] == model_info[0]["scores"]
    table = nmt_forked("info", "alice/tiny-en-de", env=env).stdout
    assert "every file matches (the Hub's listing)" in table and "ok (LFS sha256)" in table and "ok (git blob id)" in table


def test_a_corrupted_copy_in_the_hub_cache_is_reported_as_mismatching(random_model, hub_env, tmp_path):
    hub, env = hub_env
    nmt_forked("push", str(random_model), "alice/tiny-en-de", env=env)
    nmt_forked("pull", "alice/tiny-en-de", env=env)  # into the Hub cache: snapshots/<commit>/ links to blobs/<ETag>
    commit = hub.repos["alice/tiny-en-de"].branches["main"]
    link = tmp_path / "hf-home" / "hub" / "models--alice--tiny-en-de" / "snapshots" / commit / "model.safetensors"
    blob = link.resolve()
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.chmod(0o644)
    blob.write_bytes(bytes(data))

    result = nmt_forked("info", "alice/tiny-en-de", "--json", env=env, check=False)
    assert result.returncode == 1
    checked = json.loads(result.stdout)["hub"]  # the whole report comes before the error
    assert checked["source"] == "hub" and checked["match"] is False
    assert checked["files"]["model.safetensors"]["match"] is False
    assert checked["files"]["model.safetensors"]["actual"] == f"sha256:{hashlib.sha256(bytes(data)).hexdigest()}"
    assert checked["files"]["model.safetensors"]["expected"] == f"sha256:{sha256(random_model / 'model.safetensors')}"
    assert all(r["match"] for name, r in checked["files"].items() if name != "model.safetensors")
    line = error_line(result)
    assert f"1 file(s) in the Hub cache do not match alice/tiny-en-de@{commit[:12]}" in line and f"delete {blob} and run `nmt pull" in line

    # Offline, the ETags the cache recorded at download time catch it all the same.
    offline = nmt_forked("info", "alice/tiny-en-de", "--json", env={**env, "HF_HUB_OFFLINE": "1"}, check=False)
    assert offline.returncode == 1 and "not with the Hub (HF_HUB_OFFLINE is set)" in offline.stderr
    checked = json.loads(offline.stdout)["hub"]
    assert checked["source"] == "hub cache" and checked["files"]["model.safetensors"]["match"] is False
    assert checked["files"]["config.json"]["match"] is True and checked["files"]["model.safetensors"]["lfs"] is True

    # Doing what the error says repairs the cache.
    blob.unlink()
    nmt_forked("pull", "alice/tiny-en-de", env=env)
    assert blob.read_bytes() == (random_model / "model.safetensors").read_bytes()
    assert hub_info("alice/tiny-en-de", env=env)["hub"]["match"] is True
