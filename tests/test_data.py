"""Preparing data: cleaning rules, the manifest, binarized arrays, and token-budget batches."""

from __future__ import annotations

import json

import numpy as np
import pytest

from nmtcli.data.batching import BatchStream, ParallelData, collate, make_batches
from nmtcli.data.prepare import PrepareSettings, prepare_files, read_manifest
from nmtcli.data.shards import Shard, ShardWriter
from nmtcli.data.text import keep_pair, load_sentencepiece, read_lines
from nmtcli.errors import NmtError
from nmtcli.model.config import BOS_ID, EOS_ID, PAD_ID


def write_pair(directory, prefix, src_lines, tgt_lines):
    (directory / f"{prefix}.en").write_text("".join(s + "\n" for s in src_lines), encoding="utf-8")
    (directory / f"{prefix}.de").write_text("".join(t + "\n" for t in tgt_lines), encoding="utf-8")
    return directory / prefix


def test_prepare_records_counts_checksums_and_the_vocabulary(prepared, corpus):
    manifest = read_manifest(prepared)
    assert manifest["source_lang"] == "en" and manifest["target_lang"] == "de"
    assert manifest["splits"]["train"]["input_pairs"] == 5000
    assert manifest["splits"]["train"]["pairs"] == 5000  # the synthetic corpus is clean
    assert manifest["splits"]["valid"]["pairs"] == 200
    assert manifest["vocab_size"] == load_sentencepiece(prepared / "sentencepiece.model").get_piece_size()
    assert set(manifest["files"]) >= {"sentencepiece.model", "train.en.bin", "train.en.idx", "valid.de.bin", "test.en", "test.de"}
    assert manifest["versions"]["nmt"]
    # The plain-text test split is an exact copy: it is what scores are computed against.
    assert (prepared / "test.de").read_bytes() == (corpus["test"].parent / "test.de").read_bytes()


def test_binarized_training_data_decodes_back_to_the_text(prepared, corpus):
    sp = load_sentencepiece(prepared / "sentencepiece.model")
    data = ParallelData(prepared, "train", "en", "de", sp.get_piece_size())
    source = list(read_lines(corpus["train"].parent / "train.en"))
    target = list(read_lines(corpus["train"].parent / "train.de"))
    for i in (0, 1, 1234, 4999):
        assert sp.decode(data.src[i].tolist()) == source[i]
        assert sp.decode(data.tgt[i].tolist()) == target[i]


def test_special_token_ids_are_fixed(prepared):
    sp = load_sentencepiece(prepared / "sentencepiece.model")
    assert (sp.pad_id(), sp.unk_id(), sp.bos_id(), sp.eos_id()) == (PAD_ID, 1, BOS_ID, EOS_ID)


def test_cleaning_drops_empty_long_and_unbalanced_training_pairs(tmp_path, corpus):
    src = [line for line in read_lines(corpus["train"].parent / "train.en")][:400]
    tgt = [line for line in read_lines(corpus["train"].parent / "train.de")][:400]
    src += ["", "the dog", "the dog sees the cat " * 40, "a cat"]
    tgt += ["der hund", "", "der hund katze sieht " * 40, "ein katze dieser hund jeder baum sieht"]
    train = write_pair(tmp_path, "train", src, tgt)
    valid = write_pair(tmp_path, "valid", ["a cat", ""], ["ein katze dieser hund jeder baum sieht", "x"])
    manifest = prepare_files(tmp_path / "out", train, valid, None, PrepareSettings("en", "de", vocab_size=1000, max_tokens=100), "t")
    assert manifest["splits"]["train"]["dropped"] == {"empty": 2, "ratio": 1, "too_long": 1}
    assert manifest["splits"]["train"]["pairs"] == 400
    # The ratio filter is for training data only; validation keeps the unbalanced pair.
    assert manifest["splits"]["valid"] == {**manifest["splits"]["valid"], "pairs": 1, "dropped": {"empty": 1}}


def test_misaligned_files_are_refused(tmp_path):
    train = write_pair(tmp_path, "train", ["a", "b", "c"], ["x", "y"])
    with pytest.raises(NmtError, match="has 3 lines but .* has 2"):
        prepare_files(tmp_path / "out", train, train, None, PrepareSettings("en", "de"), "t")


def test_non_utf8_input_names_the_file_and_line(tmp_path):
    (tmp_path / "train.en").write_bytes(b"good\nbad \xff byte\n")
    (tmp_path / "train.de").write_bytes(b"gut\nschlecht\n")
    with pytest.raises(NmtError, match=r"train\.en, line 2: not valid UTF-8"):
        prepare_files(tmp_path / "out", tmp_path / "train", tmp_path / "train", None, PrepareSettings("en", "de", vocab_size=300), "t")


def test_keep_pair_rules():
    assert keep_pair(10, 12) is None
    assert keep_pair(0, 5) == "empty"
    assert keep_pair(251, 251) == "too_long"
    assert keep_pair(10, 16) == "ratio"
    assert keep_pair(10, 16, max_ratio=None) is None


def test_shards_round_trip_and_detect_truncation(tmp_path):
    sentences = [[5, 6, 7], [], [70000, 1], [9]]
    writer = ShardWriter(tmp_path / "x.en", vocab_size=80000)
    writer.add(sentences)
    assert writer.close() == 4
    shard = Shard(tmp_path / "x.en", 80000)
    assert [shard[i].tolist() for i in range(len(shard))] == sentences
    assert shard.lengths.tolist() == [3, 0, 2, 1]
    data = (tmp_path / "x.en.bin").read_bytes()
    (tmp_path / "x.en.bin").write_bytes(data[:-4])
    with pytest.raises(ValueError, match="truncated"):
        Shard(tmp_path / "x.en", 80000)


def test_batches_respect_the_token_budget_and_cover_every_sentence_once():
    rng = np.random.default_rng(0)
    src_len, tgt_len = rng.integers(1, 60, 2000), rng.integers(1, 60, 2000)
    batches = make_batches(src_len, tgt_len, max_tokens=500, seed=3, epoch=1)
    seen = np.concatenate(batches)
    assert sorted(seen.tolist()) == list(range(2000))
    for b in batches:
        longest = max(src_len[b].max(), tgt_len[b].max()) + 1
        assert longest * len(b) <= 500 or len(b) == 1
    # Similar lengths end up together: padding stays a small share of each batch.
    padded = sum((max(tgt_len[b].max(), src_len[b].max()) + 1) * len(b) for b in batches)
    assert padded < 1.5 * (np.maximum(src_len, tgt_len) + 1).sum()


def test_batch_order_is_a_function_of_seed_and_epoch():
    lengths = np.arange(1, 301) % 37 + 1
    a = make_batches(lengths, lengths, 200, seed=1, epoch=1)
    b = make_batches(lengths, lengths, 200, seed=1, epoch=1)
    c = make_batches(lengths, lengths, 200, seed=1, epoch=2)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c))


def test_batch_stream_resumes_at_the_same_batch(prepared):
    data = ParallelData(prepared, "train", "en", "de", read_manifest(prepared)["vocab_size"])
    stream = BatchStream(data, 400, seed=7)
    for _ in range(5):
        next(stream)
    state = json.loads(json.dumps(stream.state_dict()))
    expected = [next(stream).src for _ in range(100)]  # crosses into the next epoch
    resumed = BatchStream(data, 400, seed=7)
    resumed.load_state_dict(state)
    assert all(torch_equal(a, next(resumed).src) for a in expected)
    assert stream.epoch > 1


def torch_equal(a, b) -> bool:
    return a.shape == b.shape and bool((a == b).all())


def test_collate_adds_eos_bos_and_padding():
    batch = collate([np.array([5, 6]), np.array([7])], [np.array([8]), np.array([9, 10, 11])])
    assert batch.src.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, PAD_ID, PAD_ID], [BOS_ID, 9, 10, 11]]
    assert batch.tgt_out.tolist() == [[8, EOS_ID, PAD_ID, PAD_ID], [9, 10, 11, EOS_ID]]
    assert batch.target_tokens == 6


def test_text_filters_count_what_each_drops_in_order():
    from nmtcli.data.text import TextFilter

    f = TextFilter("en", "de", markup=True, script=True, duplicates=True)
    pairs = [
        ("the dog", "der hund"),
        ("the dog", "der hund"),  # duplicate
        ("  ", "der hund"),  # empty
        ('<a href="https://example.com/x">x</a>', "ein link"),  # mostly markup
        ("the dog", "собака видит кошку"),  # wrong script for German
        ("a cat", "eine katze"),
        ("a cat ", "eine katze"),  # not an exact duplicate
    ]
    assert [f.reason(s, t) for s, t in pairs] == [None, "duplicate", "empty", "markup", "script", None, None]
    assert f.counts() == [
        {"filter": "empty", "before": 7, "after": 6},
        {"filter": "markup", "before": 6, "after": 5},
        {"filter": "script", "before": 5, "after": 4},
        {"filter": "duplicate", "before": 4, "after": 3},
    ]
    assert TextFilter("en", "de").names == ["empty", "duplicate"]
    with pytest.raises(NmtError, match="does not know which script 'xx'"):
        TextFilter("en", "xx", script=True)


def test_optional_filters_and_their_counts_reach_the_manifest(tmp_path, corpus):
    src = list(read_lines(corpus["train"].parent / "train.en"))[:300]
    tgt = list(read_lines(corpus["train"].parent / "train.de"))[:300]
    src += [src[0], "<div><br/><br/></div>", "the dog"]
    tgt += [tgt[0], "<p>&nbsp;</p>", "Собака видит кошку"]
    train = write_pair(tmp_path, "train", src, tgt)
    valid = write_pair(tmp_path, "valid", src[:5], tgt[:5])
    settings = PrepareSettings("en", "de", vocab_size=500, drop_markup=True, drop_wrong_script=True)
    manifest = prepare_files(tmp_path / "out", train, valid, None, settings, "t")
    train_counts = manifest["splits"]["train"]
    assert train_counts["dropped"] == {"duplicate": 1, "markup": 1, "script": 1}
    assert [f["filter"] for f in train_counts["filters"]] == ["empty", "markup", "script", "duplicate", "too_long", "ratio"]
    assert train_counts["filters"][-1]["after"] == train_counts["pairs"] == 300
    # Without the optional filters the markup and Cyrillic pairs are kept (the ratio filter may still apply).
    plain = prepare_files(tmp_path / "plain", train, valid, None, PrepareSettings("en", "de", vocab_size=500), "t")
    assert "markup" not in plain["splits"]["train"]["dropped"] and "script" not in plain["splits"]["train"]["dropped"]


def test_prepare_is_reproducible_byte_for_byte_and_skips_finished_work(tmp_path, corpus):
    settings = PrepareSettings("en", "de", vocab_size=600)
    first = prepare_files(tmp_path / "a", corpus["train"], corpus["valid"], corpus["test"], settings, "t")
    second = prepare_files(tmp_path / "elsewhere" / "b", corpus["train"], corpus["valid"], corpus["test"], settings, "t")
    assert first["files"] == second["files"]  # the sentencepiece model does not record where it was trained
    again = prepare_files(tmp_path / "a", corpus["train"], corpus["valid"], corpus["test"], settings, "t")
    assert again["reused"] and again["created"] == first["created"]
    (tmp_path / "a" / "valid.de.bin").write_bytes(b"")  # a damaged output is noticed and rebuilt
    rebuilt = prepare_files(tmp_path / "a", corpus["train"], corpus["valid"], corpus["test"], settings, "t")
    assert "reused" not in rebuilt and rebuilt["files"] == first["files"]
    changed = prepare_files(tmp_path / "a", corpus["train"], corpus["valid"], corpus["test"], PrepareSettings("en", "de", vocab_size=600, seed=2, spm_sentences=1000), "t")
    assert changed["fingerprint"] != first["fingerprint"] and changed["sentencepiece"]["pairs_sampled"] == 1000


def test_the_build_script_keeps_clean_pairs_and_drops_placeholders_and_markup():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent.parent / "scripts" / "build_demo_corpus.py"
    spec = importlib.util.spec_from_file_location("build_demo_corpus", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.clean("Save  the\npage", "Seite speichern") == ("Save the page", "Seite speichern")
    for english, german in (("Hello %(name)s", "Hallo %(name)s"), ("{count} items", "{count} Einträge"), ("<b>Bold</b>", "<b>Fett</b>"),
                            ("Save %s", "%s speichern"), ("OK", "OK"), ("1/2", "1/2")):
        assert module.clean(english, german) is None
