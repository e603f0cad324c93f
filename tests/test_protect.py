"""Protected spans (issue 35, documents/protect.py): placeholders, URLs, e-mail addresses and `--protect REGEX` spans come
out byte for byte, exactly once each, placed by the word alignment, whatever the model writes; in the Python API, `nmt
translate` (text, --split-sentences, json, html) and `nmt serve`."""

from __future__ import annotations

import json
import random
import re

import pytest

from nmtcli.documents.protect import Protected, Protection, find_spans

WORDS = "the a small dog cat sees likes new old red book car train song every child follows this is".split()


def random_span(rng: random.Random) -> str:
    """One protected span of a random kind (the built-in kinds, and ACME-N for the user's regex ACME-\\d+)."""
    w, n = rng.choice(WORDS), rng.randrange(100)
    return rng.choice([f"{{{{{w}}}}}", f"{{{n}}}", f"{{{w}}}", "%s", "%d", f"%({w})s", f"${{{w}}}", f'<x id="{n}"/>', "</g>",
                       f"https://{w}.example.com/p?q={n}", f"www.{w}{n}.org", f"{w}.{n}@example.org", f"ACME-{n}"])


def random_text(rng: random.Random, sentences: int = 1) -> str:
    """Random words with random spans among them: between words, glued to punctuation, at either end."""
    parts = []
    for _ in range(sentences):
        words = [rng.choice(WORDS) for _ in range(rng.randint(0, 7))]
        for _ in range(rng.randint(0, 3)):
            span = random_span(rng)
            words.insert(rng.randint(0, len(words)), rng.choice([span, span, f"({span})", f"{span},", f'"{span}"']))
        parts.append(" ".join(words).capitalize() + rng.choice([".", "!", "", "?"]))
    return rng.choice(["", " "]) + " ".join(parts)


def spans_kept(source: str, output: str, protection: Protection) -> bool:
    """Every protected span of the source is in the output as often as in the source (exactly once where it is once)."""
    spans = {source[a:b] for a, b in find_spans(source, protection)}
    return all(output.count(span) == source.count(span) for span in spans)


PROTECTION = Protection.of(True, [r"ACME-\d+"])


@pytest.mark.parametrize("text, spans", [
    ("Hello {{name}}, you have {0} new {count} messages", ["{{name}}", "{0}", "{count}"]),
    ("Deleted %s files, %(n)d kept in ${dir} at %1$s", ["%s", "%(n)d", "${dir}", "%1$s"]),
    ('Press <x id="1"/>OK</g> now', ['<x id="1"/>', "</g>"]),
    ("See https://example.com/a?b=1&c=2. Or (www.example.org), or mail ann.lee+nmt@mail.example.co.uk.",
     ["https://example.com/a?b=1&c=2", "www.example.org", "ann.lee+nmt@mail.example.co.uk"]),
    ("50% off, 100 % sure, {not a placeholder}, a@b", []),
    ("Eine 100%ige Lösung, 50%iger Rabatt und %i Stück", ["%i"]),  # German: a % after a digit is a percent sign
])
def test_each_built_in_kind_is_found_and_ordinary_text_is_not(text, spans):
    assert [text[a:b] for a, b in find_spans(text, Protection.of())] == spans


def test_the_longest_match_at_the_leftmost_start_wins_and_a_users_regex_adds_spans():
    text = "Go to https://x.org/{id} or ask ACME-42 about ${{x}}"
    assert [text[a:b] for a, b in find_spans(text, PROTECTION)] == ["https://x.org/{id}", "ACME-42", "{{x}}"]
    assert find_spans(text, Protection.of(False, [])) == [] and Protection.of(False) is None
    assert [text[a:b] for a, b in find_spans(text, Protection.of(False, [r"ACME-\d+"]))] == ["ACME-42"]


def test_a_span_is_cut_out_of_the_model_s_own_words_only_where_it_is_not_part_of_a_longer_word():
    # `--protect Excel`: the model's "Excellent" stays a word; an "Excel" it writes itself is cut, the span put back once.
    protected = Protected.of("Open Excel, it is excellent", Protection.of(False, ["Excel"]))
    assert protected.restore_text("Öffne es, es ist Excellent", None).split().count("Excellent") == 1
    restored = protected.restore_text("Öffne Excel, es ist Excellent", None)
    assert restored.count("Excel") == 2 and "Excellent" in restored  # the span once, and the model's word whole
    percent = Protected.of("Use %s here", Protection.of())
    assert "100%ige" in percent.restore_text("Nutze hier 100%ige", None)


def test_a_span_between_words_goes_after_the_translation_of_the_word_before_it():
    p = Protected.of("Hello {name}, welcome to https://x.org today", Protection.of())
    assert p.text == "Hello , welcome to today" and p.needs_alignment
    # "Hallo , heute willkommen bei": Hello-Hallo ,-, welcome-willkommen to-bei today-heute
    out = p.restore_text("Hallo , heute willkommen bei", "0-0 1-1 2-3 3-4 4-2")
    assert out == "Hallo {name}, heute willkommen bei https://x.org"
    # spans before the first word and after the last stay at the ends, with the source's whitespace
    edges = Protected.of("  {0} files were deleted: %s  ", Protection.of())
    assert edges.text == "files were deleted:" and not edges.needs_alignment
    assert edges.restore_text("Dateien wurden gelöscht:", None) == "{0} Dateien wurden gelöscht: %s"
    only = Protected.of(" https://x.org ", Protection.of())
    assert only.text == "" and only.restore([], False)[0].text == "https://x.org"


def test_every_protected_span_comes_back_exactly_once_whatever_the_model_writes():
    """Seeded fuzz without a model: the "model" writes its words shuffled, dropped, repeated, and the spans' texts
    (whole, and in pieces glued to its words), with random alignments; every span is in the output as often as in the
    source, byte for byte."""
    rng = random.Random(35)
    for _ in range(600):
        source = random_text(rng, rng.randint(1, 2))
        p = Protected.of(source, PROTECTION)
        words = p.text.split()
        spans = [source[a:b] for a, b in find_spans(source, PROTECTION)]
        target = [rng.choice(words) for _ in range(rng.randint(0, len(words) + 2))] if words else []
        for _ in range(rng.randint(0, 3)):
            if spans:
                junk = rng.choice(spans)
                junk = junk if rng.random() < 0.6 else junk[: rng.randint(1, len(junk))]
                at = rng.randint(0, len(target))
                if target and rng.random() < 0.5:
                    target[min(at, len(target) - 1)] += junk
                else:
                    target.insert(at, junk)
        alignment = " ".join(f"{rng.randrange(len(words))}-{j}" for j in range(len(target))) if words else ""
        out = p.restore_text(" ".join(target), alignment if rng.random() < 0.9 else None)
        assert spans_kept(source, out, PROTECTION), (source, " ".join(target), out)


@pytest.fixture(scope="module")
def translator(random_model):
    from nmtcli import Translator

    return Translator.load(random_model, device="cpu")


def test_a_real_model_keeps_every_span_in_text_split_sentences_json_and_html(translator):
    """The same guarantee through the Python API's paths, over seeded random lines translated by an untrained model."""
    rng = random.Random(7)
    lines = [random_text(rng, rng.randint(1, 3)) for _ in range(24)]
    search = {"beam": 2, "max_len_a": 0.0, "max_len_b": 6}
    plain = translator.translate(lines, protect_regex=[r"ACME-\d+"], alignment="words", nbest=2, **search)
    split = translator.translate(lines, protect_regex=[r"ACME-\d+"], split_sentences=True, **search)
    for line, t, s in zip(lines, plain, split):
        assert spans_kept(line, t.text, PROTECTION) and spans_kept(line, s.text, PROTECTION), (line, t.text, s.text)
        assert all(spans_kept(line, h.text, PROTECTION) for h in t.nbest)
    document = "<p>" + "</p>\n<p>".join(line.replace("<", "&lt;").replace(">", "&gt;") for line in lines) + "</p>"
    html = translator.translate_html(document, protect_regex=[r"ACME-\d+"], **search)
    text = re.sub(r"&lt;|&gt;", lambda m: {"&lt;": "<", "&gt;": ">"}[m.group()], html)
    for line in lines:
        for a, b in find_spans(line, PROTECTION):
            assert text.count(line[a:b]) >= 1
    assert all(text.count(span) == document.replace("&lt;", "<").replace("&gt;", ">").count(span)
               for line in lines for span in {line[a:b] for a, b in find_spans(line, PROTECTION)})
    # off: the model reads the spans (an untrained model does not write a URL back)
    [off] = translator.translate(["see https://example.com/abc now"], protect=False, **search)
    assert "https://example.com/abc" not in off.text


def test_nmt_translate_keeps_spans_and_refuses_a_bad_regex(random_model, nmt_main):
    lines = "Call ACME-7 at {0} or https://example.com/x now.\nThe dog sees {{name}}. A cat %s.\n"
    base = ("translate", "-m", str(random_model), "--device", "cpu", "--beam", "2", "--max-len-a", "0", "--max-len-b", "5")
    out = nmt_main(*base, "--protect", r"ACME-\d+", input=lines)
    records = nmt_main(*base, "--protect", r"ACME-\d+", "--split-sentences", "--output-format", "json", input=lines)
    for line, text, record in zip(lines.splitlines(), out.stdout.splitlines(), records.stdout.splitlines()):
        assert spans_kept(line, text, PROTECTION) and spans_kept(line, json.loads(record)["translation"], PROTECTION)
    assert "ACME-7" not in nmt_main(*base, "--no-protect", input="Call ACME-7 at {0}\n").stdout
    bad = nmt_main(*base, "--protect", "(unclosed", input="x\n", check=False)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines() == [bad.stderr.strip()] and bad.stderr.startswith("nmt: error: --protect '(unclosed' is not a valid")
    served = nmt_main("serve", "--protect", "[", "--port", "0", check=False)  # refused before a port or a model is taken
    assert served.returncode == 2 and served.stderr.startswith("nmt: error: --protect '[' is not a valid") and len(served.stderr.splitlines()) == 1


def test_nmt_serve_keeps_spans_unless_a_request_says_protect_false(random_model):
    from test_prefix import _post_all

    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator
    from nmtcli.serve.app import ServeConfig, create_app
    from nmtcli.serve.models import ServedModel

    settings = SearchSettings(beam=2, max_len_a=0.0, max_len_b=5)
    config = ServeConfig(search=settings, protect_regex=(r"ACME-\d+",))
    app = create_app([ServedModel("tiny", "en", "de", Translator(random_model, settings=settings))], config)
    line = "Ask ACME-3 about {name} at a.b@example.org. The dog sees https://example.com/x now."
    (s1, libre), (s2, nmt), (s3, html), (s4, off), (s5, bad) = _post_all(app, "/translate", [
        {"q": line, "source": "en", "target": "de"},
        {"q": line, "source": "en", "target": "de", "format": "html"},
        {"q": f"<p>{line}</p>", "source": "en", "target": "de", "format": "html"},
        {"q": "see https://example.com/abc now", "source": "en", "target": "de", "protect": False},
        {"q": line, "source": "en", "target": "de", "protect": "maybe"}])
    assert (s1, s2, s3, s4, s5) == (200, 200, 200, 200, 400)
    for answer in (libre, nmt, html):
        assert spans_kept(line, answer["translatedText"], PROTECTION), answer
    assert "https://example.com/abc" not in off["translatedText"]
    assert bad["error"] == "Invalid request: protect must be true or false"
    app = create_app([ServedModel("tiny", "en", "de", Translator(random_model, settings=settings))], config)  # a new loop, a new app
    [(status, records)] = _post_all(app, "/nmt/translate", [{"lines": [line], "split_sentences": True}])
    assert status == 200 and spans_kept(line, records["translations"][0]["translation"], PROTECTION)


def test_the_ctranslate2_engine_keeps_spans_placed_by_position(random_model, nmt_main, tmp_path):
    """CTranslate2 gives no alignment: the spans between words are placed by position, still each exactly once."""
    pytest.importorskip("ctranslate2")
    nmt_main("export", "ctranslate2", str(random_model), str(tmp_path / "ct2"))
    rng = random.Random(11)
    lines = [random_text(rng, rng.randint(1, 2)) for _ in range(8)]
    base = ("translate", "-m", str(tmp_path / "ct2"), "--engine", "ctranslate2", "--length-penalty", "power", "--max-len-a", "0", "--max-len-b", "5")
    for flags in ((), ("--split-sentences",)):
        out = nmt_main(*base, *flags, input="\n".join(lines) + "\n", cwd=tmp_path).stdout.splitlines()
        assert len(out) == len(lines)
        for line, text in zip(lines, out):
            assert spans_kept(line, text, Protection.of()), (line, text)
