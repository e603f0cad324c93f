"""The score filter (issue 53, part 2): each pair's per-token cross-entropy under a model's forced decoding
(nmtcli/pair_scores.py), Junczys-Dowmunt's dual conditional cross-entropy with a reverse model, the worst share
dropped (nmtcli/data/score_filter.py), in `nmt prepare` (its manifest, report and --clean-report)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
from conftest import nmt_in_process, run_nmt

from nmtcli.checksums import file_sha256
from nmtcli.data.score_filter import DROPPED, costs, dual_cross_entropy, ranked, read_log_probs, split_pairs
from nmtcli.pair_scores import score_file

GARBAGE = ("misaligned", "copy", "random")


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def noisy(corpus, tmp_path_factory) -> tuple[Path, dict[int, str]]:
    """The 200 test pairs with 10 of them made garbage, each at a known line: a misaligned target (another pair's), a
    copy of the source, random target words."""
    src, tgt = lines_of(Path(f"{corpus['test']}.en")), lines_of(Path(f"{corpus['test']}.de"))
    rng = random.Random(3)
    words = " ".join(tgt).split()
    garbage = {}
    for k, i in enumerate(range(5, 200, 20)):
        kind = GARBAGE[k % 3]
        tgt[i] = {"misaligned": tgt[(i + 7) % 200], "copy": src[i], "random": " ".join(rng.choice(words) for _ in range(6))}[kind]
        garbage[i] = kind
    prefix = tmp_path_factory.mktemp("noisy") / "train"
    for lang, lines in (("en", src), ("de", tgt)):
        Path(f"{prefix}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return prefix, garbage


def per_token(model: Path, sources: list[str], targets: list[str]) -> list[float]:
    """log P(y|x) / |y| (|y| with EOS) of each pair, from the Python API's forced decoding."""
    from nmtcli import Translator

    translator = Translator.load(model, device="cpu")
    return [sum(s.token_log_probs) / len(s.token_log_probs) for s in translator.score(sources, targets)]


def test_scores_are_the_models_per_token_log_probabilities_both_ways(trained_model, reverse_model, noisy, tmp_path):
    from nmtcli.pair_scores import scorer

    prefix, _ = noisy
    src, tgt = Path(f"{prefix}.en"), Path(f"{prefix}.de")
    forward = score_file(trained_model, src, tgt, tmp_path / "forward.txt", ("en", "de"), {"model": "a"}, "cpu", chunk_lines=64)
    expected = per_token(trained_model, lines_of(src), lines_of(tgt))
    assert np.allclose(read_log_probs(forward, 200), expected, atol=2e-6)
    # The reverse model reads the pair turned round: the target as its source.
    score = scorer(None, (reverse_model, {"model": "b"}), ("en", "de"), "cpu")
    none, reverse = score(src, tgt, tmp_path / "work", lambda *_: None)
    assert none is None and np.allclose(read_log_probs(reverse, 200), per_token(reverse_model, lines_of(tgt), lines_of(src)), atol=2e-6)
    # What `nmt translate --forced-decoding` writes with the power length penalty, alpha 1 and no brevity penalty: one measure.
    written = nmt_in_process("translate", "--forced-decoding", "-m", str(trained_model), "-i", str(src), "--target-file", str(tgt),
                             "--length-penalty", "power", "--alpha", "1", "--brevity-penalty", "0", "--device", "cpu").stdout
    assert written == forward.read_text()


def test_dual_conditional_cross_entropy_is_junczys_dowmunts_formula():
    assert dual_cross_entropy(2.0, 1.0) == 1.0 + 1.5
    assert dual_cross_entropy(1.0, 2.0) == dual_cross_entropy(2.0, 1.0)
    assert dual_cross_entropy(0.5, 0.5) == 0.5  # agreeing models: their cross-entropy
    # From per-token log-probabilities (-H) of each direction; one model alone: its H; a NaN costs the most.
    f, b = np.array([-2.0, -0.5, -1.0]), np.array([-1.0, -0.5, -3.0])
    assert costs(f, b).tolist() == [2.5, 0.5, 4.0]
    assert costs(f, None).tolist() == [2.0, 0.5, 1.0] and costs(None, b).tolist() == [1.0, 0.5, 3.0]
    assert costs(np.array([-1.0, math.nan]), None).tolist() == [1.0, math.inf]


def test_garbage_pairs_rank_among_the_worst_under_the_trained_model(trained_model, noisy, tmp_path):
    prefix, garbage = noisy
    scores = score_file(trained_model, Path(f"{prefix}.en"), Path(f"{prefix}.de"), tmp_path / "s.txt", ("en", "de"), {"model": "a"}, "cpu")
    order = ranked(costs(read_log_probs(scores), None)).tolist()
    places = {kind: sorted(order.index(i) for i, k in garbage.items() if k == kind) for kind in GARBAGE}
    # Each of the 10 garbage pairs (5% of 200) among the worst 10%, most in the worst 5%.
    assert max(max(p) for p in places.values()) < 20, places
    assert sum(p < 10 for ps in places.values() for p in ps) >= 8, places


def test_the_share_dropped_is_the_floor_of_the_decimal_percent():
    from nmtcli.data.score_filter import dropped_count

    # 1,500 x 4.6 / 100 is 68.99999999999999 in floats: 68 pairs were dropped where the docs promise floor(69.0)
    assert dropped_count(1500, 4.6) == 69 and dropped_count(1000, 5) == 50 and dropped_count(1, 99) == 0 and dropped_count(3, 0) == 0
    assert all(dropped_count(n, p) == n * round(p * 10) // 1000 for n in range(1, 3000, 7) for p in (0.1, 2.3, 4.6, 5.0, 12.7, 99.0))


def test_the_split_keeps_order_and_drops_floor_n_p_worst_first_ties_by_line(tmp_path):
    n = 103
    sources = [f"source {i}" for i in range(n)]
    targets = [f"target {i}\r" if i == 4 else f"target {i}" for i in range(n)]  # a CR is kept as it was
    for name, lines in (("c.en", sources), ("c.de", targets)):
        (tmp_path / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    cost = np.array([float(i % 7) for i in range(n)])  # ties: every 7th line costs the same
    split = split_pairs(tmp_path / "c.en", tmp_path / "c.de", cost, 10, (tmp_path / "k.en", tmp_path / "k.de"), tmp_path / "d.jsonl",
                        lambda i, s, t: {"line": i, "cost": float(cost[i]), "source": s, "target": t})
    worst = sorted(range(n), key=lambda i: (-cost[i], i))[:10]  # floor(103 * 10 / 100)
    assert (split.pairs, split.dropped, split.threshold) == (n, 10, 6.0)
    assert [json.loads(line)["line"] for line in lines_of(tmp_path / "d.jsonl")] == worst
    for name, lines in (("k.en", sources), ("k.de", targets)):  # byte for byte: the CR of line 4 too
        assert (tmp_path / name).read_bytes() == "".join(line + "\n" for i, line in enumerate(lines) if i not in worst).encode()
    nothing = split_pairs(tmp_path / "c.en", tmp_path / "c.de", cost, 0, (tmp_path / "k0.en", tmp_path / "k0.de"), tmp_path / "d0.jsonl",
                          lambda i, s, t: {})
    assert nothing.dropped == 0 and (tmp_path / "k0.en").read_bytes() == (tmp_path / "c.en").read_bytes()


def prepare_args(noisy_prefix: Path, corpus, out: Path, *more: str) -> list[str]:
    # The copy, language, misaligned and ratio filters off: the score filter is to find the garbage itself.
    return ["prepare", "--train", str(noisy_prefix), "--valid", str(corpus["valid"]), "--vocab-size", "500", "--max-ratio", "100", "--keep-copies",
            "--keep-wrong-language", "--keep-misaligned", "--device", "cpu", "-o", str(out), *more]


def test_prepare_drops_the_worst_pairs_counts_them_and_reports_them(trained_model, noisy, corpus, tmp_path):
    prefix, garbage = noisy
    out, report = tmp_path / "data", tmp_path / "report.jsonl"
    args = prepare_args(prefix, corpus, out, "--score-model", str(trained_model))
    result = nmt_in_process(*args, "--clean-report", str(report))
    assert "(dropped: score 10)" in result.stderr and "score filter: the worst 5%" in result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    assert train["dropped"] == {"score": 10} and train["pairs"] == 190
    names = [f["filter"] for f in train["filters"]]
    assert names.index("duplicate") < names.index("score") < names.index("too_long")  # after the text filters, before the BPE's
    assert train["filters"][names.index("score")] == {"filter": "score", "before": 200, "after": 190}
    assert manifest["score_filter"] == {"percent": 5.0, "reverse": None, "resumed_chunks": 0, "forward": {
        "model": str(trained_model.resolve()), "revision": None, "sha256": {"model.safetensors": file_sha256(trained_model / "model.safetensors")}}}
    dropped = [json.loads(line) for line in lines_of(out / DROPPED)]
    assert [d["cost"] for d in dropped] == sorted((d["cost"] for d in dropped), reverse=True)
    sources = lines_of(Path(f"{prefix}.en"))
    assert sum(sources.index(d["source"]) in garbage for d in dropped) >= 8
    sampled = [json.loads(line) for line in lines_of(report) if json.loads(line)["filter"] == "score"]
    assert len(sampled) == 10 and all(d in dropped for d in sampled)
    # The same settings: nothing to do. Another share: the filter and what follows again, the models' record the same.
    assert "already prepared" in nmt_in_process(*args).stderr
    assert "(dropped: score 20)" in nmt_in_process(*args, "--drop-worst", "10").stderr
    assert json.loads((out / "manifest.json").read_text())["fingerprint"] != manifest["fingerprint"]
    # Without the filter: none of its output is left to be taken for this data's.
    plain = nmt_in_process(*prepare_args(prefix, corpus, out))
    assert "score" not in plain.stderr and not (out / DROPPED).exists()
    assert "score_filter" not in json.loads((out / "manifest.json").read_text())


def test_prepare_with_a_reverse_model_drops_by_dual_conditional_cross_entropy(trained_model, reverse_model, noisy, corpus, tmp_path):
    prefix, _ = noisy
    out = tmp_path / "data"
    nmt_in_process(*prepare_args(prefix, corpus, out, "--score-model", str(trained_model), "--reverse-model", str(reverse_model),
                                 "--drop-worst", "7.5"))
    src, tgt = lines_of(Path(f"{prefix}.en")), lines_of(Path(f"{prefix}.de"))
    h_f = -np.array(per_token(trained_model, src, tgt))
    h_b = -np.array(per_token(reverse_model, tgt, src))
    expected = np.abs(h_f - h_b) + (h_f + h_b) / 2
    dropped = [json.loads(line) for line in lines_of(out / DROPPED)]
    assert len(dropped) == 15  # floor(200 * 7.5 / 100)
    for d in dropped:
        i = src.index(d["source"])
        assert d["forward"] == pytest.approx(h_f[i], abs=1e-4) and d["reverse"] == pytest.approx(h_b[i], abs=1e-4)
        assert d["cost"] == pytest.approx(expected[i], abs=1e-4)
    assert min(d["cost"] for d in dropped) >= np.sort(expected)[::-1][15] - 1e-5
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["score_filter"]["reverse"]["model"] == str(reverse_model.resolve()) and manifest["score_filter"]["percent"] == 7.5


def one_error_line(result, row: str | None = None) -> str:
    from test_errors import doc_rows, matches

    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "Traceback" not in result.stderr and len(lines) == 1 and lines[0].startswith("nmt: error: "), result.stderr
    if row is not None:
        assert matches(doc_rows()[row].message, lines[0]), lines[0]
    return lines[0]


def test_a_model_of_other_languages_is_one_line(trained_model, reverse_model, noisy, corpus, tmp_path):
    prefix, _ = noisy
    out = tmp_path / "data"

    def refused(*more: str) -> str:
        return one_error_line(nmt_in_process(*prepare_args(prefix, corpus, out, *more), check=False))

    line = one_error_line(nmt_in_process(*prepare_args(prefix, corpus, out, "--reverse-model", str(trained_model)), check=False),
                          "score-model-wrong-languages")
    assert f"--reverse-model {trained_model} translates en->de, not de->en" in line
    assert "translates de->en, not en->de" in refused("--score-model", str(reverse_model))
    assert "--drop-worst needs --score-model" in refused("--drop-worst", "5")
    several = ["prepare", "--train", f"en-de={prefix}", "--train", f"de-en={prefix}", "--valid", f"en-de={corpus['valid']}",
               "--valid", f"de-en={corpus['valid']}", "--score-model", str(trained_model)]
    assert "one language pair" in one_error_line(nmt_in_process(*several, check=False))
    assert not out.exists()  # refused before anything was written


def unnamed_copy(model: Path, out: Path, languages: dict | None) -> Path:
    """A copy of `model` whose config.json names no languages: none at all (None), or `languages` (an unnamed import's)."""
    import shutil

    shutil.copytree(model, out)
    config = json.loads((out / "config.json").read_text())
    config.pop("languages")
    if languages is not None:
        config["languages"] = languages
    (out / "config.json").write_text(json.dumps(config))
    return out


def test_a_model_that_names_no_languages_scores_with_a_one_line_warning(trained_model, noisy, corpus, tmp_path):
    """The direction of a model whose config.json names no languages cannot be checked: the filter uses it and says so,
    once, naming what to do (it scored silently; an unnamed import's "src"/"tgt" was refused as "src->tgt")."""
    prefix, _ = noisy
    forward = unnamed_copy(trained_model, tmp_path / "forward", None)
    reverse = unnamed_copy(trained_model, tmp_path / "reverse", {"source": "src", "target": "tgt"})
    result = nmt_in_process(*prepare_args(prefix, corpus, tmp_path / "data", "--score-model", str(forward), "--reverse-model", str(reverse)))
    warnings = [line for line in result.stderr.splitlines() if line.startswith("nmt: warning: cannot check")]
    assert warnings == [f"nmt: warning: cannot check that {flag} {model} translates {pair}: its config.json names no languages (it is "
                        f"used as one: make sure it is, or add \"languages\": {{\"source\": \"{pair[:2]}\", \"target\": \"{pair[-2:]}\"}} "
                        "to its config.json to have it checked)"
                        for flag, model, pair in (("--score-model", forward, "en->de"), ("--reverse-model", reverse, "de->en"))], result.stderr
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["dropped"] == {"score": 10} and manifest["score_filter"]["reverse"]["model"] == str(reverse.resolve())


def test_a_killed_score_stage_resumes_from_its_chunks_and_the_manifest_counts_them(trained_model, noisy, corpus, tmp_path):
    """Killed once the model's first chunk of scores is written whole: the next run takes that chunk up instead of
    scoring it again, and the manifest says so (`score_filter.resumed_chunks`; the top-level `resumed_chunks` is the
    encode stage's, which had not started); what is dropped is what an uninterrupted run drops."""
    prefix, _ = noisy
    out = tmp_path / "data"
    args = prepare_args(prefix, corpus, out, "--score-model", str(trained_model))
    killed = run_nmt(*args, env={"NMT_TEST_FAULT": "kill-after-chunk:1"}, check=False)
    assert killed.returncode == -9 and not (out / "manifest.json").exists(), killed.stderr
    nmt_in_process(*args)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["score_filter"]["resumed_chunks"] == 1 and manifest["resumed_chunks"] == 0
    fresh = tmp_path / "fresh"
    nmt_in_process(*prepare_args(prefix, corpus, fresh, "--score-model", str(trained_model)))
    assert json.loads((fresh / "manifest.json").read_text())["score_filter"]["resumed_chunks"] == 0
    assert (out / DROPPED).read_bytes() == (fresh / DROPPED).read_bytes() and manifest["splits"]["train"]["dropped"] == {"score": 10}

