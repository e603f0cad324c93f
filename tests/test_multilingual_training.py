"""A multilingual model of one's own (Johnson et al. 2017): `nmt prepare` with several pairs, `nmt train` validating
each direction, `nmt average`, then `translate --target-lang`, `score` and `info` per direction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import nmt_in_process as nmt
from corpus import write_multilingual_corpus

DIRECTIONS = ("en-de", "de-en", "en-fr")
STEPS = 150
MARGIN = 30.0  # BLEU points each trained direction must gain over the same pipeline stopped after one step


def _prepare_args(corpus: dict[str, dict[str, Path]], out: Path) -> list[str]:
    # The toy languages are words through a lexicon, no language to the detector (it takes 58 of the 2,000 toy French
    # lines for another language): the language filter stays off.
    args = ["prepare", "--vocab-size", "1000", "--workers", "1", "-o", str(out), "--keep-wrong-language"]
    for d in DIRECTIONS:
        args += ["--train", str(corpus[d]["train"]), "--valid", f"{d}={corpus[d]['valid']}", "--test", str(corpus[d]["test"])]
    return args


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, dict[str, Path]]:
    return write_multilingual_corpus(tmp_path_factory.mktemp("multilingual-corpus"), {"train": 2000, "valid": 60, "test": 60})


@pytest.fixture(scope="module")
def data(corpus, tmp_path_factory) -> Path:
    """The three directions prepared by `nmt prepare` into one data dir."""
    out = tmp_path_factory.mktemp("multilingual-data") / "data"
    nmt(*_prepare_args(corpus, out))
    return out


@pytest.fixture(scope="module")
def multilingual(data, tmp_path_factory):
    """`data` trained `STEPS` tiny steps (post-norm) and for one step, each averaged:
    (root, data dir, trained model, untrained model, the trained run's validations)."""
    from nmtcli.training.settings import train_settings_for
    from nmtcli.training.trainer import Trainer

    root = tmp_path_factory.mktemp("multilingual")
    validations = []
    for name, steps in (("trained", STEPS), ("untrained", 1)):
        # BLEU on 20 lines a direction: enough to show each is validated (an untrained model's search runs to its length limit)
        config, settings = train_settings_for("tiny", max_steps=steps, save_every=75, valid_every=75, valid_bleu=20 if steps > 1 else 0, device="cpu")
        # Post-norm: after 150 steps it is ahead on this task (mean test BLEU of the three directions, seeds 1 and 2:
        # 55.7 post, 34.8 pre); at 300 pre-norm, tiny's norm, is (90.9 against 85.3): docs/training.md, "tiny: pre-norm".
        config = config.replace(norm="post")
        Trainer(root / f"runs/{name}", data, config, settings,
                on_event=lambda kind, values: validations.append(values) if kind == "valid" and name == "trained" else None).run()
        nmt("average", str(root / f"runs/{name}"), "-o", str(root / f"models/{name}"))
    return root, data, root / "models/trained", root / "models/untrained", validations


def test_prepare_tags_each_pair_and_samples_the_bpe_with_temperature(data):
    manifest = json.loads((data / "manifest.json").read_text())
    assert [f"{d['source']}-{d['target']}" for d in manifest["directions"]] == list(DIRECTIONS)
    assert manifest["tokenizer"]["languages"] == {"de": "__de__", "en": "__en__", "fr": "__fr__"}
    vocab = json.loads((data / "vocab.json").read_text())
    assert manifest["vocab_size"] == len(vocab) == max(vocab.values()) + 1
    # en has 6,000 cleaned lines, fr 2,000: with T = 5 their sampled shares are closer than 3:1 (2,000^0.2 / 6,000^0.2)
    sampled = manifest["sentencepiece"]["lines_sampled"]
    assert manifest["sentencepiece"]["temperature"] == 5 and 1 < sampled["en"] / sampled["fr"] < 3
    assert {d: c["pairs"] for d, c in manifest["splits"]["train"]["directions"].items()} == dict.fromkeys(DIRECTIONS, 2000)
    # every training pair starts with its languages' tags, at the id level
    from nmtcli.data.shards import Shard

    src, tgt = (Shard(data / f"train.{side}", manifest["vocab_size"]) for side in ("src", "tgt"))
    firsts = [(int(src[i][0]), int(tgt[i][0])) for i in (0, 2000, 4000)]
    assert firsts == [(vocab["__en__"], vocab["__de__"]), (vocab["__de__"], vocab["__en__"]), (vocab["__en__"], vocab["__fr__"])]
    for d in DIRECTIONS:
        assert (data / f"valid.{d}.{d[-2:]}").is_file() and (data / f"test.{d}.{d[:2]}").is_file()


def test_score_no_shortlist_records_apart_only_the_directions_the_shortlist_serves(multilingual, tmp_path, nmt_main):
    # A direction its shortlist does not serve is searched over the whole vocabulary either way: one record of it.
    import shutil

    from nmtcli.inference.shortlist import load
    from nmtcli.model.checkpoint import read_model_dir_config

    model = tmp_path / "model"
    shutil.copytree(multilingual[2], model)
    (model / "scores.json").unlink(missing_ok=True)
    assert nmt_main("shortlist", str(model), "--data", str(multilingual[1]), "--no-check", "--device", "cpu").returncode == 0
    shortlist = load(model, read_model_dir_config(model)["model"]["vocab_size"])
    shortlist.info["directions"] = ["en-de"]  # as if learnt from en-de pairs alone
    shortlist.save(model)
    assert nmt_main("score", "-m", str(model), "--metrics", "bleu", "--json", "--no-shortlist").returncode == 0
    name = "en-de+de-en+en-fr/test"
    assert set(json.loads((model / "scores.json").read_text())) == {f"{name}/en-de (no shortlist)", f"{name}/de-en", f"{name}/en-fr"}


@pytest.mark.slow
def test_training_validates_each_direction_and_keeps_their_mean(multilingual):
    *_, events = multilingual
    last = events[-1]
    each = [last[f"valid_bleu_{d}"] for d in DIRECTIONS]
    assert last["valid_bleu"] == pytest.approx(sum(each) / 3)


@pytest.mark.slow
def test_each_trained_direction_beats_the_untrained_model(multilingual, nmt_main):
    root, data, trained, untrained, _ = multilingual
    scores = {}
    for model in (trained, untrained):
        out = nmt_main("score", "-m", str(model), "--metrics", "bleu", "--json").stdout
        scores[model.name] = {d: v["scores"][0]["score"] for d, v in json.loads(out).items()}
    assert list(scores["trained"]) == list(DIRECTIONS)
    for d in DIRECTIONS:
        assert scores["trained"][d] > scores["untrained"][d] + MARGIN, (d, scores)
    recorded = json.loads((trained / "scores.json").read_text())
    assert set(recorded) == {f"en-de+de-en+en-fr/test/{d}" for d in DIRECTIONS}


@pytest.mark.slow
def test_translate_target_lang_picks_the_output_language(multilingual, nmt_main):
    _, _, trained, *_ = multilingual
    line = "the small dog sees a red ball\n"
    german = nmt_main("translate", "-m", str(trained), "--target-lang", "de", "--beam", "1", input=line).stdout
    french = nmt_main("translate", "-m", str(trained), "--target-lang", "fr", "--beam", "1", input=line).stdout
    assert "hund" in german and "gode" in french  # the corpus' words for "dog" (tests/corpus.py)
    zero_shot = nmt_main("translate", "-m", str(trained), "-s", "de", "-t", "fr", "--beam", "1", input="der hund sieht ein ball\n")
    assert "warning: de->fr is a zero-shot direction" in zero_shot.stderr and "trained on en-de, de-en, en-fr only" in zero_shot.stderr
    assert "zero-shot" not in nmt_main("translate", "-m", str(trained), "-s", "de", "-t", "en", input=line).stderr


@pytest.mark.slow
def test_info_marks_untrained_directions_zero_shot(multilingual, nmt_main):
    _, _, trained, *_ = multilingual
    config = json.loads((trained / "config.json").read_text())
    assert config["languages"] == {"source": "mul", "target": "mul"} and config["model"]["language_tags"]
    report = json.loads(nmt_main("info", str(trained), "--json").stdout)
    assert report["directions"] == {"trained": list(DIRECTIONS), "zero_shot": ["de-fr", "fr-de", "fr-en"]}
    card = (trained / "README.md").read_text()
    assert "trained en-de, de-en, en-fr; zero-shot (untrained) de-fr, fr-de, fr-en" in card and "--target-lang de" in card


def test_prepare_is_reproducible_and_a_finished_one_is_reused(corpus, data, tmp_path, nmt_main):
    again = tmp_path / "again"
    nmt_main(*_prepare_args(corpus, again))
    manifest = json.loads((again / "manifest.json").read_text())
    assert manifest["files"] == json.loads((data / "manifest.json").read_text())["files"]  # the same sha256, file for file
    rerun = nmt_main(*_prepare_args(corpus, again))
    assert "already prepared with these inputs and settings" in rerun.stderr


def test_temperature_quotas_flatten_the_languages_shares():
    from nmtcli.data.multilingual import temperature_quotas

    assert temperature_quotas({"en": 100_000, "fr": 1_000}, 10_000, temperature=1) == {"en": 9901, "fr": 99}
    quotas = temperature_quotas({"en": 100_000, "fr": 1_000}, 10_000)  # T = 5: 100^(1/5) = 2.5 to 1
    assert quotas == {"en": 7153, "fr": 1000}  # fr's share (2,847) is more than it has: all of it


def test_prepare_refuses_a_pair_it_cannot_tell_or_a_direction_without_valid(corpus, tmp_path, nmt_main):
    unnamed = tmp_path / "train"
    for lang in ("en", "de"):
        (tmp_path / f"train.{lang}").write_text("a\n")
    result = nmt_main("prepare", "--train", str(unnamed), "--train", str(corpus["en-fr"]["train"]), "--valid", str(corpus["en-fr"]["valid"]),
                      "-o", str(tmp_path / "out"), check=False)
    assert result.returncode == 2 and result.stderr.strip() == (
        f"nmt: error: --train {unnamed}: cannot tell its language pair (write it as --train en-de=PREFIX, or keep PREFIX.en and PREFIX.de "
        "in a directory named en-de)")  # docs/errors.md, multilingual-pair-unknown
    result = nmt_main("prepare", "--train", str(corpus["en-de"]["train"]), "--train", str(corpus["en-fr"]["train"]),
                      "--valid", str(corpus["en-fr"]["valid"]), "-o", str(tmp_path / "out"), check=False)
    assert result.returncode == 2 and result.stderr.strip() == \
        "nmt: error: no --valid for en-de (pass one --valid per training direction: validation BLEU is per direction)"
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_push_and_pull_keep_the_tags_and_the_directions(multilingual, tmp_path):
    from conftest import nmt_forked
    from hub_server import FakeHub

    _, _, trained, *_ = multilingual
    with FakeHub({"hf_test_alice": "alice"}) as hub:
        env = {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN": "hf_test_alice",
               "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
        nmt_forked("push", str(trained), "alice/mul", env=env)
        nmt_forked("pull", "alice/mul", "-o", str(tmp_path / "pulled"), env=env)
    for name in ("config.json", "model.safetensors", "sentencepiece.model", "vocab.json"):
        assert (tmp_path / "pulled" / name).read_bytes() == (trained / name).read_bytes(), name
    header = (tmp_path / "pulled" / "README.md").read_text().split("---\n")[1]
    assert '- "de"\n- "en"\n- "fr"' in header  # the model's languages, not "mul"
    line = "a king helps the old woman\n"
    assert nmt("translate", "-m", str(tmp_path / "pulled"), "-t", "fr", input=line).stdout == \
        nmt("translate", "-m", str(trained), "-t", "fr", input=line).stdout


@pytest.mark.slow
def test_serve_translates_each_direction_of_the_model(multilingual, tmp_path):
    pytest.importorskip("starlette")
    from test_serve import Server, request, translate

    _, _, trained, *_ = multilingual
    server = Server(["-m", str(trained), "--threads", "1"], tmp_path)
    try:
        assert [(entry["code"], entry["targets"]) for entry in request(server, "GET", "/languages")[1]] == \
            [("de", ["en", "fr"]), ("en", ["de", "fr"]), ("fr", ["de", "en"])]
        line = "the small dog sees a red ball"
        for target in ("de", "fr"):
            served = translate(server, {"q": line, "source": "en", "target": target})["translatedText"]
            assert served == nmt("translate", "-m", str(trained), "-t", target, input=line + "\n").stdout.strip()
    finally:
        server.stop()
