"""LibreTranslate's clients, which nobody here wrote, against the real `nmt serve` on a loopback port:
libretranslatepy, deep-translator's LibreTranslator, and the API examples of LibreTranslate's README run
with curl; and with them `source: "auto"`, POST /detect and GET /languages.

The server holds five tiny random models, each seeded apart so that a text sent to the wrong one comes
back different: en->es, en->it, it->en, es->en (the languages of LibreTranslate's README examples, so
they run as written) and en->de (German: a target only). The texts to detect are real: article 1 of the
Universal Declaration of Human Rights (tests/data/udhr.tsv).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_serve import SHORT, Server, request, translate

from nmtcli.documents.languages import Detector

pytest.importorskip("py3langid")

PAIRS = {"en-es": 0, "en-it": 1, "it-en": 2, "es-en": 3, "en-de": 4}  # pair -> the seed of its weights


def article_1() -> dict[str, str]:
    """Article 1 of the UDHR in each language of tests/data/udhr.tsv (its first paragraph)."""
    found: dict[str, str] = {}
    for line in (Path(__file__).parent / "data" / "udhr.tsv").read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            language, article, text = line.split("\t")
            if article == "1":
                found.setdefault(language, text)
    return found


ARTICLE_1 = article_1()


@pytest.fixture(scope="module")
def client_models(random_model, tmp_path_factory) -> list[Path]:
    import torch

    from nmtcli.model.checkpoint import write_model_dir
    from nmtcli.model.config import ModelConfig
    from nmtcli.model.transformer import Transformer

    root = tmp_path_factory.mktemp("client-models")
    values = json.loads((random_model / "config.json").read_text())
    dirs = []
    for pair, seed in PAIRS.items():
        torch.manual_seed(seed)
        source, target = pair.split("-")
        out = root / f"tiny-{pair}"
        write_model_dir(out, Transformer(ModelConfig.from_dict(values["model"])).state_dict(),
                        {**values, "languages": {"source": source, "target": target}},
                        {"sentencepiece.model": random_model / "sentencepiece.model"}, f"# tiny-{pair}\n")
        dirs.append(out)
    return dirs


@pytest.fixture(scope="module")
def server(client_models, tmp_path_factory):
    s = Server([arg for path in client_models for arg in ("-m", str(path))] + ["--threads", "1", *SHORT, "--max-len-a", "0"],
               tmp_path_factory.mktemp("serve-clients"))
    yield s
    s.stop()


def url(server: Server) -> str:
    return f"http://127.0.0.1:{server.port}/"


def test_languages_lists_every_source_and_target(server):
    assert request(server, "GET", "/languages")[1] == [
        {"code": "de", "name": "German", "targets": []}, {"code": "en", "name": "English", "targets": ["de", "es", "it"]},
        {"code": "es", "name": "Spanish", "targets": ["en"]}, {"code": "it", "name": "Italian", "targets": ["en"]}]


def test_auto_detects_each_text_and_translates_it_with_its_languages_model(server):
    it, es = ARTICLE_1["it"], ARTICLE_1["es"]
    answer = translate(server, {"q": [it, es, "", "12:30 !"], "source": "auto", "target": "en", "alternatives": 1})
    by_source = translate(server, {"q": [it], "source": "it", "target": "en", "alternatives": 1})
    assert by_source != translate(server, {"q": [it], "source": "es", "target": "en", "alternatives": 1})  # the models differ
    assert answer["translatedText"][0] == by_source["translatedText"][0] and answer["alternatives"][0] == by_source["alternatives"][0]
    assert answer["translatedText"][1] == translate(server, {"q": es, "source": "es", "target": "en"})["translatedText"]
    assert answer["translatedText"][2:] == ["", "12:30 !"] and answer["alternatives"][2:] == [[""], ["12:30 !"]]  # nothing to translate: as sent
    found = answer["detectedLanguage"]
    assert [d["language"] for d in found] == ["it", "es", "en", "en"] and found[0]["confidence"] > 90 and found[1]["confidence"] > 90
    assert found[2:] == [{"confidence": 0.0, "language": "en"}] * 2  # LibreTranslate's answer when no language is found
    one = translate(server, {"q": it, "source": "auto", "target": "en"})
    assert one["translatedText"] == by_source["translatedText"][0] and one["detectedLanguage"]["language"] == "it"


@pytest.mark.parametrize("text, target, message", [
    ("fr", "en", "fr is not supported (the text was detected as French at "),
    ("de", "en", "de is not supported (the text was detected as German at "),
    ("it", "xx", "xx is not supported"),
])
def test_auto_refuses_text_that_no_model_translates_into_the_target(server, text, target, message):
    status, answer, _ = request(server, "POST", "/translate", {"q": ARTICLE_1[text], "source": "auto", "target": target})
    assert status == 400 and answer["error"].startswith(message), answer
    status, answer, _ = request(server, "POST", "/translate", {"q": [ARTICLE_1["it"], ARTICLE_1[text]], "source": "auto", "target": target})
    assert status == 400 and ("(text 2 was detected" in answer["error"] or target == "xx"), answer


def test_auto_keeps_text_already_in_the_target_and_reads_short_texts_together(server):
    # English into English: nothing to translate, the text comes back as sent (German has no model into English).
    answer = translate(server, {"q": [ARTICLE_1["en"], ARTICLE_1["it"]], "source": "auto", "target": "en", "alternatives": 1})
    assert answer["translatedText"][0] == ARTICLE_1["en"] and answer["alternatives"][0] == [ARTICLE_1["en"]]
    assert [d["language"] for d in answer["detectedLanguage"]] == ["en", "it"]
    assert answer["translatedText"][1] == translate(server, {"q": ARTICLE_1["it"], "source": "it", "target": "en"})["translatedText"]
    # UI strings, as a CMS sends them: alone, "Help" reads as German to the detector; with the others, as English.
    words = ["Save", "Help", "Back", "Home", "Edit"]
    assert Detector(["en", "de", "es", "it"]).detect("Help", candidates=1)[0].language != "en"
    answer = translate(server, {"q": words, "source": "auto", "target": "de"})
    assert [d["language"] for d in answer["detectedLanguage"]] == ["en"] * len(words)
    assert answer["translatedText"] == translate(server, {"q": words, "source": "en", "target": "de"})["translatedText"]


def test_detect_answers_in_libretranslates_shape(server):
    status, answer, _ = request(server, "POST", "/detect", {"q": ARTICLE_1["es"]})
    assert status == 200 and answer[0]["language"] == "es" and answer[0]["confidence"] > 90 and len(answer) <= 3
    assert all(set(d) == {"confidence", "language"} and 0 <= d["confidence"] <= 100 for d in answer)
    status, listed, _ = request(server, "POST", "/detect", {"q": [ARTICLE_1["es"], ARTICLE_1["it"], "¿Y?"]})
    assert status == 200 and {d["language"] for d in listed[:2]} == {"es", "it"}  # one ranking for the list, as LibreTranslate
    assert request(server, "POST", "/detect", {"q": "1 + 1 = 2"})[1] == [{"confidence": 0.0, "language": "en"}]
    assert request(server, "POST", "/detect", {"q": ""})[:2] == (400, {"error": "Invalid request: missing q parameter"})
    assert request(server, "POST", "/detect", {"q": ["a", 1]})[0] == 400
    assert request(server, "POST", "/detect", {"q": "a" * 20_001})[0] == 413


def test_libretranslatepy(server):
    from libretranslatepy import LibreTranslateAPI

    lt = LibreTranslateAPI(url(server))
    assert lt.translate("LibreTranslate is awesome!", "en", "es") == translate(
        server, {"q": "LibreTranslate is awesome!", "source": "en", "target": "es"})["translatedText"]
    it = ARTICLE_1["it"]
    assert lt.translate(it, "auto", "en") == translate(server, {"q": it, "source": "it", "target": "en"})["translatedText"]
    assert lt.detect(it)[0]["language"] == "it" and lt.detect("What language is this?")[0]["language"] == "en"
    assert [(entry["code"], entry["targets"]) for entry in lt.languages()] == [("de", []), ("en", ["de", "es", "it"]), ("es", ["en"]), ("it", ["en"])]


def test_deep_translators_libretranslator(server):
    from deep_translator import LibreTranslator
    from deep_translator.exceptions import ServerException

    es, it = ARTICLE_1["es"], ARTICLE_1["it"]
    expected = translate(server, {"q": [es, it], "source": "auto", "target": "en"})["translatedText"]
    # It sends its fields in the query string of an empty POST, and always an api_key (this server has none to check).
    auto = LibreTranslator(source="auto", target="English", api_key="unused", custom_url=url(server))
    assert auto.translate(es) == expected[0] and auto.translate_batch([es, it]) == expected
    assert LibreTranslator(source="Italian", target="en", api_key="unused", custom_url=url(server)).translate(it) == expected[1]
    with pytest.raises(ServerException):  # French: no model from it
        auto.translate(ARTICLE_1["fr"])


@pytest.mark.parametrize("body, expect", [
    # "Simple"
    ('{"q":"Hello!","source":"en","target":"es"}', lambda a: set(a) == {"translatedText"} and isinstance(a["translatedText"], str)),
    # "Auto Detect Language": {"detectedLanguage": {"confidence": 83, "language": "it"}, "translatedText": "Bye!"}
    ('{"q":"Ciao!","source":"auto","target":"en"}', lambda a: set(a) == {"translatedText", "detectedLanguage"}
     and a["detectedLanguage"]["language"] == "it" and 0 < a["detectedLanguage"]["confidence"] <= 100),
    # "Alternative Translations": {"alternatives": ["Salve", "Pronto"], "translatedText": "Ciao"}
    ('{"q":"Hello","source":"en","target":"it","format":"text","alternatives":3}',
     lambda a: set(a) == {"translatedText", "alternatives"} and isinstance(a["alternatives"], list) and len(a["alternatives"]) == 3),
], ids=["simple", "auto-detect-language", "alternative-translations"])
def test_libretranslates_readme_examples_with_curl(server, body, expect):
    """Each example of LibreTranslate's README (its "API Examples", LibreTranslate/LibreTranslate README.md at commit
    9e3ffec52f, since moved to its docs site: `fetch` with a JSON.stringify'd body) as the same request sent by curl."""
    curl = shutil.which("curl") or pytest.skip("no curl")
    out = subprocess.run([curl, "-sS", "-X", "POST", f"{url(server)}translate", "-H", "Content-Type: application/json", "-d", body],
                         capture_output=True, text=True, timeout=60, check=True)
    assert expect(json.loads(out.stdout)), out.stdout


def test_the_documented_form_requests_with_curl(server):
    """LibreTranslate's API docs give its fields as form data (`in: formData`): /detect's example text, and /languages."""
    curl = shutil.which("curl") or pytest.skip("no curl")
    detected = subprocess.run([curl, "-sS", "-X", "POST", f"{url(server)}detect", "-d", "q=What language is this?"],
                              capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(detected.stdout)[0]["language"] == "en"
    listed = subprocess.run([curl, "-sS", f"{url(server)}languages"], capture_output=True, text=True, timeout=60, check=True)
    assert [entry["code"] for entry in json.loads(listed.stdout)] == ["de", "en", "es", "it"]


def test_auto_reads_the_text_of_html_not_its_markup(server):
    # English markup (tag and attribute names, an English title) around Italian text: the Italian text decides.
    page = f'<div class="content" title="Read more about it"><p><b>{ARTICLE_1["it"]}</b></p><script>var language = "english";</script></div>'
    answer = translate(server, {"q": page, "source": "auto", "target": "en", "format": "html"})
    assert answer["detectedLanguage"]["language"] == "it"
    assert answer["translatedText"] == translate(server, {"q": page, "source": "it", "target": "en", "format": "html"})["translatedText"]
