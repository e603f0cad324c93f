"""The text filters of `nmt prepare` (nmtcli/data/cleaning.py, issue 53): each drops its kind of noise and keeps the
right pairs that look like it; counts reach the manifest and the report; --clean-report shows what was dropped."""

from __future__ import annotations

import json

import pytest
from conftest import nmt_in_process

from nmtcli.data.cleaning import DEFAULTS, TextFilter
from nmtcli.data.multilingual import Corpus, prepare_multilingual
from nmtcli.data.settings import PrepareSettings
from nmtcli.data.text_stages import CLEANING_SAMPLE

pytest.importorskip("py3langid")


def only(name: str, source_lang: str = "en", target_lang: str = "de") -> TextFilter:
    """A filter with `name` the only one on (and `empty`, which always is)."""
    return TextFilter(source_lang, target_lang, **{n: n == name for n in DEFAULTS})


# (filter, pairs it drops, right pairs that look like them and are kept)
CASES = [
    ("copy",
     [("Save all changes to this page", "Save all changes to this page"), ("Delete the selected items.", "Delete the selected items")],
     [("OK", "OK"), ("Django CMS", "Django CMS"), ("Universally unique identifier", "Universally Unique Identifier"),
      ("Wagtail frontend cache", "Wagtail Frontend-Cache")]),
    ("number_mismatch",
     [("Page 3 of 10", "Seite 3 von 12"), ("Released in 1998", "Veröffentlicht 2001")],
     [("1,000.5 items", "1.000,5 Elemente"), ("Version 2.1 of 2024", "Version 2.1 von 2024"), ("Save", "Speichern")]),
    ("url_mismatch",
     [("See https://example.org/a for more.", "Siehe https://example.org/b für mehr."), ("Visit www.a.org", "Besuchen Sie die Seite")],
     [("See https://example.org/a.", "Siehe https://example.org/a"), ("Read the docs", "Lies die Doku")]),
    ("non_alphabetic",
     [("12.5 % / 13.7 % / 99 %", "12,5 % / 13,7 % / 99 %"), ("| 12 | 34 | 56 |", "| 12 | 34 | 56 |")],
     [("404", "404"), ("v2.0", "v2.0"), ("Ln %1, Col %2", "Z. %1, Sp. %2 der Datei")]),
    ("long_word",
     [("the key is " + "aGVsbG8gd29ybGQ" * 5, "der Schlüssel ist " + "aGVsbG8gd29ybGQ" * 5)],
     [("Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz", "beef labelling law"),
      ("see https://example.org/" + "a/" * 40, "siehe https://example.org/" + "a/" * 40)]),
    ("wrong_language",
     [("The weather is very nice today in the whole city.", "Le temps est très beau aujourd'hui dans toute la ville."),
      ("The weather is very nice today in the whole city.", "The weather is very nice today in the whole city, really."),
      ("Il fait très beau aujourd'hui dans toute la ville.", "Das Wetter ist heute in der ganzen Stadt sehr schön.")],
     [("The weather is very nice today in the whole city.", "Das Wetter ist heute in der ganzen Stadt sehr schön."),
      ("Unschedule", "Planung aufheben"), ("Save", "Enregistrer"),  # too few letters to judge
      ("Authenticator app", "Authenticator-App")]),
]


@pytest.mark.parametrize("name, dropped, kept", CASES, ids=[c[0] for c in CASES])
def test_each_filter_drops_its_noise_and_keeps_right_pairs_that_look_like_it(name, dropped, kept):
    f = only(name)
    assert [f.reason(s, t) for s, t in dropped] == [name] * len(dropped)
    assert [f.reason(s, t) for s, t in kept] == [None] * len(kept)
    # Switched off, it keeps what it dropped (nothing else in the chain objects to these pairs).
    off = TextFilter("en", "de", **{n: False for n in DEFAULTS})
    assert [off.reason(s, t) for s, t in dropped] == [None] * len(dropped)


def test_the_defaults_drop_each_kind_in_order_and_count_it():
    f = TextFilter("en", "de", sample_size=2)
    pairs = [
        ("The weather is very nice today in the whole city.", "Das Wetter ist heute in der ganzen Stadt sehr schön."),
        ("Released in 1998", "Veröffentlicht 2001"),
        ("Save all changes to this page", "Save all changes to this page"),  # a copy, and English: `copy` comes first
        ("The weather is very nice today in the whole city.", "Le temps est très beau aujourd'hui dans toute la ville."),
        ("The weather is very nice today in the whole city.", "Das Wetter ist heute in der ganzen Stadt sehr schön."),
    ]
    assert [f.reason(s, t) for s, t in pairs] == [None, "number_mismatch", "copy", "wrong_language", "duplicate"]
    counts = {c["filter"]: (c["before"], c["after"]) for c in f.counts()}
    assert counts == {"empty": (5, 5), "long_word": (5, 5), "non_alphabetic": (5, 5), "url_mismatch": (5, 5), "number_mismatch": (5, 4),
                      "copy": (4, 3), "wrong_language": (3, 2), "duplicate": (2, 1)}
    assert f.samples["copy"] == [pairs[2]] and f.samples["url_mismatch"] == []


def test_the_sample_of_drops_is_seeded_and_bounded():
    pairs = [(f"Save all {n} changes to this page", f"Save all {n} changes to this page") for n in range(50)]

    def sample(seed: int) -> list[tuple[str, str]]:
        f = TextFilter("en", "de", sample_size=5, seed=seed)
        f.keep(pairs)
        return f.samples["copy"]

    assert len(sample(1)) == 5 and sample(1) == sample(1) and sample(1) != sample(2)
    assert set(sample(1)) <= set(pairs)


def test_a_language_the_detector_does_not_know_is_not_judged():
    f = TextFilter("en", "xx")
    assert f.languages_unknown == ["xx"] and "wrong_language" in f.names
    assert f.reason("The weather is very nice today in the whole city.", "Le temps est très beau aujourd'hui dans toute la ville.") is None
    assert f.reason("Le temps est très beau aujourd'hui dans toute la ville.", "anything at all") == "wrong_language"  # the English side still is
    assert "wrong_language" not in TextFilter("yy", "xx").names


def test_parallel_judging_gives_the_same_drops_as_one_process():
    pairs = [(f"Item {n} of the list is here", f"Eintrag {n} der Liste ist hier") for n in range(1500)]
    pairs += [(f"Item {n} of the list is here", f"Eintrag {n + 1} der Liste ist hier") for n in range(1500)]
    pairs += [("The weather is very nice today in the whole city.", "Le temps est très beau aujourd'hui dans toute la ville.")] * 3
    pairs += pairs[:2]
    one, two = TextFilter("en", "de", 3, workers=1), TextFilter("en", "de", 3, workers=2)
    with two:
        assert two.keep(pairs) == one.keep(pairs)
    assert two.counts() == one.counts() and two.samples == one.samples
    assert one.dropped["number_mismatch"] == 1500 and one.dropped["wrong_language"] == 3 and one.dropped["duplicate"] == 2


NOISE = [
    ("Save all changes to this page", "Save all changes to this page"),  # copy
    ("Page 3 of 10 is shown here", "Seite 3 von 12 wird hier gezeigt"),  # number mismatch
    ("The weather is very nice today in the whole city.", "Le temps est très beau aujourd'hui dans toute la ville."),  # wrong language
]


def write_pair(directory, prefix, pairs, src="en", tgt="de"):
    (directory / f"{prefix}.{src}").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (directory / f"{prefix}.{tgt}").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return directory / prefix


@pytest.fixture
def noisy(tmp_path, corpus):
    clean = list(zip((corpus["train"].parent / "train.en").read_text().splitlines()[:300],
                     (corpus["train"].parent / "train.de").read_text().splitlines()[:300]))
    return {"train": write_pair(tmp_path, "noisy", clean + NOISE), "valid": write_pair(tmp_path, "v", clean[:5]), "clean": clean}


def test_the_counts_reach_the_manifest_and_the_report_shows_what_was_dropped(tmp_path, noisy):
    result = nmt_in_process("prepare", "--train", str(noisy["train"]), "--valid", str(noisy["valid"]), "--vocab-size", "500",
                            "-o", str(tmp_path / "data"), "--clean-report", str(tmp_path / "report.jsonl"))
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    train = manifest["splits"]["train"]
    assert {k: train["dropped"][k] for k in ("copy", "number_mismatch", "wrong_language")} == {"copy": 1, "number_mismatch": 1, "wrong_language": 1}
    assert train["pairs"] == 300 - train["dropped"].get("ratio", 0) and "language_unknown" not in train
    assert "copy 1" in result.stderr and "number_mismatch 1" in result.stderr and "wrong_language 1" in result.stderr
    assert "report.jsonl: 3 dropped pairs" in result.stderr
    report = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text(encoding="utf-8").splitlines()]
    assert sorted((r["filter"], r["source"], r["target"]) for r in report) == sorted(
        [("copy", *NOISE[0]), ("number_mismatch", *NOISE[1]), ("wrong_language", *NOISE[2])])
    assert CLEANING_SAMPLE in manifest["files"]
    # A finished data dir is reused, and its report written again.
    (tmp_path / "report.jsonl").unlink()
    again = nmt_in_process("prepare", "--train", str(noisy["train"]), "--valid", str(noisy["valid"]), "--vocab-size", "500",
                           "-o", str(tmp_path / "data"), "--clean-report", str(tmp_path / "report.jsonl"))
    assert "already prepared" in again.stderr and len((tmp_path / "report.jsonl").read_text().splitlines()) == 3


@pytest.mark.parametrize("flag, name", [("--keep-copies", "copy"), ("--keep-number-mismatch", "number_mismatch"),
                                        ("--keep-wrong-language", "wrong_language")])
def test_each_filter_switched_off_keeps_its_pairs(tmp_path, noisy, flag, name):
    nmt_in_process("prepare", "--train", str(noisy["train"]), "--valid", str(noisy["valid"]), "--vocab-size", "500", "-o", str(tmp_path / "d"),
                   flag)
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert name not in manifest["splits"]["train"]["dropped"] and manifest["settings"][f"drop_{flag.removeprefix('--keep-').replace('-', '_')}"] is False
    assert name not in [f["filter"] for f in manifest["splits"]["train"]["filters"]]


def test_every_flag_pair_reaches_the_settings():
    fields = PrepareSettings("en", "de").__dataclass_fields__
    for setting in ("drop_long_words", "drop_non_alphabetic", "drop_url_mismatch", "drop_number_mismatch", "drop_copies", "drop_wrong_language"):
        assert fields[setting].default is True
        settings = PrepareSettings("en", "de", **{setting: False})
        assert len(settings.text_filter().names) == len(PrepareSettings("en", "de").text_filter().names) - 1


def test_an_older_data_dir_has_no_report_to_write(tmp_path, noisy):
    from nmtcli.data.text_stages import write_clean_report
    from nmtcli.errors import NmtError

    (tmp_path / "old").mkdir()
    with pytest.raises(NmtError, match="has no cleaning.jsonl: it was prepared by an older nmt"):
        write_clean_report(tmp_path / "old", tmp_path / "r.jsonl")


def test_multilingual_data_is_cleaned_per_pair_in_each_pairs_languages(tmp_path, noisy):
    # The French line is noise in en-de and right in en-fr.
    import random

    from corpus import french_pair

    french = NOISE[2]
    rng = random.Random(0)
    de = write_pair(tmp_path, "de-train", noisy["clean"] + NOISE)
    fr = write_pair(tmp_path, "fr-train", [french_pair(rng) for _ in range(100)] + [french], tgt="fr")
    fr_valid = write_pair(tmp_path, "fr-valid", [french_pair(rng) for _ in range(5)], tgt="fr")
    train = [Corpus("en", "de", de), Corpus("en", "fr", fr)]
    valid = [Corpus("en", "de", noisy["valid"]), Corpus("en", "fr", fr_valid)]
    manifest = prepare_multilingual(tmp_path / "m", train, valid, None, PrepareSettings("src", "tgt", vocab_size=500))
    directions = manifest["splits"]["train"]["directions"]
    assert {k: directions["en-de"]["dropped"].get(k) for k in ("copy", "number_mismatch", "wrong_language")} == {
        "copy": 1, "number_mismatch": 1, "wrong_language": 1}
    report = [json.loads(line) for line in (tmp_path / "m" / CLEANING_SAMPLE).read_text(encoding="utf-8").splitlines()]
    dropped = {(r["direction"], r["filter"], r["source"], r["target"]) for r in report}
    assert ("en-de", "wrong_language", *french) in dropped and not any(d == "en-fr" and (s, t) == french for d, _, s, t in dropped)


def test_short_copies_stay_only_where_other_pairs_vouch_for_their_words(tmp_path, noisy):
    """One or two words the same on both sides stay where another pair's target holds them ("PDF"), go where none does
    ("Save": untranslated); compounds ("Partner name" -> "Partnername") and numbers are no copies of this kind."""
    short = [("Save", "Save"), ("PDF", "PDF"), ("download the PDF", "das PDF herunterladen"), ("Partner name", "Partnername"),
             ("404", "404"), ("OK", "OK.")]
    train = write_pair(tmp_path, "short", noisy["clean"] + short)
    flags = ["--valid", str(noisy["valid"]), "--vocab-size", "500", "--keep-misaligned"]
    nmt_in_process("prepare", "--train", str(train), *flags, "-o", str(tmp_path / "data"))
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    steps = {f["filter"]: (f["before"], f["after"]) for f in manifest["splits"]["train"]["filters"]}
    assert steps["short_copy"] == (306, 304) and manifest["splits"]["train"]["dropped"]["short_copy"] == 2
    records = [json.loads(line) for line in (tmp_path / "data" / CLEANING_SAMPLE).read_text(encoding="utf-8").splitlines()]
    assert sorted((r["source"], r["target"]) for r in records if r["filter"] == "short_copy") == [("OK", "OK."), ("Save", "Save")]
    nmt_in_process("prepare", "--train", str(train), *flags, "--keep-copies", "-o", str(tmp_path / "kept"))
    kept = json.loads((tmp_path / "kept" / "manifest.json").read_text())["splits"]["train"]
    assert "short_copy" not in [f["filter"] for f in kept["filters"]] and "short_copy" not in kept["dropped"]


def test_a_corpus_of_unvouched_short_copies_is_refused_in_one_line(tmp_path):
    names = ["Paris", "London", "Berlin", "Madrid"]
    train = write_pair(tmp_path, "names", [(n, n) for n in names])
    result = nmt_in_process("prepare", "--train", str(train), "--valid", str(train), "-o", str(tmp_path / "d"), check=False)
    assert result.returncode != 0 and "one- or two-word copies" in result.stderr and "--keep-copies" in result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("nmt: error: no training pair survived cleaning") and "Traceback" not in result.stderr
