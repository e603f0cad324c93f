"""The `nmt` command as a user meets it: help, scores that match sacreBLEU, line-exact translation, errors.

Most tests run `nmt` in-process (`nmt_main`); start-up (`nmt --help`, `--version`) and streaming through a
pipe run the installed command.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_nmt
from safetensors.torch import load_file

COMMANDS = {
    "prepare": ["--train", "--valid", "--test", "--vocab-size", "--source-lang"],
    "train": ["--preset", "--max-steps", "--batch-tokens", "--update-freq", "--save-every", "--keep-last", "--warmup", "--seed", "--device", "--restart",
              "--tokens-per-step", "--gpus", "--precision", "--compile", "--config", "--valid-bleu", "--patience", "--peak-tflops", "--epochs",
              "--cuda-graphs", "--min-delta"],
    "average": ["--last", "--output"],
    "translate": ["--model", "--beam", "--alpha", "--max-len-a", "--max-len-b", "--input", "--output", "--length-penalty", "--engine", "--revision"],
    "serve": ["--model", "--host", "--port", "--api-key", "--api-keys-file", "--batching", "--max-chars", "--queue-lines", "--timeout"],
    "score": ["--ref", "--metrics", "--json"],
    "info": ["--preset", "--vocab-size", "--json", "--revision"],
    "push": ["--private", "--revision", "--message", "--license"],
    "pull": ["--revision", "--output"],
    "import marian": ["--output", "--revision", "--source-lang", "--target-lang"],
    "export ctranslate2": ["--quantization", "--force", "--revision"],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_explains_its_flags(command, nmt_main):
    result = nmt_main(*command.split(), "--help")
    for flag in COMMANDS[command]:
        assert flag in result.stdout, f"{command} --help lacks {flag}"


def test_top_level_help_lists_every_command():
    result = run_nmt("--help")
    for command in COMMANDS:
        assert command.split()[0] in result.stdout
    assert run_nmt("--version").stdout.startswith("nmt ")


def test_bleu_equals_sacrebleu_to_the_digit(tmp_path, nmt_main):
    ref = ["The cat sat on the mat.", "A quick brown fox jumps.", "Hello, world!", "It is raining today in Berlin."]
    hyp = ["The cat sat on a mat.", "A fast brown fox jumps.", "Hello world!", "It rains today in Berlin."]
    (tmp_path / "ref.txt").write_text("\n".join(ref) + "\n")
    (tmp_path / "hyp.txt").write_text("\n".join(hyp) + "\n")
    sacrebleu = str(Path(sys.executable).with_name("sacrebleu"))
    for metric in ("bleu", "chrf", "ter"):
        theirs = subprocess.run([sacrebleu, str(tmp_path / "ref.txt"), "-i", str(tmp_path / "hyp.txt"), "-m", metric, "-f", "text"],
                                capture_output=True, text=True, check=True).stdout
        ours = nmt_main("score", str(tmp_path / "hyp.txt"), "--ref", str(tmp_path / "ref.txt"), "--metrics", metric).stdout
        assert ours == theirs
    piped = nmt_main("score", "-", "--ref", str(tmp_path / "ref.txt"), "--json", input="\n".join(hyp) + "\n")
    scores = json.loads(piped.stdout)["scores"]
    assert [s["name"] for s in scores] == ["BLEU", "chrF2"]
    assert 0 < scores[0]["score"] < 100


def test_translation_keeps_every_line_in_order(trained_model, corpus, tmp_path, nmt_main):
    lines = (corpus["test"].parent / "test.en").read_text().splitlines()[:20]
    straight = nmt_main("translate", "-m", str(trained_model), input="\n".join(lines) + "\n").stdout.splitlines()
    assert len(straight) == 20
    reordered = nmt_main("translate", "-m", str(trained_model), input="\n".join(reversed(lines)) + "\n").stdout.splitlines()
    assert list(reversed(reordered)) == straight


def test_awkward_input_gives_exactly_one_line_per_line(trained_model, tmp_path, nmt_main):
    long_line = "the dog sees the cat " * 400  # 2,000 tokens: beyond the model's 1,024 positions
    raw = b"\xef\xbb\xbfthe dog sees a cat\r\n\n   \nbad \xff byte\n" + long_line.encode() + b"\nlast line without newline"
    # Characters Python's str.splitlines() would split on, NUL, tabs, a lone CR and a second BOM.
    raw = raw.replace(b"last line", b"a\x00nul\n\t \t\n\r\nthe\xe2\x80\xa8cat\x0bsees\x0c\x1c\x85 a dog\n\xef\xbb\xbfbom\nlast line")
    result = nmt_main("translate", "-m", str(trained_model), input=raw)
    out = result.stdout.decode().split("\n")
    assert out[-1] == "" and len(out) - 1 == 11 == raw.count(b"\n") + 1
    assert out[6] == out[7] == ""  # whitespace-only and lone-CR lines stay empty
    assert out[1] == "" and out[2] == ""  # empty and blank lines stay empty
    # Lines 4 and 6 must get their lines (and line 4 a warning); what a 300-step model of the toy
    # corpus makes of "bad \ufffd byte" or out-of-vocabulary words may legitimately be empty.
    assert out[0] and out[4]
    stderr = result.stderr.decode()
    assert "line 4: invalid UTF-8" in stderr and "line 5:" in stderr and "truncated" in stderr


def test_translate_writes_an_output_file(trained_model, tmp_path, nmt_main):
    (tmp_path / "in.txt").write_text("the dog sees a cat\nthe red car visits every house\n")
    nmt_main("translate", "-m", str(trained_model), "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt"))
    assert len((tmp_path / "out.txt").read_text().splitlines()) == 2
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary left behind


def test_user_errors_are_one_line_without_traceback(tmp_path, nmt_main):
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    (tmp_path / "b.txt").write_text("one\n")
    cases = [
        (["score", str(tmp_path / "a.txt"), "--ref", str(tmp_path / "b.txt")], "has 2 lines but the reference has 1"),
        (["score", str(tmp_path / "missing.txt"), "--ref", str(tmp_path / "b.txt")], "does not exist"),
        (["prepare", "--train", str(tmp_path / "nope"), "--valid", str(tmp_path / "nope")], "does not exist"),
        (["translate", "-m", str(tmp_path)], "has no config.json"),
        (["info", str(tmp_path)], "has no config.json"),
        (["average", str(tmp_path)], "not a checkpoint dir"),
        (["train", "--data", str(tmp_path)], "not a prepared data dir"),
    ]
    for args, message in cases:
        result = nmt_main(*args, cwd=tmp_path, check=False)
        assert result.returncode == 1, args
        assert "Traceback" not in result.stderr
        error_lines = [line for line in result.stderr.splitlines() if line.startswith("nmt: error:")]
        assert len(error_lines) == 1 and message in error_lines[0], result.stderr
    debug = nmt_main("--debug", "info", str(tmp_path), check=False)
    assert debug.returncode == 1 and "Traceback" in debug.stderr


def test_no_gpu_is_a_clear_error(trained_model, nmt_main):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = nmt_main("translate", "-m", str(trained_model), "--device", "cuda", input="x\n", check=False)
    assert result.returncode == 1 and "no CUDA GPU is available" in result.stderr


def test_corrupt_weights_are_detected(trained_model, tmp_path, nmt_main):
    broken = tmp_path / "model"
    shutil.copytree(trained_model, broken)
    data = (broken / "model.safetensors").read_bytes()
    (broken / "model.safetensors").write_bytes(data[: len(data) // 2])
    result = nmt_main("translate", "-m", str(broken), input="x\n", check=False)
    assert result.returncode == 1 and "not a readable safetensors file" in result.stderr


def test_workspace_defaults_pick_the_newest_and_stop_when_it_is_ambiguous(trained_model, tmp_path, nmt_main):
    models = tmp_path / "models"
    for name in ("first", "second"):
        shutil.copytree(trained_model, models / name)
    os.utime(models / "first" / "config.json", (1_000_000_000, 1_000_000_000))
    picked = nmt_main("translate", cwd=tmp_path, input="the dog sees a cat\n")
    assert "using model models/second (newest of 2: models/first)" in picked.stderr
    os.utime(models / "second" / "config.json", (1_000_000_000, 1_000_000_000))
    tied = nmt_main("translate", cwd=tmp_path, input="x\n", check=False)
    assert tied.returncode == 1 and "equally recent" in tied.stderr and "models/first" in tied.stderr
    chosen = nmt_main("translate", cwd=tmp_path, input="x\n", env={"NMT_MODEL": str(models / "first")})
    assert "from $NMT_MODEL" in chosen.stderr
    empty = nmt_main("translate", cwd=tmp_path / "models", input="x\n", check=False)
    assert empty.returncode == 1 and "run `nmt average` first" in empty.stderr


def test_info_reports_parameters_and_training(trained_model, nmt_main):
    preset = json.loads(nmt_main("info", "--preset", "base", "--json").stdout)
    assert 63e6 < preset["parameters"] < 66e6
    small = nmt_main("info", "--preset", "small", "--vocab-size", "10000")
    assert "36,663,296" in small.stdout and "6+6 layers, d_model 512, d_ff 1024, 4 heads" in small.stdout
    assert "50 epochs of the training data" in small.stdout and "peak lr of 5.00e-04" in small.stdout
    info = json.loads(nmt_main("info", str(trained_model), "--json").stdout)
    assert info["training"]["steps"] == 300 and info["training"]["averaged_checkpoints"] == [100, 200, 300]
    assert info["languages"] == {"source": "en", "target": "de"}
    weights = load_file(str(trained_model / "model.safetensors"))
    assert info["parameters"] == sum(t.numel() for t in weights.values())


def test_averaging_checkpoints_of_different_shapes_is_refused(prepared, tmp_path, nmt_main):
    from nmtcli.training.settings import train_settings_for
    from nmtcli.training.trainer import Trainer

    config, settings = train_settings_for("tiny", max_steps=1, batch_tokens=300, device="cpu")
    Trainer(tmp_path / "a", prepared, config, settings).run()
    Trainer(tmp_path / "b", prepared, config.replace(d_ff=256), settings).run()
    result = nmt_main("average", str(tmp_path / "a/checkpoints/1"), str(tmp_path / "b/checkpoints/1"), "-o", str(tmp_path / "m"), check=False)
    assert result.returncode == 1 and "different model configs" in result.stderr
    assert not (tmp_path / "m").exists()


def test_json_output_carries_scores_tokens_and_nbest(trained_model, nmt_main):
    result = nmt_main("translate", "-m", str(trained_model), "--nbest", "3", "--output-format", "json",
                     input="the dog sees a cat\n\nthe red car visits every house\n")
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(records) == 3
    assert records[1] == {"translation": "", "score": None, "log_prob": None, "tokens": [], "confidence": None, "nbest": []}
    for record in (records[0], records[2]):
        assert len(record["nbest"]) == 3 and all(0 <= n["confidence"] <= 1 for n in record["nbest"])
        assert record["translation"] == record["nbest"][0]["translation"]
        scores = [n["score"] for n in record["nbest"]]
        assert scores == sorted(scores, reverse=True) and all(s < 0 for s in scores)
        assert "".join(record["tokens"]).replace("\u2581", " ").strip() == record["translation"]
    text = nmt_main("translate", "-m", str(trained_model), input="the dog sees a cat\n").stdout.strip()
    assert records[0]["translation"] == text


def test_an_empty_line_has_every_key_of_a_translated_lines_record(trained_model, nmt_main, tmp_path):
    """--alignment: an empty or blank line, and a line that is only a protected span (nothing for the model to read),
    get "alignment": "" where every other line's record has its links: a program reading the records finds the same
    keys in each (they had none). The same through a file in chunks (-i -o), and --split-sentences' sentences."""
    lines = ["the dog sees a cat", "", "   ", "{{name}}", "the red car visits every house"]
    text = "".join(line + "\n" for line in lines)
    for unit in ("words", "pieces"):
        out = nmt_main("translate", "-m", str(trained_model), "--output-format", "json", "--alignment", unit, "--nbest", "2", input=text)
        records = [json.loads(line) for line in out.stdout.splitlines()]
        assert len(records) == 5 and all(set(r) == set(records[0]) for r in records), records
        assert [r["alignment"] for r in records[1:4]] == ["", "", ""] and records[0]["alignment"] and records[4]["alignment"]
        assert [r["translation"] for r in records[1:4]] == ["", "", "{{name}}"] and records[3]["nbest"][0]["alignment"] == ""
    (tmp_path / "in.en").write_text(text)
    nmt_main("translate", "-m", str(trained_model), "--output-format", "json", "--alignment", "pieces", "--nbest", "2",
             "-i", str(tmp_path / "in.en"), "-o", str(tmp_path / "out.jsonl"), "--chunk-lines", "2")
    assert [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()] == records
    split = nmt_main("translate", "-m", str(trained_model), "--output-format", "json", "--alignment", "words", "--split-sentences",
                     input="the dog sees a cat. {{name}}\n\n")
    joined = [json.loads(line) for line in split.stdout.splitlines()]
    assert set(joined[0]) == set(joined[1]) and joined[1]["sentences"] == []
    assert all("alignment" in sentence for sentence in joined[0]["sentences"]), joined


def test_int8_translates_every_line_in_order(trained_model, nmt_main):
    text = "the dog sees a cat\n\nthe red car visits every house\n"
    int8 = nmt_main("translate", "-m", str(trained_model), "--device", "cpu", "--precision", "int8", input=text).stdout.splitlines()
    assert len(int8) == 3 and int8[1] == "" and int8[0] and int8[2] and int8[0] != int8[2]


def test_search_flags_that_cannot_work_are_refused(trained_model, nmt_main):
    cases = [
        (["--nbest", "2"], "--nbest above 1 needs --output-format json"),
        (["--nbest", "5", "--beam", "4", "--output-format", "json"], "exceeds --beam"),
        (["--precision", "bf16", "--device", "cpu"], "needs a GPU"),
        (["--length-penalty", "linear"], "unknown --length-penalty"),
    ]
    for flags, message in cases:
        result = nmt_main("translate", "-m", str(trained_model), *flags, input="x\n", check=False)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr, flags


def test_output_starts_before_input_ends(trained_model):
    from conftest import NMT

    process = subprocess.Popen([NMT, "translate", "-m", str(trained_model), "--window", "2"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        process.stdin.write("the dog sees a cat\nthe red car visits every house\n")
        process.stdin.flush()
        first = _read_line_within(process.stdout, seconds=60)
        assert first and first.endswith("\n"), "no output while stdin was still open"
        process.stdin.write("a bird hears the king\n")
        process.stdin.close()
        rest = process.stdout.read().splitlines()
        assert len(rest) == 2
    finally:
        process.kill()
        process.wait()


def _read_line_within(stream, seconds: float) -> str | None:
    import threading

    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(seconds)
    return line[0] if line else None


def test_min_confidence_flags_lines_below_it_and_counts_them(trained_model, nmt_main):
    lines = "the dog sees a cat\n\nthe red car visits every house\n"
    plain = nmt_main("translate", "-m", str(trained_model), "--output-format", "json", input=lines)
    confidences = [json.loads(line)["confidence"] for line in plain.stdout.splitlines()]
    middle = (confidences[0] + confidences[2]) / 2  # one line above it, one below
    flagged = nmt_main("translate", "-m", str(trained_model), "--output-format", "json", "--min-confidence", f"{middle}", input=lines)
    records = [json.loads(line) for line in flagged.stdout.splitlines()]
    assert [r["low_confidence"] for r in records] == [c is not None and c < middle for c in confidences]
    assert [r["translation"] for r in records] == [json.loads(line)["translation"] for line in plain.stdout.splitlines()]  # still written
    assert "nmt: 1 of 2 translated line(s) below --min-confidence" in flagged.stderr
    text = nmt_main("translate", "-m", str(trained_model), "--min-confidence", "1", input=lines)
    assert len(text.stdout.splitlines()) == 3 and "nmt: 2 of 2 translated line(s) below --min-confidence 1" in text.stderr
