"""Back-translation in `nmt prepare` (issue 53): target-side text translated by a reverse model, tagged, mixed with the
real pairs at a stated ratio, recorded in the manifest; resumable; bad input refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import nmt_in_process, run_nmt

from nmtcli.data.backtranslation import model_fingerprint, upsample_factor
from nmtcli.data.shards import Shard
from nmtcli.data.text import load_sentencepiece

REAL, MONO = 300, 600  # real pairs, and target-side lines of other training pairs (the rule task's)


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def small(corpus, tmp_path_factory) -> dict[str, Path]:
    """REAL training pairs, MONO German lines of other pairs, and the corpus's valid split."""
    root = tmp_path_factory.mktemp("bt-corpus")
    for lang in ("en", "de"):
        lines = lines_of(Path(f"{corpus['train']}.{lang}"))
        (root / f"train.{lang}").write_text("".join(line + "\n" for line in lines[:REAL]), encoding="utf-8")
        other = "mono.de" if lang == "de" else "english.en"  # the other pairs' German, and (a wrong --target-mono) English
        (root / other).write_text("".join(line + "\n" for line in lines[REAL:REAL + MONO]), encoding="utf-8")
    return {"train": root / "train", "valid": corpus["valid"], "mono": root / "mono.de", "english": root / "english.en"}


@pytest.fixture(scope="module")
def reverse_model(trained_model, tmp_path_factory) -> Path:
    """The session's trained model, declared de->en: a model that reads German and stops, what the mechanics need
    (the quality of a back-translation is studies/backtranslation.py's)."""
    out = tmp_path_factory.mktemp("reverse") / "tiny-de-en"
    shutil.copytree(trained_model, out)
    config = json.loads((out / "config.json").read_text())
    config["languages"] = {"source": "de", "target": "en"}
    (out / "config.json").write_text(json.dumps(config))
    return out


def prepare_args(small: dict[str, Path], reverse_model: Path, out: Path, *more: str) -> list[str]:
    return ["prepare", "--train", str(small["train"]), "--valid", str(small["valid"]), "--vocab-size", "300", "-o", str(out),
            "--target-mono", str(small["mono"]), "--bt-model", str(reverse_model), "--chunk-pairs", "100", *more]


@pytest.fixture(scope="module")
def tagged(small, reverse_model, tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("bt-data") / "tagged"
    result = nmt_in_process(*prepare_args(small, reverse_model, out))
    return out, result.stderr


def manifest_of(data: Path) -> dict:
    return json.loads((data / "manifest.json").read_text())


def sources_of(data: Path) -> list[np.ndarray]:
    vocab = manifest_of(data)["vocab_size"]
    shard = Shard(data / "train.en", vocab)
    return [shard[i] for i in range(len(shard))]


def test_synthetic_sources_start_with_the_tag_and_real_ones_do_not(tagged):
    data, stderr = tagged
    back = manifest_of(data)["backtranslation"]
    sp = load_sentencepiece(data / "sentencepiece.model")
    tag = back["tag_id"]
    assert back["tag"] == "<BT>" and sp.id_to_piece(tag) == "<BT>" and sp.is_control(tag)
    sources = sources_of(data)
    real, synthetic = back["train_ranges"]["real"], back["train_ranges"]["synthetic"]
    assert real == [0, back["real_pairs"] * back["upsample"]] and synthetic[1] == len(sources) and back["pairs"] > 0
    assert all(s[0] != tag and tag not in s for s in sources[:real[1]])
    assert all(s[0] == tag and tag not in s[1:] for s in sources[synthetic[0]:])
    # The synthetic pairs' sources are the reverse model's lines, after the tag: the first kept one is the data dir's line.
    first = lines_of(data / "backtranslation.en")
    assert sp.decode(sources[synthetic[0]][1:].tolist()) in first
    assert "back-translation:" in stderr and "tagged <BT>" in stderr


def test_the_tag_is_one_piece_that_no_text_makes(tagged):
    data, _ = tagged
    sp = load_sentencepiece(data / "sentencepiece.model")
    tag = manifest_of(data)["backtranslation"]["tag_id"]
    for text in ("<BT> der hund sieht", "der <BT> hund", "<BT>"):
        assert tag not in sp.encode(text)


def test_the_manifest_records_the_back_translation(tagged, reverse_model, small):
    data, _ = tagged
    manifest = manifest_of(data)
    back = manifest["backtranslation"]
    assert back["reverse_model"] == {"path": str(reverse_model.resolve()), "fingerprint": model_fingerprint(reverse_model)}
    assert back["method"] == {"search": "beam", "beam": 5}
    assert back["monolingual"][0]["path"] == str(small["mono"].resolve()) and back["input_lines"] == MONO
    assert back["ratio"] == 1.0 and back["upsample"] == upsample_factor(back["real_pairs"], back["pairs"], 1.0)
    assert back["real_pairs"] == manifest["splits"]["train"]["input_pairs"] - sum(manifest["splits"]["train"]["dropped"].values())
    # every synthetic pair is accounted for: kept, or dropped by a named filter
    assert back["pairs"] + sum(back["dropped"].values()) == MONO
    assert back["filters"][0] == {"filter": "empty", "before": MONO, "after": MONO}
    # the real pairs are judged for misalignment, the synthetic ones (a model's translation of each line) are not
    assert "misaligned" in [f["filter"] for f in manifest["splits"]["train"]["filters"]]
    assert "misaligned" not in [f["filter"] for f in back["filters"]] and "misaligned" not in back["dropped"]
    assert manifest["splits"]["train"]["pairs"] == back["real_pairs"] * back["upsample"] + back["pairs"]
    for name in ("backtranslation.en", "backtranslation.de", "backtranslation.json"):
        assert name in manifest["files"]
    assert lines_of(data / "backtranslation.de") == lines_of(small["mono"])
    assert len(lines_of(data / "backtranslation.en")) == MONO


def test_real_pairs_are_upsampled_to_the_ratio_and_the_translation_reused(tagged, small, reverse_model, tmp_path):
    data, _ = tagged
    out = tmp_path / "ratio"
    out.mkdir()
    for name in ("backtranslation.en", "backtranslation.de", "backtranslation.json"):
        shutil.copy(data / name, out / name)
    result = nmt_in_process(*prepare_args(small, reverse_model, out, "--bt-ratio", "10", "--no-bt-tag"))
    assert "reused" in result.stderr and "$ nmt translate" not in result.stderr
    back, first = manifest_of(out)["backtranslation"], manifest_of(data)["backtranslation"]
    assert back["pairs"] == first["pairs"] and back["real_pairs"] == first["real_pairs"]
    r, s = back["real_pairs"], back["pairs"]
    assert back["upsample"] == max(1, round(10 * s / r)) and back["upsample"] > 1
    assert back["tag"] is None and back["tag_id"] is None
    sources = sources_of(out)
    assert len(sources) == r * back["upsample"] + s
    for k in range(1, back["upsample"]):  # each copy of the real pairs is the first, pair for pair
        assert all(np.array_equal(a, b) for a, b in zip(sources[:r], sources[k * r:(k + 1) * r]))
    sp = load_sentencepiece(out / "sentencepiece.model")
    assert sp.piece_to_id("<BT>") == sp.unk_id()  # untagged: no tag in the vocabulary


def test_a_killed_back_translation_resumes_without_losing_or_doubling_a_line(tagged, small, reverse_model, tmp_path):
    data, _ = tagged
    out = tmp_path / "killed"
    args = prepare_args(small, reverse_model, out)
    # Renames: the joined monolingual text, the attempt's record, job.json, then each chunk's text and record; killed
    # after chunk 0.
    killed = run_nmt(*args, env={"NMT_TEST_FAULT": "kill-after-rename:5"}, check=False)
    assert killed.returncode == -9 and (out / "backtranslation.en.parts" / "000000.json").exists()
    assert not (out / "manifest.json").exists() and not (out / "backtranslation.json").exists()
    again = nmt_in_process(*args)
    assert "resuming" in again.stderr and "100 of 600 lines already translated" in again.stderr
    assert lines_of(out / "backtranslation.en") == lines_of(data / "backtranslation.en")
    assert manifest_of(out)["backtranslation"]["pairs"] == manifest_of(data)["backtranslation"]["pairs"]
    # The chunk taken up is the manifest's (the top-level count is the encode stage's), the uninterrupted run's none.
    assert manifest_of(out)["backtranslation"]["resumed_chunks"] == 1 and manifest_of(data)["backtranslation"]["resumed_chunks"] == 0
    # A second run with the same inputs: nothing translated, nothing prepared.
    third = nmt_in_process(*args)
    assert "reused" in third.stderr and "already prepared" in third.stderr


def test_a_model_trained_on_tagged_data_translates_plain_input(tagged, tmp_path):
    """Nothing at translation time adds the tag: the tokenizer of the model's dir never makes it, whatever the input."""
    from nmtcli.inference.translator import Translator
    from nmtcli.training.average import average_checkpoints, checkpoints_to_average
    from nmtcli.training.settings import train_settings_for
    from nmtcli.training.trainer import Trainer

    data, _ = tagged
    config, settings = train_settings_for("tiny", max_steps=1, device="cpu")
    Trainer(tmp_path / "run", data, config, settings).run()
    average_checkpoints(checkpoints_to_average(tmp_path / "run", 5)[0], tmp_path / "model")
    tag = manifest_of(data)["backtranslation"]["tag_id"]
    translator = Translator(tmp_path / "model", "cpu")
    for text in ("the dog sees a cat", "<BT> the dog sees a cat"):
        assert tag not in translator.tokenizer.encode([text])[0]
    result = nmt_in_process("translate", "-m", str(tmp_path / "model"), "--max-len-b", "5", input="the dog sees a cat\n")
    assert len(result.stdout.split("\n")) == 2


@pytest.mark.parametrize("case", ["wrong language", "reverse model of other languages", "empty", "missing", "no reverse model",
                                  "vocab-from tagged", "bad sampling", "tag \u2581", "tag <pad>", "tag </s>", "empty tag",
                                  "tag with a space", "ratio inf"])
def test_bad_back_translation_input_is_one_line(case, small, reverse_model, trained_model, tmp_path):
    mono, model, more = str(small["mono"]), str(reverse_model), []
    expected = {"wrong language": "looks like 'en' text, not 'de'", "reverse model of other languages": "translates en->de, but back-translation",
                "empty": "is empty", "missing": "does not exist", "no reverse model": "--target-mono without --bt-model",
                "vocab-from tagged": "--no-bt-tag", "bad sampling": "--bt-sampling 'top:3'", "ratio inf": "--bt-ratio inf is not",
                **{case: "cannot be the tag" for case in ("tag \u2581", "tag <pad>", "tag </s>", "empty tag", "tag with a space")}}[case]
    if case == "wrong language":
        mono = str(small["english"])
    elif case == "reverse model of other languages":
        model = str(trained_model)
    elif case == "empty":
        (tmp_path / "empty.de").write_text("\n\n")
        mono = str(tmp_path / "empty.de")
    elif case == "missing":
        mono = str(tmp_path / "nothing.de")
    elif case == "vocab-from tagged":
        more = ["--vocab-from", str(trained_model)]
    elif case == "bad sampling":
        more = ["--bt-sampling", "top:3"]
    elif case == "ratio inf":  # it failed with a traceback after the whole translation
        more = ["--bt-ratio", "inf"]
    elif case.startswith("tag") or case == "empty tag":  # "\u2581" made every space of every pair bytes; <pad>, </s> special ids
        more = ["--bt-tag-token", {"tag \u2581": "\u2581", "tag <pad>": "<pad>", "tag </s>": "</s>", "empty tag": "",
                                   "tag with a space": "<B T>"}[case]]
    args = ["prepare", "--train", str(small["train"]), "--valid", str(small["valid"]), "-o", str(tmp_path / "data"), "--target-mono", mono,
            *([] if case == "no reverse model" else ["--bt-model", model]), *more]
    result = nmt_in_process(*args, check=False)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("nmt: error")]) == 1
    assert not (tmp_path / "data" / "manifest.json").exists() and not (tmp_path / "data").exists()
    if case == "reverse model of other languages":  # docs/errors.md's row, word for word
        from test_errors import doc_rows, matches

        line = result.stderr.strip().splitlines()[-1].replace(model, "models/en-de")
        assert matches(doc_rows()["bt-reverse-model-languages"].message, line), line


def test_back_translation_checks_its_model_as_the_score_filter_checks_a_reverse_model(small, trained_model, tmp_path):
    """One check of a model's languages (pair_scores.check_direction) for --bt-model and the score filter's
    --reverse-model, both target -> source: a model whose config.json names none (or an unnamed import's "src"/"tgt")
    gets the same one-line warning from both, but for the flag (back-translation said it in other words, the score
    filter nothing or a refusal of "src->tgt")."""
    from test_score_filter import unnamed_copy

    empty = tmp_path / "empty.de"
    empty.write_text("\n")
    for k, languages in enumerate((None, {"source": "src", "target": "tgt"})):
        model = unnamed_copy(trained_model, tmp_path / f"model-{k}", languages)
        base = ["prepare", "--train", str(small["train"]), "--valid", str(small["valid"]), "--vocab-size", "300"]
        back = nmt_in_process(*base, "-o", str(tmp_path / f"bt-{k}"), "--target-mono", str(empty), "--bt-model", str(model), check=False)
        assert back.returncode == 2 and "--target-mono" in back.stderr and "is empty" in back.stderr  # refused after the check
        scored = nmt_in_process(*base, "-o", str(tmp_path / f"scored-{k}"), "--reverse-model", str(model), "--device", "cpu")
        said = [[line for line in result.stderr.splitlines() if line.startswith("nmt: warning:") and str(model) in line]
                for result in (back, scored)]
        assert len(said[0]) == 1 and said[0] == [line.replace("--reverse-model", "--bt-model") for line in said[1]], said
        assert "cannot check that --bt-model" in said[0][0] and "translates de->en: its config.json names no languages" in said[0][0]
