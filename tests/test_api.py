"""The Python API (`from nmtcli import Translator`, docs/python-api.md): its names and signatures, what it gives, how
it refuses bad input, that it never prints and that importing it loads no torch; and the docs' examples, run."""

from __future__ import annotations

import dataclasses
import inspect
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import nmtcli
from nmtcli import NmtError, NotAvailable, Scored, Translation, Translator

DOCS = Path(__file__).parent.parent / "docs" / "python-api.md"
LINES = ["the small dog sees a red ball", "", "a new car follows the old train", "   ", "every child likes this song"]

# The public face. A change here is a change for every program that embeds nmt: keep it compatible
# (new keyword arguments at the end, with defaults), note it in CHANGELOG.md, and update this list.
PUBLIC = ["Glossary", "NmtError", "NotAvailable", "Scored", "Translation", "Translator", "__version__", "read_glossary"]
SIGNATURES = {
    "load": "(model: 'str | os.PathLike[str]', *, device: 'str' = 'auto', precision: 'str | None' = None, "
            "revision: 'str | None' = None, source_lang: 'str | None' = None, target_lang: 'str | None' = None, "
            "engine: 'EngineName' = 'native', dtype: 'str | None' = None, shortlist: 'bool' = True) -> 'Translator'",
    "translate": "(self, texts: 'Iterable[str]', *, beam: 'int' = 4, alpha: 'float' = 0.6, nbest: 'int' = 1, "
                 "prefix: 'str | Iterable[str] | None' = None, glossary: 'GlossaryLike | None' = None, "
                 "split_sentences: 'bool' = False, alignment: 'Alignment | None' = None, batch_tokens: 'int | None' = None, "
                 "length_penalty: 'str' = 'gnmt', max_len_a: 'float' = 1.0, max_len_b: 'int' = 50, protect: 'bool' = True, "
                 "protect_regex: 'Iterable[str]' = (), coverage_penalty: 'float' = 0.0, brevity_penalty: 'float | None' = None) -> 'list[Translation]'",
    "sample": "(self, texts: 'Iterable[str]', *, samples: 'int' = 1, sampling: 'str' = 'full', temperature: 'float' = 1.0, "
              "seed: 'int' = 1, max_len_a: 'float' = 1.0, max_len_b: 'int' = 50) -> 'list[Translation]'",
    "score": "(self, sources: 'Iterable[str]', targets: 'Iterable[str]', *, alpha: 'float' = 0.6, length_penalty: 'str' = 'gnmt', "
             "alignment: 'Alignment | None' = None, brevity_penalty: 'float | None' = None) -> 'list[Scored]'",
    "translate_html": "(self, document: 'str', *, beam: 'int' = 4, alpha: 'float' = 0.6, length_penalty: 'str' = 'gnmt', "
                      "max_len_a: 'float' = 1.0, max_len_b: 'int' = 50, protect: 'bool' = True, protect_regex: 'Iterable[str]' = (), "
                      "glossary: 'GlossaryLike | None' = None, coverage_penalty: 'float' = 0.0, brevity_penalty: 'float | None' = None) -> 'str'",
    "detect_language": "(self, text: 'str') -> 'list[tuple[str, float]]'",
}
TRANSLATION_FIELDS = ["text", "score", "log_prob", "tokens", "alignment", "confidence", "nbest", "sentences"]
SCORED_FIELDS = ["tokens", "token_log_probs", "score", "alignment", "confidence"]


@pytest.fixture(scope="module")
def translator(trained_model) -> Translator:
    return Translator.load(trained_model, device="cpu")


def test_the_public_names_and_signatures_stay_put():
    assert sorted(nmtcli.__all__) == PUBLIC
    assert {name: str(inspect.signature(getattr(Translator, name))) for name in SIGNATURES} == SIGNATURES
    # translate_stream is translate's iterator: the same parameters
    assert (inspect.signature(Translator.translate_stream).parameters.keys() == inspect.signature(Translator.translate).parameters.keys())
    assert [f.name for f in dataclasses.fields(Translation)] == TRANSLATION_FIELDS
    assert [f.name for f in dataclasses.fields(Scored)] == SCORED_FIELDS
    assert issubclass(NotAvailable, NmtError) and issubclass(NotAvailable, NotImplementedError)
    assert (Path(nmtcli.__file__).parent / "py.typed").is_file()


def test_importing_nmtcli_and_its_public_names_loads_no_torch():
    code = ("import sys, nmtcli; from nmtcli import Translator, Translation, NmtError, Scored; "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('nmtcli.model')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(nmtcli.__file__).parent.parent)}).stdout
    assert out.strip() == "[]"


def test_translate_gives_what_nmt_translate_writes(translator, trained_model, nmt_main):
    results = translator.translate(LINES)
    cli = nmt_main("translate", "-m", str(trained_model), "--device", "cpu", "--output-format", "json", input="\n".join(LINES) + "\n")
    records = [json.loads(line) for line in cli.stdout.splitlines()]
    assert [t.text for t in results] == [r["translation"] for r in records]
    assert [t.record() for t in results] == records
    for t in (results[0], results[2], results[4]):
        assert 0.0 <= t.confidence <= 1.0 and t.score < 0 and t.log_prob < 0 and t.tokens and len(t.nbest) == 1
        assert t.nbest[0].text == t.text and t.nbest[0].confidence == t.confidence
    assert results[1] == results[3] == Translation("", None, None)  # empty and blank texts: nothing translated


def test_nbest_prefix_alignment_and_streaming(translator):
    [five] = translator.translate([LINES[0]], beam=5, nbest=3, alignment="words")
    assert len(five.nbest) == 3 and five.nbest[0].text == five.text and five.alignment == five.nbest[0].alignment
    assert [h.score for h in five.nbest] == sorted((h.score for h in five.nbest), reverse=True)
    assert re.fullmatch(r"(\d+-\d+ ?)+", five.alignment)
    aligned = translator.translate(LINES, alignment="words")  # an empty or blank text: "" (no links), not None (not asked)
    assert [t.alignment for t in aligned[1::2]] == ["", ""] and all(t.alignment for t in aligned[::2])
    assert all(set(t.record()) == set(aligned[0].record()) for t in aligned)
    prefixed = translator.translate(LINES[:3], prefix="der katze")
    assert prefixed[0].text.startswith("der katze") and prefixed[1].text == "der katze"
    per_text = translator.translate(LINES[:2], prefix=["ein", ""])
    assert per_text[0].text.startswith("ein")
    streamed = translator.translate_stream(line for line in LINES)  # any iterable, read as it goes
    assert [t.text for t in streamed] == [t.text for t in translator.translate(LINES)]


def test_split_sentences_gives_each_sentence_its_confidence(translator):
    [paragraph] = translator.translate(["the small dog sees a red ball. every child likes this song."], split_sentences=True)
    assert len(paragraph.sentences) == 2 and paragraph.text == " ".join(s.text for s in paragraph.sentences)
    assert paragraph.log_prob == pytest.approx(sum(s.log_prob for s in paragraph.sentences))
    low, high = sorted(s.confidence for s in paragraph.sentences)
    assert low <= paragraph.confidence <= high


def test_score_and_sample(translator):
    best = translator.translate(LINES[:1])[0]
    [scored] = translator.score(LINES[:1], [best.text])
    assert scored.log_prob == pytest.approx(best.log_prob, abs=1e-4) and scored.confidence == pytest.approx(best.confidence, abs=1e-4)
    samples = translator.sample(LINES[:2], samples=3, seed=7)
    assert len(samples[0].nbest) == 3 and samples[1] == Translation("", None, None)
    assert [h.text for h in translator.sample(LINES[:2], samples=3, seed=7)[0].nbest] == [h.text for h in samples[0].nbest]


def test_bad_input_is_refused_as_the_issue_says(translator, tmp_path, nmt_main):
    assert translator.translate([]) == [] and translator.score([], []) == [] and translator.sample(iter([])) == []
    with pytest.raises(TypeError, match=r"texts\[1\] is None, not a str"):
        translator.translate(["a dog", None])
    with pytest.raises(TypeError, match=r"texts\[2\] is a int, not a str"):
        translator.translate(iter(["a", "b", 3]))
    with pytest.raises(TypeError, match="not a single str: wrap it in a list"):
        translator.translate("the dog")
    with pytest.raises(NmtError, match=r"glossary\['dog'\]: an empty target term"):
        translator.translate(["the dog"], glossary={"dog": ""})
    with pytest.raises(NmtError, match="nbest 5 exceeds beam 4"):
        translator.translate(["the dog"], nbest=5)
    with pytest.raises(NmtError, match="the targets end after line 1"):
        translator.score(["a", "b"], ["x"])
    (tmp_path / "notes.txt").write_text("not a model\n")
    with pytest.raises(NmtError) as caught:
        Translator.load(tmp_path, device="cpu")
    cli = nmt_main("translate", "-m", str(tmp_path), "--device", "cpu", input="a\n", check=False)
    assert cli.returncode != 0 and f"nmt: error: {caught.value}" in cli.stderr


def test_the_api_never_prints_and_logs_its_warnings(trained_model, capfd, caplog):
    with caplog.at_level(logging.WARNING, logger="nmtcli"):
        translator = Translator.load(trained_model, device="cpu")
        translator.translate([" ".join(["dog"] * 1100)], max_len_a=0.0, max_len_b=2)  # truncated to the model's length: a warning
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    assert any("truncated to the model's" in r.getMessage() for r in caplog.records if r.name == "nmtcli")


def test_the_docs_examples_run(trained_model, tmp_path, monkeypatch):
    """Every ```python block of docs/python-api.md, in order, in one namespace, with models/tiny-demo the tests' model."""
    blocks = re.findall(r"```python\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    assert len(blocks) >= 5
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny-demo").symlink_to(trained_model)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    for number, block in enumerate(blocks, start=1):
        try:
            exec(compile(block, f"{DOCS.name} block {number}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"docs/python-api.md, python block {number} failed:\n{block}") from e


def test_the_api_rows_of_docs_errors_md(translator, trained_model, tmp_path, monkeypatch):
    """Each row of docs/errors.md's Python API table: its example raises what the row says, with its message."""
    from test_errors import matches

    section = (Path(__file__).parent.parent / "docs" / "errors.md").read_text(encoding="utf-8").split("## The Python API")[1].split("\n## ")[0]
    rows = [[cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]] for line in section.splitlines()
            if line.startswith("| ") and "`" in line]
    assert len(rows) >= 8
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not-a-model").mkdir()
    (tmp_path / "not-a-model" / "notes.txt").write_text("not a model\n")
    namespace = {"translator": translator, "Translator": Translator}
    if any("ct2." in row[1] for row in rows):
        try:
            import ctranslate2  # noqa: F401
        except ImportError:
            rows = [row for row in rows if "ct2." not in row[1]]
        else:
            from conftest import nmt_in_process

            nmt_in_process("export", "ctranslate2", str(trained_model), str(tmp_path / "ct2"))
            namespace["ct2"] = Translator.load(tmp_path / "ct2", device="cpu", engine="ctranslate2")
    for what, example, raises, message in rows:
        code, expected = example.strip("`"), message.strip("`").strip().replace("\\|", "|")
        if raises == "returns":
            assert repr(eval(code, namespace)) == expected, what
            continue
        kind = {"TypeError": TypeError, "NmtError": NmtError, "NotAvailable": NotAvailable}[raises.strip("`")]
        with pytest.raises(kind) as caught:
            eval(code, namespace)
        assert type(caught.value) is kind and matches(expected, str(caught.value)), f"{what}\n   docs: {expected}\n actual: {caught.value}"


def test_a_call_s_bad_numbers_are_refused_and_change_nothing(translator):
    # issue 51: alpha and max_len_a were not checked (NaN made every score NaN), and batch_tokens= changed the engine's
    # budget before the call's other settings were checked.
    budget = translator.engine.budget.tokens
    for bad in ({"alpha": float("nan")}, {"alpha": float("inf")}, {"max_len_a": float("nan")}, {"max_len_a": -1.0}):
        with pytest.raises(NmtError, match=f"{next(iter(bad))} .* is out of range"):
            translator.translate(["Insert image"], **bad)
    with pytest.raises(NmtError, match="nbest 8 exceeds beam 4"):
        translator.translate(["Insert image"], nbest=8, batch_tokens=budget + 17)
    assert translator.engine.budget.tokens == budget


def test_a_translator_closes_and_lets_go_of_its_model(trained_model):
    # issue 51: no close() nor context manager; a notebook or a server loading models in turn kept every model's weights.
    import gc
    import weakref

    with Translator.load(trained_model, device="cpu") as translator:
        [t] = translator.translate(["the dog sees a house"])
        weights = weakref.ref(translator.engine.model)
    assert t.text
    gc.collect()
    assert weights() is None, "the model is still held after close()"
    with pytest.raises(NmtError, match="this Translator is closed"):
        translator.translate(["the dog"])
    translator.close()  # twice: nothing
