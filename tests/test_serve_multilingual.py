"""`nmt serve` with a multilingual model (NLLB-200's layout, imported from the m2m100_dirs fixture) beside a
one-direction en-de model: every pair of its languages, LibreTranslate's codes, source auto among its languages.

The real command on a loopback port, as in test_serve.py; the translations are checked against `nmt translate`
with the same settings.
"""

from __future__ import annotations

import json

import pytest
from conftest import nmt_in_process
from test_serve import SHORT, Server, in_thread, request, result, translate

pytest.importorskip("starlette")

# The six languages of the fixture's NLLB model, as LibreTranslate's clients name them (served ISO 639-1 codes).
LANGUAGES = ["ar", "de", "en", "es", "fr", "zh"]
# Over 40 characters each: each text's own language is detected (a shorter one takes the request's, test_serve_clients.py).
ENGLISH = "the old man reads a book in the garden with his dog"
FRENCH = "Le chat dort sur le canapé pendant que les enfants jouent dans le jardin avec leurs amis."


@pytest.fixture(scope="module")
def models(m2m100_dirs, random_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("serve-multilingual") / "nllb"
    nmt_in_process("import", "nllb", str(m2m100_dirs["nllb"]), "-o", str(out))
    return {"nllb": out, "en-de": random_model}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    s = Server(["-m", str(models["nllb"]), "-m", str(models["en-de"]), "--threads", "1", *SHORT], tmp_path_factory.mktemp("serve"))
    yield s
    s.stop()


def cli(model, lines: list[str], *languages: str) -> list[dict]:
    """`nmt translate --output-format json` with the server's settings (beam 4, max_len_b 10)."""
    out = nmt_in_process("translate", "-m", str(model), *languages, "--threads", "1", "--output-format", "json", *SHORT,
                         input="\n".join(lines) + "\n").stdout
    return [json.loads(line) for line in out.splitlines()]


def test_every_pair_of_a_multilingual_models_languages_is_served_beside_a_one_direction_model(server, models):
    assert request(server, "GET", "/languages")[1] == [
        {"code": code, "name": name, "targets": [other for other in LANGUAGES if other != code]}
        for code, name in zip(LANGUAGES, ["Arabic", "German", "English", "Spanish", "French", "Chinese"])]
    listed = request(server, "GET", "/nmt/models")[1]
    assert [(m["name"], m.get("languages")) for m in listed] == [(str(models["nllb"]), LANGUAGES), (str(models["en-de"]), None)]
    assert request(server, "GET", "/health")[1]["models"] == ["multilingual (6 languages)", "en-de"]
    assert request(server, "GET", "/frontend/settings")[1]["language"] == {"source": {"code": "en", "name": "English"},
                                                                           "target": {"code": "de", "name": "German"}}

    lines = ["the dog sees a cat", "a red car"]
    # en->de is the one-direction model's pair: it translates it, not the multilingual model
    assert translate(server, {"q": lines, "source": "en", "target": "de"})["translatedText"] == [r["translation"] for r in cli(models["en-de"], lines)]
    for source, target, codes in (("en", "fr", ("eng_Latn", "fra")), ("de", "es", ("deu", "spa_Latn")), ("en", "zh", ("en", "zh-Hans"))):
        expected = cli(models["nllb"], lines, "-s", source, "-t", target)
        assert translate(server, {"q": lines, "source": source, "target": target})["translatedText"] == [r["translation"] for r in expected]
        status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": lines, "source": codes[0], "target": codes[1]})
        assert status == 200 and (answer["model"], answer["source"], answer["target"]) == (str(models["nllb"]), source, target)
        assert [r["translation"] for r in answer["translations"]] == [r["translation"] for r in expected]
        assert [r["tokens"] for r in answer["translations"]] == [r["tokens"] for r in expected]
    # two directions of one model at once: each request gets its own direction's translations (and scores)
    def records(target: str) -> list[dict]:
        return request(server, "POST", "/nmt/translate", {"lines": lines, "source": "en", "target": target})[1]["translations"]

    one, other = records("fr"), records("ar")
    assert one != other
    calls = [in_thread(records, target) for target in ("fr", "ar") * 4]
    assert [result(answers) for _, answers in calls] == [one, other] * 4


def test_source_auto_detects_among_the_models_languages(server, models):
    french = translate(server, {"q": FRENCH, "source": "fr", "target": "de"})["translatedText"]
    auto = translate(server, {"q": [FRENCH, ENGLISH, "Der Hund sieht eine Katze und einen Vogel im Garten."],
                              "source": "auto", "target": "de"})
    english = translate(server, {"q": ENGLISH, "source": "en", "target": "de"})["translatedText"]  # the en-de model's
    assert auto["translatedText"] == [french, english, "Der Hund sieht eine Katze und einen Vogel im Garten."]  # German stays German
    assert [found["language"] for found in auto["detectedLanguage"]] == ["fr", "en", "de"]
    status, answer, _ = request(server, "POST", "/translate", {"q": "猫はソファの上で寝ていて、子供たちは庭で友達と遊んでいます。", "source": "auto", "target": "de"})
    assert status == 400 and list(answer) == ["error"] and answer["error"].startswith("ja is not supported (the text was detected as Japanese at")


@pytest.mark.parametrize("body, message", [
    ({"q": "a", "source": "en", "target": "ja"}, "ja is not supported (this server translates en->de, any two of the 6 languages of "),
    ({"q": "a", "source": "xx", "target": "de"}, "xx is not supported"),
    ({"q": "a", "source": "en", "target": "en"}, "English (en) is not available as a target language from English (en)"),
], ids=["unknown target", "unknown source", "same language"])
def test_a_pair_the_server_lacks_is_a_400_in_libretranslates_error_shape(server, body, message):
    status, answer, _ = request(server, "POST", "/translate", body)
    assert (status, list(answer)) == (400, ["error"]) and answer["error"].startswith(message), answer
    status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": ["a"], "target": "fr"})
    assert status == 400 and "several models fit" in answer["error"] and "send source and target" in answer["error"]


def test_two_multilingual_models_are_refused_before_loading(models):
    from test_errors import doc_rows, matches

    from nmtcli.errors import NmtError
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.serve.models import load_models

    with pytest.raises(NmtError) as refused:
        load_models([("a", models["nllb"]), ("b", models["nllb"])], "cpu", SearchSettings())
    documented = doc_rows()["serve-two-multilingual-models"]
    assert matches(documented.message, f"nmt: error: {refused.value}") and refused.value.exit_code == documented.exit_code


def test_a_server_glossary_names_a_pair_whose_codes_hold_hyphens(models, tmp_path):
    # `--glossary zh-Hans-en=FILE` was cut at its first hyphen (zh | Hans-en): the served models decide where the pair is cut.
    from nmtcli.cli.serve import _glossaries, _glossary_pairs
    from nmtcli.errors import NmtError
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.serve.models import load_models

    terms = tmp_path / "terms.tsv"
    terms.write_text("house\tHaus\n", encoding="utf-8")
    served = load_models([("nllb", models["nllb"])], "cpu", SearchSettings())
    [(source, target, glossary)] = _glossary_pairs(_glossaries([f"zh-Hans-en={terms}", ], 10), served)
    assert (source, target) == ("zh", "en") and glossary.terms[0].targets == ("Haus",)
    [(source, target, _)] = _glossary_pairs(_glossaries([f"en-zh-Hans={terms}"], 10), served)
    assert (source, target) == ("en", "zh")
    with pytest.raises(NmtError, match="no model served translates xx -> yy-zz or xx-yy -> zz"):
        _glossary_pairs(_glossaries([f"xx-yy-zz={terms}"], 10), served)
