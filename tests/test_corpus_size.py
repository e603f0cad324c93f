"""Defaults that fit the corpus (issue 25): a vocabulary from the number of training pairs, steps from
epochs with early stopping on validation BLEU, the `small` preset."""

from __future__ import annotations

import json
import math
import random

import pytest
from corpus import write_corpus, zipf_corpus

from nmtcli.data.cleaning import TextFilter
from nmtcli.data.prepare import prepare_files
from nmtcli.data.settings import PrepareSettings
from nmtcli.data.vocab_size import vocab_size_for
from nmtcli.training.settings import FAIRSEQ_IWSLT_LR_SCALE, steps_for_epochs, train_settings_for, with_overrides


def test_vocabulary_grows_with_the_square_root_of_the_training_pairs():
    # 37,000 x sqrt(pairs / 4.5M) to the nearest 1,000, from 1,000 to 37,000 (the paper's 37,000 at WMT14's 4.5M pairs).
    sizes = {500: 1000, 4_228: 1000, 10_000: 2000, 29_000: 3000, 100_000: 6000, 160_000: 7000,
             1_000_000: 17000, 4_500_000: 37000, 40_000_000: 37000}
    assert {pairs: vocab_size_for(pairs) for pairs in sizes} == sizes
    for pairs in (3_000, 50_000, 700_000, 3_000_000):  # the formula itself, away from the table
        assert vocab_size_for(pairs) == max(1000, round(37000 * math.sqrt(pairs / 4.5e6) / 1000) * 1000)


@pytest.fixture(scope="module")
def zipf(tmp_path_factory):
    """A generated corpus whose word types keep growing with its size (Zipf's law), 12,000 training pairs."""
    return zipf_corpus(tmp_path_factory.mktemp("zipf"), {"train": 12_000, "valid": 20, "test": 20}, words=12_000)


def test_prepare_without_vocab_size_chooses_it_from_the_pairs_says_why_and_records_it(zipf, tmp_path, nmt_main):
    args = ["prepare", "--train", str(zipf["train"]), "--valid", str(zipf["valid"]), "-o", "data"]
    first = nmt_main(*args, cwd=tmp_path)
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    # The pairs left by the text filters: no side is empty, repeats of a pair are dropped, and of the made-up words
    # some are taken for another language.
    text_filter = TextFilter("en", "de")
    sides = (zipf["train"].with_suffix(f".{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de"))
    pairs = sum(text_filter.reason(s, t) is None for s, t in zip(*sides))
    assert 11_000 < pairs < 12_000
    assert manifest["vocabulary"] == {"asked": 2000, "by": "corpus", "training_pairs": pairs,
                                      "rule": "37,000 x sqrt(pairs / 4.5M), to the nearest 1,000, from 1,000 to 37,000"}
    assert manifest["vocab_size"] == 2000  # the text holds that many pieces
    assert manifest["settings"]["vocab_size"] is None
    assert f"vocabulary: 2,000 pieces (for {pairs:,} training pairs: 37,000 x sqrt(pairs / 4.5M)" in first.stderr
    assert "--vocab-size N to choose" in first.stderr

    # Run again: the same choice is found in the manifest, nothing is redone.
    again = nmt_main(*args, cwd=tmp_path)
    assert "already prepared" in again.stderr and f"vocabulary: 2,000 pieces (for {pairs:,} training pairs" in again.stderr

    # The number given by hand gives the same bytes: the rule only picks the number.
    given = nmt_main(*args[:-1], "given", "--vocab-size", "2000", cwd=tmp_path)
    assert "vocabulary: 2,000 pieces (--vocab-size)" in given.stderr
    for name in ("sentencepiece.model", "train.en.bin", "train.de.bin", "train.de.idx"):
        assert (tmp_path / "given" / name).read_bytes() == (tmp_path / "data" / name).read_bytes(), name
    assert json.loads((tmp_path / "given" / "manifest.json").read_text())["vocabulary"]["by"] == "given"


def test_the_rule_follows_the_corpus_size_and_a_corpus_smaller_than_its_vocabulary_says_so(zipf, tmp_path):
    # 3,000 of the same pairs ask for 1,000 pieces; 3,000 pairs written with three letters hold fewer than that.
    lines = {lang: zipf["train"].with_suffix(f".{lang}").read_text(encoding="utf-8").splitlines(keepends=True) for lang in ("en", "de")}
    for lang in ("en", "de"):
        (tmp_path / f"part.{lang}").write_text("".join(lines[lang][:3000]), encoding="utf-8")
    part = prepare_files(tmp_path / "part", tmp_path / "part", zipf["valid"], None, PrepareSettings("en", "de"), "t")
    assert part["vocabulary"]["asked"] == 1000 and part["vocab_size"] == 1000

    rng = random.Random(0)
    for lang in ("en", "de"):
        words = ["".join(rng.choices("abc", k=rng.randint(1, 3))) for _ in range(3000 * 4)]
        (tmp_path / f"abc.{lang}").write_text("".join(" ".join(words[i:i + 4]) + "\n" for i in range(0, len(words), 4)), encoding="utf-8")
    toy = prepare_files(tmp_path / "toy", tmp_path / "abc", tmp_path / "abc", None, PrepareSettings("en", "de", drop_duplicates=False), "t")
    assert toy["vocabulary"]["asked"] == 1000
    assert toy["vocab_size"] < 500  # sentencepiece learns what the text holds

    from nmtcli.cli.prepare import _vocabulary_line

    assert _vocabulary_line(toy).endswith(f"; the text holds only {toy['vocab_size']:,} pieces of the 1,000 asked")


def test_tiny_and_small_count_epochs_and_stop_on_validation_bleu_unless_steps_are_given():
    for preset in ("tiny", "small"):
        _, s = train_settings_for(preset)
        assert (s.max_steps, s.epochs, s.valid_bleu, s.patience) == (0, 50, 500, 5)
        # Steps given by hand run to their end, without the cost of BLEU validations...
        _, s = train_settings_for(preset, max_steps=300)
        assert (s.max_steps, s.epochs, s.valid_bleu, s.patience) == (300, 0, 0, 0)
        # ... unless asked for.
        _, s = train_settings_for(preset, max_steps=300, patience=2, valid_bleu=100)
        assert (s.max_steps, s.epochs, s.valid_bleu, s.patience) == (300, 0, 100, 2)
    _, tiny = train_settings_for("tiny")
    # tiny never stops before 4,000 steps: the demo corpus (23 steps an epoch) needs ~100 epochs, not 50.
    assert tiny.min_steps == 4000
    assert steps_for_epochs(tiny, batches_per_epoch=23, batches_per_step=1) == 4000
    assert steps_for_epochs(tiny, batches_per_epoch=185, batches_per_step=1) == 50 * 185  # a 30k-pair corpus: 50 epochs
    assert steps_for_epochs(tiny, batches_per_epoch=470, batches_per_step=4) == 50 * 118  # a part-filled step counts
    # Epochs given by hand are that many passes: no floor but twice the warmup.
    _, three = train_settings_for("tiny", epochs=3)
    assert three.min_steps == 0
    assert steps_for_epochs(three, batches_per_epoch=23, batches_per_step=1) == 2 * 200
    assert steps_for_epochs(with_overrides(three, warmup=10), batches_per_epoch=23, batches_per_step=1) == 3 * 23
    # A run's own config.json names both: the rerun keeps the floor.
    _, again = train_settings_for("tiny", epochs=50, min_steps=4000)
    assert steps_for_epochs(again, batches_per_epoch=23, batches_per_step=1) == 4000
    _, small = train_settings_for("small")
    assert small.min_steps == 0 and steps_for_epochs(small, batches_per_epoch=10, batches_per_step=1) == 2 * 4000
    _, base = train_settings_for("base")
    assert (base.max_steps, base.epochs) == (100_000, 0)
    _, base = train_settings_for("base", epochs=3)  # --epochs works with every preset
    assert (base.max_steps, base.epochs) == (0, 3)


def test_max_steps_or_epochs_from_the_command_line_win_over_a_config_file(tmp_path, nmt_main):
    from nmtcli.cli.train import read_config_file

    # A run dir's config.json records the steps its epochs came to on its data: rerun, they are counted again.
    run_config = tmp_path / "config.json"
    run_config.write_text(json.dumps({"format": "nmt-run", "model": {"norm": "pre"},
                                      "training": {"preset": "tiny", "epochs": 50, "max_steps": 1150, "warmup": 200}}))
    values = read_config_file(run_config)
    assert values["epochs"] == 50 and "max_steps" not in values
    # Both flags at once: one line, exit 2, before anything is read.
    result = nmt_main("train", "--max-steps", "10", "--epochs", "2", "--data", str(tmp_path / "none"), check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith("nmt: error: --max-steps and --epochs both")
    result = nmt_main("train", "--update-freq", "2", "--tokens-per-step", "4000", "--data", str(tmp_path / "none"), check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith("nmt: error: --update-freq and --tokens-per-step both")


def test_small_follows_fairseqs_iwslt_recipe():
    config, s = train_settings_for("small")
    assert (s.batch_tokens, s.update_freq, s.tokens_per_step, s.warmup) == (4096, 1, None, 4000)
    # Equation 3 at the end of the warmup, scaled: fairseq's peak learning rate of 5e-4.
    from nmtcli.training.schedule import inverse_sqrt_lr

    assert inverse_sqrt_lr(4000, config.d_model, s.warmup, FAIRSEQ_IWSLT_LR_SCALE) == pytest.approx(5e-4)
    assert inverse_sqrt_lr(16_000, config.d_model, s.warmup, FAIRSEQ_IWSLT_LR_SCALE) == pytest.approx(5e-4 * math.sqrt(4000 / 16_000))


@pytest.mark.slow  # ~60 s on 2 loaded cores: an untrained model's beam search runs to the maximum length
def test_training_without_max_steps_runs_epochs_and_stops_early_on_validation_bleu(tmp_path, nmt_main):
    corpus = write_corpus(tmp_path / "corpus", {"train": 300, "valid": 8}, seed=3)
    nmt_main("prepare", "--train", str(corpus["train"]), "--valid", str(corpus["valid"]), "--vocab-size", "300", "-o", "data", cwd=tmp_path)
    # A learning rate too small to change a translation: validation BLEU never improves on the first one, so
    # early stopping ends the run at its second validation, long before 50 epochs. (BLEU on 2 lines and a
    # patience of 1 instead of 500 and 5: an untrained model's translations are slow to decode on a CPU.)
    result = nmt_main("train", "--data", "data", "--preset", "tiny", "--warmup", "1", "--lr-scale", "1e-9", "--valid-every", "2",
                      "--valid-bleu", "2", "--patience", "1", "--log-every", "2", "--device", "cpu", "-o", "run", cwd=tmp_path)
    config = json.loads((tmp_path / "run" / "config.json").read_text())["training"]
    from nmtcli.data.batching import ParallelData, make_batches

    data = ParallelData(tmp_path / "data", "train", "en", "de", 300)
    per_epoch = len(make_batches(data.src.lengths, data.tgt.lengths, 2048, 1, 1))
    assert per_epoch >= 2
    assert config["epochs"] == 50 and config["min_steps"] == 4000 and config["max_steps"] == 4000 > 50 * per_epoch
    assert (f"max steps: 4,000: 50 epochs of {per_epoch} steps ({50 * per_epoch:,}) raised to the floor of 4,000 steps; "
            "stops early after 1 validations") in result.stderr
    log = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    valid = [e for e in log if "valid_bleu" in e]
    assert [e["step"] for e in valid] == [2, 4]
    assert valid[0]["valid_bleu"] == valid[1]["valid_bleu"] and valid[0].get("best") and not valid[1].get("best")
    assert "early stop at step 4: no better valid_bleu in 1 validations (best" in result.stderr
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["4", "best"]
