"""Glossaries (issue 35): the file format and its errors, how source terms are found, and the constrained beam
search that puts every target term in the translation (inference/constrained.py), with the model's own scores."""

from __future__ import annotations

import itertools
import json
import random

import pytest
import torch

from nmtcli.errors import NmtError
from nmtcli.inference.beam import beam_search, lp
from nmtcli.inference.constrained import constrained_beam_search
from nmtcli.inference.glossary import glossary_of, read_glossary
from nmtcli.inference.translator import holds
from nmtcli.model.config import BOS_ID, EOS_ID, ModelConfig
from nmtcli.model.transformer import Transformer


def tiny_model(seed: int, vocab_size: int) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(ModelConfig(vocab_size=vocab_size, d_model=16, d_ff=32, heads=2, layers=2, dropout=0.0)).eval()
    with torch.no_grad():  # sharp distributions: a term is far from what the model would say unasked
        model.embedding.tokens.weight.mul_(4)
    return model


def batch(sentences: list[list[int]]) -> torch.Tensor:
    src = torch.zeros(len(sentences), max(map(len, sentences)) + 1, dtype=torch.long)
    for i, s in enumerate(sentences):
        src[i, : len(s) + 1] = torch.tensor([*s, EOS_ID])
    return src


def sequence_log_prob(model: Transformer, src: torch.Tensor, tokens: list[int]) -> float:
    with torch.no_grad():
        log_probs = torch.log_softmax(model(src, torch.tensor([[BOS_ID, *tokens]]))[0].float(), dim=-1)
    return sum(log_probs[t, y].item() for t, y in enumerate((*tokens, EOS_ID)))


# --- the file and the matching rules -----------------------------------------------------------------------

def test_a_glossary_file_reads_entries_alternatives_and_comments(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_text("# product names\nhouse\tHaus|Hauses\n\n  # indented comment\nNew York\tNew York\npipe\ta\\|b\n", encoding="utf-8")
    glossary = read_glossary(path)
    assert [(t.source, t.targets, t.origin) for t in glossary.terms] == [
        ("house", ("Haus", "Hauses"), f"{path}:2"), ("New York", ("New York",), f"{path}:5"), ("pipe", ("a|b",), f"{path}:6")]


@pytest.mark.parametrize("text, message", [
    ("house Haus\n", ":1: expected `source TAB target`, found 0 TABs"),
    ("# ok\nhouse\tHaus\tHäuser\n", ":2: expected `source TAB target`, found 2 TABs"),
    ("house\t\n", ":1: an empty target term"),
    ("house\tHaus|\n", ":1: an empty target term"),
    ("\tHaus\n", ":1: an empty source term"),
    ("house\tHaus\nhouse\tGebäude\n", ":2: 'house' is in the glossary already"),
    ("a\tb\nc\td\ne\tf\n", "has more than 2 entries"),
])
def test_a_bad_glossary_file_is_one_error_naming_its_line(tmp_path, text, message):
    path = tmp_path / "terms.tsv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(NmtError, match=message.replace("|", r"\|")) as e:
        read_glossary(path, max_terms=2)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)


def test_source_terms_are_whole_words_lowercase_any_case_longest_first():
    glossary = glossary_of({"cat": "Katze", "York": "York", "new york": "New York", "Apple": "Apple", "apple": "Apfel",
                            "C++": "C++", "e-mail": "E-Mail"})

    def found(text: str) -> list[str]:
        return [t.source for t in glossary.matches(text)]

    assert found("A category of cats") == []  # whole words only
    assert found("The CAT and the Cat") == ["cat"]  # lower case: any case; once per line
    assert found("Apple buys an apple") == ["Apple", "apple"]  # a capital: as written; the line's own case wins
    assert found("APPLE") == ["apple"]
    assert found("From New York to York") == ["new york", "York"]  # the longest at a position wins
    assert found("I write C++ and e-mail.") == ["C++", "e-mail"]
    assert found("") == []


def test_a_glossary_from_a_mapping_checks_its_values():
    assert glossary_of({"house": ["Haus", "Hauses"]}).terms[0].targets == ("Haus", "Hauses")
    with pytest.raises(NmtError, match=r"glossary\['house'\]: terms must be strings"):
        glossary_of({"house": 3})
    with pytest.raises(NmtError, match="must map source terms to target terms"):
        glossary_of(["house"])


# --- the search ---------------------------------------------------------------------------------------------

def test_without_terms_the_constrained_search_is_the_plain_search():
    model = tiny_model(3, vocab_size=30)
    src = batch([[5, 6, 7], [20, 21, 22, 23, 24], [9], [10, 11, 12, 13]])
    plain = beam_search(model, src, beam=4, nbest=3, max_len_b=8)
    constrained = constrained_beam_search(model, src, [[] for _ in range(4)], beam=4, nbest=3, max_len_b=8)
    assert [[(h.tokens, h.score, h.log_prob) for h in s] for s in plain] == [[(h.tokens, h.score, h.log_prob) for h in s] for s in constrained]


def test_a_wide_constrained_beam_finds_the_best_output_that_holds_the_term():
    # Words {unk, 4, 5, 6}, outputs of at most 3 tokens: 85 of them; a beam of 64 keeps every prefix, so the constrained
    # search must return the exhaustive best among the outputs that hold the term (and it is not the unconstrained best).
    words, max_len, alpha = (1, 4, 5, 6), 3, 0.6
    src = torch.tensor([[4, 5, 6, EOS_ID]])
    differs = 0
    outputs = [list(t) for n in range(max_len + 1) for t in itertools.product(words, repeat=n)]
    for seed in range(2):
        model = tiny_model(seed, vocab_size=7)
        scored = {tuple(t): sequence_log_prob(model, src, t) / lp(len(t) + 1, alpha) for t in outputs}
        for term in ([6, 6], [5], [4, 6]):
            best = max((t for t in scored if holds(t, term)), key=scored.get)
            hyp = constrained_beam_search(model, src, [[[term]]], beam=64, alpha=alpha, max_len_a=0.0, max_len_b=max_len)[0][0]
            assert hyp.tokens == list(best), (seed, term)
            assert hyp.score == pytest.approx(scored[best], abs=1e-4)
            differs += max(scored, key=scored.get) != best
    assert differs, "the terms never changed the best output: the test proves nothing"


def test_random_glossaries_are_held_by_every_hypothesis_with_the_models_own_scores():
    # A seeded fuzz test: random sentences, 0-3 terms each of 1-3 tokens with 1-2 alternatives, beams 1-5, n-best, and
    # prefixes now and then; room enough for the terms. Every hypothesis returned holds every term, and its
    # log-probability is the model's for its tokens (an n-best list holds only such hypotheses: maybe fewer than asked).
    rng = random.Random(35)
    model = tiny_model(7, vocab_size=40)
    checked = 0
    for _ in range(12):
        sentences = [[rng.randrange(4, 40) for _ in range(rng.randint(1, 8))] for _ in range(rng.randint(1, 6))]
        constraints = [[[[rng.randrange(4, 40) for _ in range(rng.randint(1, 3))] for _ in range(rng.randint(1, 2))]
                        for _ in range(rng.randint(0, 3))] for _ in sentences]
        prefixes = [[rng.randrange(4, 40)] if rng.random() < 0.3 else [] for _ in sentences]
        beam = rng.randint(1, 5)
        nbest = rng.randint(1, beam)
        src = batch(sentences)
        found = constrained_beam_search(model, src, constraints, beam=beam, nbest=nbest, max_len_a=0.0, max_len_b=12, prefixes=prefixes)
        for i, hyps in enumerate(found):
            assert 1 <= len(hyps) <= nbest
            for h in hyps:
                assert h.tokens[: len(prefixes[i])] == prefixes[i]
                assert all(any(holds(h.tokens, alt) for alt in alts) for alts in constraints[i]), (constraints[i], h.tokens)
                assert h.log_prob == pytest.approx(sequence_log_prob(model, src[i : i + 1, : len(sentences[i]) + 1], h.tokens), abs=1e-4)
                checked += 1
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert checked > 20


def test_terms_longer_than_the_length_limit_still_give_a_translation():
    model = tiny_model(1, vocab_size=30)
    src = batch([[5, 6, 7]])
    [hyps] = constrained_beam_search(model, src, [[[[10, 11, 12, 13]]]], beam=4, max_len_a=0.0, max_len_b=2)
    assert hyps and len(hyps[0].tokens) <= 2 and not holds(hyps[0].tokens, [10, 11, 12, 13])


# --- through the translator, the Python API, `nmt translate` and `nmt serve` ----------------------------------

LINES = ["the dog sees the old house", "a cat reads every book", "", "the new car follows the dog and the house",
         "every child likes the train", "The Dog and THE HOUSE"]
TERMS = {"dog": "katze", "old house": "altes haus|alten haus", "car": ["wagen", "auto"]}


def holds_terms(line: str, text: str, glossary) -> bool:
    return all(any(alt in text for alt in term.targets) for term in glossary.matches(line))


@pytest.fixture(scope="module")
def translator(random_model):
    from nmtcli import Translator

    return Translator.load(random_model, device="cpu")


def test_every_translation_holds_its_terms_and_lines_without_terms_are_untouched(translator):
    # An untrained model writes none of these words unasked; the terms come out anyway, in text, n-best, split
    # paragraphs and HTML, and the lines without terms are byte for byte what the plain search gives.
    glossary = glossary_of(TERMS)
    search = {"beam": 3, "max_len_a": 0.0, "max_len_b": 12}
    plain = translator.translate(LINES, nbest=2, **search)
    termed = translator.translate(LINES, nbest=2, glossary=TERMS, alignment="words", **search)
    for line, p, t in zip(LINES, plain, termed):
        if glossary.matches(line):
            assert all(holds_terms(line, h.text, glossary) for h in t.nbest), (line, t.nbest)
            assert t.alignment is not None and t.score <= p.score + 1e-4  # the model's own score: no better than its best
        else:
            assert [h.text for h in t.nbest] == [h.text for h in p.nbest]  # scores too, but for the batch's float rounding
            assert [h.score for h in t.nbest] == pytest.approx([h.score for h in p.nbest], abs=1e-4)
    assert not any(glossary.matches(line) and holds_terms(line, p.text, glossary) for line, p in zip(LINES, plain)), "the model says the terms unasked"
    [paragraph] = translator.translate([" ".join(LINES)], glossary=TERMS, split_sentences=True, **search)
    assert all(holds_terms(line, s.text, glossary) for line, s in zip([x for x in LINES if x], paragraph.sentences or []))
    html = translator.translate_html("<p>the dog sees <b>the old house</b></p>", glossary=TERMS, **search)
    assert "katze" in html and ("altes haus" in html or "alten haus" in html) and html.count("<b>") == 1
    [greedy] = translator.translate(["the dog"], beam=1, glossary=TERMS, max_len_b=12)
    assert "katze" in greedy.text


def test_a_term_that_does_not_fit_is_warned_about_and_the_line_kept(translator, caplog):
    with caplog.at_level("WARNING", logger="nmtcli"):
        [t] = translator.translate(["the dog"], glossary={"dog": "katze hund katze hund katze hund"}, max_len_a=0.0, max_len_b=3)
    assert t.text and "katze hund katze hund" not in t.text
    assert any("line 1: the glossary term 'dog'" in r.getMessage() and "length limit" in r.getMessage() for r in caplog.records)


def test_nmt_translate_takes_a_glossary_file_and_refuses_a_bad_one(random_model, nmt_main, tmp_path):
    terms = tmp_path / "terms.tsv"
    terms.write_text("# pets\ndog\tkatze\nold house\taltes haus|alten haus\n", encoding="utf-8")
    base = ("translate", "-m", str(random_model), "--device", "cpu", "--beam", "2", "--max-len-a", "0", "--max-len-b", "10")
    text = "the dog sees the old house\nnothing here\n"
    out = nmt_main(*base, "--glossary", str(terms), input=text).stdout.splitlines()
    records = [json.loads(r) for r in nmt_main(*base, "--glossary", str(terms), "--output-format", "json", "--split-sentences",
                                               input=text).stdout.splitlines()]
    assert len(out) == len(records) == 2
    assert "katze" in out[0] and "katze" in records[0]["translation"] and out[1] == nmt_main(*base, input="nothing here\n").stdout.strip()
    subtitles = tmp_path / "talk.srt"
    subtitles.write_text("1\n00:00:01,000 --> 00:00:02,500\nthe dog sees the old house.\n\n2\n00:00:03,000 --> 00:00:04,000\nNothing here.\n\n",
                         encoding="utf-8")
    nmt_main(*base, "--glossary", str(terms), "-i", str(subtitles), "-o", str(tmp_path / "talk.de.srt"))
    translated = (tmp_path / "talk.de.srt").read_text(encoding="utf-8")
    assert "00:00:01,000 --> 00:00:02,500" in translated and "katze" in translated.split("00:00:03,000")[0]  # documents too
    terms.write_text("dog katze\n", encoding="utf-8")
    bad = nmt_main(*base, "--glossary", str(terms), input=text, check=False)
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr == f"nmt: error: {terms}:1: expected `source TAB target`, found 0 TABs " \
        "(separate the two terms with one TAB character; alternatives of a target go between |)\n"
    other = nmt_main(*base, "--glossary", str(terms), "--engine", "ctranslate2", input=text, check=False)
    assert other.returncode == 2 and other.stderr.startswith("nmt: error: --glossary needs the native engine")
    served = nmt_main("serve", "--glossary", "en-de", "--port", "0", check=False)  # refused before a port or a model is taken
    assert served.returncode == 2 and served.stderr.startswith("nmt: error: --glossary 'en-de' is not SOURCE-TARGET=FILE")


def test_nmt_serve_applies_its_glossary_and_each_requests_own(random_model):
    from test_prefix import _post_all

    from nmtcli.inference.translator import SearchSettings, Translator
    from nmtcli.serve.app import ServeConfig, create_app
    from nmtcli.serve.models import ServedModel
    from nmtcli.serve.requests import Limits

    settings = SearchSettings(beam=2, max_len_a=0.0, max_len_b=10)
    config = ServeConfig(search=settings, limits=Limits(glossary=2), glossaries=(("en", "de", glossary_of({"dog": "katze"})),))
    app = create_app([ServedModel("tiny", "en", "de", Translator(random_model, settings=settings))], config)
    line = "the dog sees the old house"
    (s1, server), (s2, own), (s3, form), (s4, html), (s5, big), (s6, bad) = _post_all(app, "/translate", [
        {"q": line, "source": "en", "target": "de"},
        {"q": line, "source": "en", "target": "de", "glossary": {"dog": "hund katze", "old house": "altes haus"}},
        {"q": line, "source": "en", "target": "de", "glossary": json.dumps({"old house": "alten haus"})},
        {"q": f"<p>{line}</p>", "source": "en", "target": "de", "format": "html", "glossary": {"old house": "altes haus"}},
        {"q": line, "source": "en", "target": "de", "glossary": {"a": "b", "c": "d", "e": "f"}},
        {"q": line, "source": "en", "target": "de", "glossary": {"dog": ""}}])
    assert (s1, s2, s3, s4, s5, s6) == (200, 200, 200, 200, 413, 400)
    assert "katze" in server["translatedText"]
    assert "hund katze" in own["translatedText"] and "altes haus" in own["translatedText"]  # the request's term wins
    assert "katze" in form["translatedText"] and "alten haus" in form["translatedText"]
    assert "katze" in html["translatedText"] and "altes haus" in html["translatedText"]
    assert big["error"].startswith("Invalid request: the glossary (3 entries) exceeds the glossary limit (2)")
    assert bad["error"] == "Invalid request: glossary['dog']: an empty target term (give both terms, or delete the line)"
    app = create_app([ServedModel("tiny", "en", "de", Translator(random_model, settings=settings))], config)  # a new loop, a new app
    [(status, records)] = _post_all(app, "/nmt/translate", [{"lines": [line, "nothing"], "glossary": {"house": "haus"}, "nbest": 2}])
    assert status == 200 and records["settings"]["glossary_terms"] == 2
    assert all("katze" in h["translation"] and "haus" in h["translation"] for h in records["translations"][0]["nbest"])


def test_a_constrained_step_never_reads_a_value_back_to_the_host(monkeypatch):
    # As the plain step (tests/test_beam.py): tensor operations only, so a GPU runs it without waiting for the device.
    from test_beam import NoReads

    from nmtcli.inference.constrained import ConstrainedSearch

    model = tiny_model(2, vocab_size=30)
    constraints = [[[[11, 12]], [[13], [14, 15]]], [], [[[20, 21, 22]]]]
    with torch.inference_mode():
        search = ConstrainedSearch(model, batch([[5, 6, 7], [9], [10, 11, 12, 13]]), 4, 0.6, 1.0, 8, 2, "gnmt", 0, [[], [4], []],
                                   constraints)
        search.step()  # the first step decodes one row per sentence
        with NoReads(monkeypatch):
            for _ in range(3):
                search.step()


def test_random_glossaries_and_protected_spans_together_in_every_output_path(translator):
    """A seeded fuzz test through the API: random lines with protected spans among their words, a random glossary
    over those words (target terms: other words of the model's vocabulary, up to 3 alternatives); every term present
    and every span present as often as in the source, in text, n-best, split paragraphs and HTML. A word inside a span
    (`{{train}}`) is no term: the span comes out as it is."""
    from test_protect import PROTECTION, WORDS, random_text, spans_kept

    from nmtcli.documents.protect import Protected

    rng = random.Random(350)
    targets = "hund katze haus wagen buch zug lied kind alt neu rot".split()
    search = {"beam": 2, "max_len_a": 0.0, "max_len_b": 14}
    for _ in range(3):
        lines = [random_text(rng, rng.randint(1, 2)) for _ in range(10)]
        entries = {w: "|".join(rng.sample(targets, rng.randint(1, 3))) for w in rng.sample(WORDS, 3)}
        glossary = glossary_of(entries)
        plain = translator.translate(lines, glossary=entries, protect_regex=[r"ACME-\d+"], nbest=2, **search)
        split = translator.translate(lines, glossary=entries, protect_regex=[r"ACME-\d+"], split_sentences=True, **search)
        for line, t, s in zip(lines, plain, split):
            read = Protected.of(line, PROTECTION).text  # what the model reads: the spans taken out
            for out in (*(h.text for h in t.nbest), s.text):
                assert holds_terms(read, out, glossary) and spans_kept(line, out, PROTECTION), (line, entries, out)
        html = translator.translate_html(f"<p>{lines[0].replace('<', '&lt;')}</p>", glossary=entries, **search)
        assert holds_terms(Protected.of(lines[0], PROTECTION).text, html, glossary)
