"""The brevity penalty (inference/beam.py `Brevity`): a finished hypothesis scores log P / lp + w * min(0, 1 - r * |X| / |Y|);
`nmt average` calibrates w on the validation split (training/brevity.py) and records it with r in config.json, where
`nmt translate`, the API and the server read it; forced scores count it as the search does."""

from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import pytest
import torch

from conftest import torch_threads

LINES = [f"the {word} sees a dog number {i}" + " and a cat" * (i % 4) for i, word in enumerate(["man", "woman", "child"] * 4)]


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def held_long(trained_model, tmp_path_factory):
    """The session's trained model with a brevity penalty of weight 20 and length ratio 3 recorded, as `nmt average` records one:
    every translation is held to three times its source's length."""
    from nmtcli.training.average import record_search

    model = tmp_path_factory.mktemp("brevity") / "model"
    shutil.copytree(trained_model, model)
    record_search(model, {"brevity_penalty": 20.0, "length_ratio": 3.0})
    return model


def test_the_penalty_is_the_log_of_bleus_brevity_penalty_against_the_length_the_source_predicts():
    from nmtcli.inference.penalties import Brevity

    brevity = Brevity(2.0, 1.5)
    expected = torch.tensor([[6.0], [6.0], [6.0]])  # sources of 4 pieces: 6 expected
    # 3 pieces: 2 * (1 - 6/3); 9 and 6 pieces: long enough, nothing
    assert brevity.penalty(expected, torch.tensor([[3], [9], [6]])).flatten().tolist() == pytest.approx([-2.0, 0.0, 0.0])
    assert brevity.of(4, 3) == pytest.approx(-2.0) and brevity.of(4, 6) == 0.0
    assert brevity.of(4, 0) == pytest.approx(2.0 * (1 - 6 / 1))  # no piece but EOS counts as one
    assert Brevity(0.0, 1.5).of(4, 1) == 0.0


def test_a_recorded_penalty_lengthens_translations_and_each_score_counts_it(trained_model, held_long):
    from nmtcli import Translator
    from nmtcli.inference.penalties import Brevity, lp

    plain = Translator.load(trained_model, device="cpu").translate(LINES)
    held = Translator.load(held_long, device="cpu")
    longer = held.translate(LINES)
    assert held.translate(LINES, brevity_penalty=0) == plain  # 0: the paper's search, whatever the model records
    assert sum(len(t.tokens) for t in longer) > sum(len(t.tokens) for t in plain)
    sources = held.engine.tokenizer.encode(LINES)
    brevity = Brevity(20.0, 3.0)
    for source, t in zip(sources, longer):
        assert t.score == pytest.approx(t.log_prob / lp(len(t.tokens) + 1, 0.6) + brevity.of(len(source), len(t.tokens)), abs=1e-4)
    # forced decoding scores a translation as the search ranked it
    scored = held.score(LINES, [t.text for t in longer])
    assert [s.score for s in scored] == pytest.approx([t.score for t in longer], abs=1e-3)
    # the constrained search (a glossary's terms) ranks by the same score
    termed = held.translate(LINES[:3], glossary={"dog": "Hund"})
    for source, t in zip(sources, termed):
        assert t.score == pytest.approx(t.log_prob / lp(len(t.tokens) + 1, 0.6) + brevity.of(len(source), len(t.tokens)), abs=1e-4)


def test_calibration_keeps_the_papers_search_for_a_model_long_enough_and_bisects_for_one_too_short(trained_model, prepared, tmp_path):
    from nmtcli.data.prepare import read_manifest
    from nmtcli.training.brevity import TARGET_BP, WEIGHTS, calibrate

    manifest = read_manifest(prepared)
    found = calibrate(trained_model, prepared, manifest, "cpu")
    # the typical training pair's target pieces per source piece, counted from the prepared files' offsets
    offsets = {lang: np.fromfile(prepared / f"train.{lang}.idx", dtype=np.int64) for lang in ("en", "de")}
    assert found.length_ratio == pytest.approx(float(np.median(np.diff(offsets["de"]) / np.diff(offsets["en"]))))
    assert found.trials[0].weight == 0.0
    if found.trials[0].bp >= TARGET_BP:  # long enough: one translation of the split, weight 0
        assert found.weight == 0.0 and len(found.trials) == 1
    else:
        assert found.trial(found.weight).bp >= TARGET_BP and found.weight > 0
    # references twice as long as the model can write: no weight reaches the target, the bisection ends at the largest
    doubled = tmp_path / "data"
    shutil.copytree(prepared, doubled)
    references = (prepared / "valid.de").read_text(encoding="utf-8").splitlines()
    (doubled / "valid.de").write_text("".join(f"{r} {r}\n" for r in references), encoding="utf-8")
    short = calibrate(trained_model, doubled, manifest, "cpu")
    assert short.weight == WEIGHTS[-1]
    weights = [t.weight for t in short.trials]
    assert weights == sorted(weights) and len(weights) <= 7  # 0, then a bisection over WEIGHTS
    assert all(t.bp < TARGET_BP for t in short.trials)
    lengths = [t.ratio for t in short.trials]
    assert lengths == sorted(lengths) and lengths[-1] > lengths[0]  # more weight, longer translations


def test_nmt_average_records_the_calibration_and_no_calibrate_leaves_it_out(trained_run, nmt_main, tmp_path):
    out = nmt_main("average", str(trained_run), "-o", str(tmp_path / "model"), "--device", "cpu")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    search = config["search"]
    assert set(search) == {"brevity_penalty", "length_ratio", "calibrated_on"}
    assert search["calibrated_on"]["split"] == "valid" and search["calibrated_on"]["lines"] == 200
    assert list(config)[-2:] == ["search", "versions"]
    assert f"brevity penalty {search['brevity_penalty']:g}" in out.stderr
    assert "brevity penalty" in (tmp_path / "model" / "README.md").read_text()
    shown = nmt_main("info", str(tmp_path / "model")).stdout
    assert f"brevity penalty {search['brevity_penalty']:g}, length ratio {search['length_ratio']:.3f}" in shown
    nmt_main("average", str(trained_run), "-o", str(tmp_path / "plain"), "--no-calibrate")
    assert "search" not in json.loads((tmp_path / "plain" / "config.json").read_text())
    # the run's data without its validation split: the model is written, uncalibrated, and the command says why
    run, data = tmp_path / "run", tmp_path / "data"
    shutil.copytree(trained_run, run)
    config = json.loads((run / "config.json").read_text())
    shutil.copytree(config["data"]["dir"], data)
    (data / "valid.en").unlink()
    config["data"]["dir"] = str(data)
    (run / "config.json").write_text(json.dumps(config))
    done = nmt_main("average", str(run), "-o", str(tmp_path / "uncalibrated"), "--device", "cpu")
    assert "brevity penalty not calibrated" in done.stderr and "has no validation split here" in done.stderr
    assert "search" not in json.loads((tmp_path / "uncalibrated" / "config.json").read_text())


def test_the_cli_the_api_and_the_server_take_a_weight_and_refuse_a_bad_one(held_long, nmt_main, tmp_path):
    from nmtcli import Translator
    from nmtcli.errors import NmtError
    from test_serve import Server, request

    text = "\n".join(LINES) + "\n"
    translator = Translator.load(held_long, device="cpu")
    expected = {w: [t.text for t in translator.translate(LINES, brevity_penalty=w)] for w in (None, 0.0)}
    assert expected[None] != expected[0.0]
    flags = ("translate", "-m", str(held_long), "--threads", "1")
    assert nmt_main(*flags, input=text).stdout.splitlines() == expected[None]
    assert nmt_main(*flags, "--brevity-penalty", "0", input=text).stdout.splitlines() == expected[0.0]
    for bad in ("-1", "21", "nan"):
        refused = nmt_main(*flags, "--brevity-penalty", bad, input=text, check=False)
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, bad
    refused = nmt_main(*flags, "--brevity-penalty", "1", "--sampling", "full", input=text, check=False)
    assert refused.returncode == 2 and "--brevity-penalty does not go with --sampling" in refused.stderr
    for value in (-0.5, "1", True, float("inf"), 25.0):
        with pytest.raises(NmtError):
            translator.translate(LINES[:1], brevity_penalty=value)
    # a weight the translator was loaded with stays the default of every call; score() takes one per call
    from nmtcli.api import open_engine
    from nmtcli.inference.settings import SearchSettings

    plain = Translator(open_engine(held_long, device="cpu", settings=SearchSettings(brevity_penalty=0.0)), "held")
    assert [t.text for t in plain.translate(LINES)] == expected[0.0]
    held = translator.translate(LINES[:3])
    assert [s.score for s in translator.score(LINES[:3], [t.text for t in held])] == pytest.approx([t.score for t in held], abs=1e-3)
    unpenalized = translator.score(LINES[:3], [t.text for t in held], brevity_penalty=0)
    assert all(u.score >= s.score for u, s in zip(unpenalized, translator.score(LINES[:3], [t.text for t in held])))
    server = Server(["-m", str(held_long), "--threads", "1"], tmp_path)
    try:
        status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES})
        assert status == 200 and [r["translation"] for r in answer["translations"]] == expected[None], answer
        status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES, "brevity_penalty": 0})
        assert status == 200 and [r["translation"] for r in answer["translations"]] == expected[0.0], answer
        assert answer["settings"]["brevity_penalty"] == 0
        status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES[:1], "brevity_penalty": 30})
        assert status == 400 and "brevity_penalty" in answer["error"], answer
    finally:
        server.stop()


def test_calibration_is_bounded_by_its_budget_counts_its_translations_and_never_fails_nmt_average(trained_model, trained_run, prepared,
                                                                                                 nmt_main, tmp_path):
    # issue 51: up to seven translations of 1,000 lines (base on a CPU: 2 to 20 minutes) behind a bar of "5/?", and an
    # OSError from a missing train shard after the model was written.
    from nmtcli.data.prepare import read_manifest
    from nmtcli.training.brevity import MAX_TRIALS, MIN_LINES, calibrate

    manifest = read_manifest(prepared)
    ticks = iter(range(0, 10**9, 10))  # a clock where every reading is 10 s later: the 50 probe lines took 10 s
    calls = []
    found = calibrate(trained_model, prepared, manifest, "cpu", lambda task, done, total: calls.append((done, total)),
                      budget=120.0, clock=lambda: next(ticks))
    assert found.lines == MIN_LINES and all(t.lines == MIN_LINES for t in found.trials)  # 120 s for 7 at 0.2 s a line: 85, the floor 200
    assert calls[0] == (0, MAX_TRIALS) and calls[-1] == (MAX_TRIALS, MAX_TRIALS) and all(total == MAX_TRIALS for _, total in calls)
    fast = calibrate(trained_model, prepared, manifest, "cpu", budget=120.0, clock=itertools.count(0, 1e-6).__next__)
    assert fast.lines == len((prepared / "valid.en").read_text(encoding="utf-8").splitlines())  # all of them (fewer than 1,000)

    data = tmp_path / "data"
    shutil.copytree(prepared, data)
    (data / "train.de.idx").write_bytes((data / "train.de.idx").read_bytes()[:-12])  # cut short
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    config = json.loads((run / "config.json").read_text())
    config["data"]["dir"] = str(data)
    (run / "config.json").write_text(json.dumps(config))
    out = nmt_main("average", str(run), "-o", str(tmp_path / "model"), "--last", "1")
    assert out.returncode == 0 and (tmp_path / "model" / "model.safetensors").is_file()
    assert "brevity penalty not calibrated" in out.stderr and "cannot read the training split's lengths" in out.stderr, out.stderr
