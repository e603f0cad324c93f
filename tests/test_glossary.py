"""Glossaries (issues 35, 49): the file format and its errors, how source terms are found in any script, and how each
occurrence's target term is put into the translation where the model translated it (inference/terms.py): whole, once,
in place of the covered word's translation, the rest of the sentence the model's, scored by the model."""

from __future__ import annotations

import json
import random

import pytest
import torch

from nmtcli.errors import NmtError
from nmtcli.inference.glossary import glossary_of, read_glossary


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


def test_a_glossary_file_saved_with_a_byte_order_mark_keeps_its_first_entry(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_bytes(b"\xef\xbb\xbfdog\tHund\ncat\tKatze\n")  # as Windows editors save UTF-8
    assert [t.source for t in read_glossary(path).terms] == ["dog", "cat"]
    assert [o.term.source for o in read_glossary(path).occurrences("the dog and the cat")] == ["dog", "cat"]


def test_terms_are_found_in_scripts_without_spaces_with_particles_and_under_unicode_case_folding():
    glossary = glossary_of({"北京": "Beijing", "東京": "Tokyo", "กรุงเทพ": "Bangkok", "서울": "Seoul", "istanbul": "Istanbul",
                            "straße": "street", "İzmir": "Izmir", "cat": "Katze"})

    def found(text: str) -> list[str]:
        return [text[o.start:o.end] for o in glossary.occurrences(text)]

    assert found("我爱北京天安门") == ["北京"]  # Chinese: no spaces between words
    assert found("東京へ行きます") == ["東京"]  # Japanese
    assert found("ฉันไปกรุงเทพเมื่อวาน") == ["กรุงเทพ"]  # Thai
    assert found("서울에서 만나요") == ["서울"]  # Korean: a particle glued to the noun
    assert found("İSTANBUL, Istanbul and istanbul") == ["İSTANBUL", "Istanbul", "istanbul"]  # Turkish dotted capital I
    assert found("STRASSE und Straße") == ["STRASSE", "Straße"]  # ß folds to ss
    assert found("izmir") == [] and found("İzmir") == ["İzmir"]  # a term with a capital: only as written
    assert found("category cats 猫cat") == ["cat"]  # still whole words in spaced scripts, but next to Han
    latin = glossary_of({"python": "X", "api": "Z", "google": "Y", "cafe": "K", "house": "H", "ab": "AB", "a s": "AS"})
    assert [[t[o.start:o.end] for o in latin.occurrences(t)] for t in ("使用Python开发", "Pythonで開発する", "Google에서 검색")] == [
        ["Python"], ["Python"], ["Google"]]  # a Latin term against Han, kana, or a Korean particle
    for text in ("cafe\u0301", "house\u00adboat", "house\u200dboat", "\u0227b", "a \u00df"):
        assert latin.occurrences(text) == [], text  # an accent written apart, a soft hyphen, a joiner belong to the word


def test_a_glossary_file_is_cut_into_lines_at_line_ends_only_and_terms_are_one_line_of_printable_text(tmp_path):
    path = tmp_path / "terms.tsv"
    path.write_bytes("house\tHaus\u2028boot\ncity\tKommune\n".encode())  # U+2028 inside a term: no line break of the file
    with pytest.raises(NmtError, match=r"terms.tsv:1: a term holds the character U\+2028"):
        read_glossary(path)
    path.write_bytes(b"\xef\xbb\xbfhouse\tHaus\n\xef\xbb\xbfcity\tKommune\r\n")  # two files joined: a mark mid-file
    assert [t.source for t in read_glossary(path).terms] == ["house", "city"]
    for bad in ("Haus\nboot", "Haus\tboot", "Haus\x00", "\udc00"):
        with pytest.raises(NmtError, match="a term holds the character"):
            glossary_of({"house": bad})


def test_every_occurrence_is_found_with_its_offsets():
    glossary = glossary_of({"city": "Kommune", "new york": "New York", "york": "York"})
    text = "City, city and New York (york)"
    assert [(o.start, o.end, o.term.source) for o in glossary.occurrences(text)] == [
        (0, 4, "city"), (6, 10, "city"), (15, 23, "new york"), (25, 29, "york")]
    assert [t.source for t in glossary.matches(text)] == ["city", "new york", "york"]


# --- putting terms in: the pieces of inference/terms.py --------------------------------------------------------


def test_units_are_words_but_pieces_in_scripts_without_spaces():
    from nmtcli.inference.terms import unit_spans, units_of

    text = "Das (Haus) ist groß."
    spans = [(0, 0), (0, 3), (3, 4), (4, 5), (5, 9), (9, 10), (10, 11), (11, 14), (14, 15), (15, 19), (19, 20)]
    units = units_of(text, spans)
    assert units == [0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 3]  # a space piece belongs to the word after it
    assert [text[a:b] for a, b in unit_spans(spans, units, text)] == ["Das", "(Haus)", "ist", "groß."]
    chinese = "我爱北京"
    assert units_of(chinese, [(0, 1), (1, 2), (2, 4)]) == [0, 1, 2]  # each piece its own unit


def test_each_target_word_gets_the_source_word_its_attention_picks_out_over_its_pieces():
    from nmtcli.inference.terms import word_links

    # target words A (pieces 0, 1) and B (piece 2); source words x (pieces 0, 1) and y (piece 2). B attends to x's pieces
    # 0.4 in all, to y 0.6; A to x 0.8. Each source word's column divided by what it draws: A -> x, B -> y.
    attention = torch.tensor([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2], [0.3, 0.1, 0.6]])
    links, matrix = word_links(attention, [0, 0, 1], [0, 0, 1])
    assert links == [0, 1]
    assert matrix.sum(0).tolist() == pytest.approx([1.0, 1.0])


def test_terms_replace_their_words_keep_punctuation_and_insert_where_the_neighbours_meet():
    from nmtcli.inference.glossary import Occurrence, Term
    from nmtcli.inference.terms import placements, rewrite, unit_spans, units_of

    source = "the house city river"
    source_spans = [(0, 3), (4, 9), (10, 14), (15, 20)]
    term = {w: Term(w, (t,), w) for w, t in (("house", "Hausboot"), ("city", "Kommune"), ("river", "Strom"))}
    occurrences = [Occurrence(4, 9, term["house"]), Occurrence(10, 14, term["city"]), Occurrence(15, 20, term["river"])]
    # the model wrote "Fluss, der (Haus)": river -> word 0, the -> 1, house -> 2; it left "city" out
    target = "Fluss, der (Haus)"
    spans = [(0, 6), (7, 10), (11, 17)]
    units = units_of(target, spans)
    links = [3, 0, 1]
    matrix = torch.eye(4)[links]
    chosen = placements(occurrences, source_spans, units_of(source, source_spans), links, matrix)
    # city has no word: between its neighbours' translations (house -> 2, river -> 0 in reversed order), after the earlier
    assert [(p.lo, p.hi, p.occurrence.term.source) for p in chosen] == [(0, 1, "river"), (1, 1, "city"), (2, 3, "house")]
    assert rewrite(target, unit_spans(spans, units, target), chosen) == "Strom, Kommune der (Hausboot)"


def test_terms_put_into_an_empty_translation_are_apart_and_mixed_case_terms_keep_their_case():
    from nmtcli.inference.glossary import Occurrence, Term
    from nmtcli.inference.terms import Placement, rewrite

    house, city = Term("house", ("Hausboot",), "house"), Term("city", ("Kommune",), "city")
    both = [Placement(0, 0, Occurrence(0, 5, house)), Placement(0, 0, Occurrence(6, 10, city))]
    assert rewrite("", [], both, "HOUSE CITY") == "Hausboot Kommune"
    ebay = Term("house", ("eBay",), "house")
    assert rewrite("Haus ist da", [(0, 4), (5, 8), (9, 11)], [Placement(0, 1, Occurrence(0, 5, ebay))], "House is there") == "eBay ist da"
    datei = Term("file", ("datei",), "file")
    assert rewrite("File ok", [(0, 4), (5, 7)], [Placement(0, 1, Occurrence(0, 4, datei))], "File ok") == "Datei ok"


def test_an_alternative_is_chosen_by_the_ending_of_the_words_it_replaces():
    from nmtcli.inference.terms import choose

    assert choose(("Haus", "Hauses", "Häuser"), "Gebäudes") == "Hauses"
    assert choose(("Haus", "Hauses", "Häusern"), "Gebäuden") == "Häusern"
    assert choose(("Haus", "Hauses"), "Gebäude") == "Haus"  # a tie: the first


def test_a_term_already_in_the_translation_is_not_put_in_twice():
    from nmtcli.inference.glossary import Occurrence, Term
    from nmtcli.inference.terms import Placement, unneeded

    page, sample = Term("page", ("Seite",), "page"), Term("sample", ("Beispielseite",), "sample")
    units = [(0, 7), (8, 18)]  # "Derzeit Unterseite"
    text = "Derzeit Unterseite"
    # page's alignment points at "Derzeit", but the model wrote the term (as a compound's head) elsewhere
    assert unneeded(text, units, [Placement(0, 1, Occurrence(0, 4, page))]) == {0}
    # ... unless that word is replaced by another term: then page is put in (here the other term holds it again)
    chosen = [Placement(0, 1, Occurrence(0, 4, page)), Placement(1, 2, Occurrence(5, 11, sample))]
    assert unneeded(text, units, chosen) == {0}
    other = [Placement(0, 1, Occurrence(0, 4, page)), Placement(1, 2, Occurrence(5, 11, Term("sample", ("Muster",), "sample")))]
    assert unneeded(text, units, other) == set()


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


def test_a_term_is_put_in_whatever_the_search_s_length_limit(translator):
    # The search stops at max_len_b; the term is text put into its translation, not tokens the search must reach.
    [t] = translator.translate(["the dog"], glossary={"dog": "katze hund katze hund katze hund"}, max_len_a=0.0, max_len_b=3)
    assert "katze hund katze hund katze hund" in t.text


# --- what a trained model's translation looks like with terms (tests/corpus.py's rule task) ------------------------

SWAPPED = {"dog": "koeter", "house": "heim", "car": "auto"}  # DOMAIN_WORDS' targets: letters the vocabulary knows
USUAL = {"dog": "hund", "house": "haus", "car": "wagen"}


@pytest.fixture(scope="module")
def trained(trained_model):
    from nmtcli import Translator

    return Translator.load(trained_model, device="cpu")


@pytest.fixture(scope="module")
def termed_lines(corpus) -> list[str]:
    lines = (corpus["test"].parent / "test.en").read_text(encoding="utf-8").splitlines()
    return [line for line in lines if set(line.split()) & set(SWAPPED)][:40]


@pytest.mark.parametrize("beam", [1, 4])
def test_terms_the_model_never_writes_take_the_place_of_the_words_they_cover(trained, termed_lines, beam):
    # Issue 49: each occurrence's term present as a whole word, where the covered word's translation was, which is gone;
    # every other word as the plain search wrote it.
    plain = trained.translate(termed_lines, beam=beam)
    termed = trained.translate(termed_lines, beam=beam, glossary=SWAPPED)
    exact = 0
    for line, p, t in zip(termed_lines, plain, termed):
        words = t.text.split()
        for source, target in SWAPPED.items():
            assert words.count(target) == line.split().count(source), (line, p.text, t.text)
            if p.text.split().count(USUAL[source]) == line.split().count(source):  # the model translated each as usual
                assert USUAL[source] not in words, (line, p.text, t.text)
        swapped = [{v: SWAPPED[k] for k, v in USUAL.items()}.get(w, w) for w in p.text.split()]
        exact += words == swapped
    assert exact >= 0.9 * len(termed_lines), exact
    assert len(termed_lines) >= 30


def test_terms_the_model_writes_itself_leave_the_translation_as_it_is(trained, termed_lines):
    # The model's own words as terms: nothing to change, wherever the word sits among punctuation and capitals
    # (before, a term counted as present only when its tokens matched the term encoded alone, and `(hund` was forced again).
    lines = [f"({line})" if i % 3 == 0 else line.capitalize() if i % 3 == 1 else f"{line}." for i, line in enumerate(termed_lines)]
    plain = [t.text for t in trained.translate(lines)]
    same = 0
    for line, p, t in zip(lines, plain, trained.translate(lines, glossary=USUAL)):
        words = [w.strip("().") for w in line.lower().split()]
        if all(p.count(target) >= words.count(source) for source, target in USUAL.items()):
            assert t.text == p, (line, p, t.text)
            same += 1
        else:  # the model left a word out (it reads capitals worse): the term is put in
            assert all(t.text.count(target) >= words.count(source) for source, target in USUAL.items()), (line, p, t.text)
    assert same >= 0.6 * len(lines), same


def test_a_glossary_keeps_scores_the_model_s_own_and_alignments_of_the_words_written(trained, termed_lines):
    termed = trained.translate(termed_lines[:5], glossary=SWAPPED, alignment="words", nbest=2)
    scored = trained.score(termed_lines[:5], [t.text for t in termed])
    for t, s in zip(termed, scored):
        assert t.score == pytest.approx(s.score, abs=1e-3) and t.log_prob == pytest.approx(s.log_prob, abs=1e-3)
        assert t.alignment and max(int(link.split("-")[1]) for link in t.alignment.split()) == len(t.text.split()) - 1
        assert len({h.text for h in t.nbest}) == len(t.nbest)  # no repeats after the terms are put in
        assert [h.score for h in t.nbest] == sorted((h.score for h in t.nbest), reverse=True)


def test_a_prefix_that_ends_inside_a_word_keeps_that_word(trained):
    [t] = trained.translate(["the dog sees a red ball"], prefix="der hu", glossary=SWAPPED)
    assert t.text.startswith("der hu") and "koeter" in t.text.split()


def test_nmt_serve_answers_json_nested_too_deep_with_a_400():
    import asyncio

    from nmtcli.serve.requests import ApiError, parse_fields

    body = b'{"q": "the dog", "glossary": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(ApiError) as e:
        asyncio.run(parse_fields(body, "application/json", {}, 1 << 20))
    assert e.value.status == 400 and "nested too deep" in str(e.value)


def test_glossaries_of_every_request_leave_nothing_behind_in_the_engine(trained):
    # A server translates with each request's glossary: nothing of them may stay in the engine (it grew forever before).
    import sys

    engine = trained.engine

    def sizes() -> dict[str, int]:
        return {k: sys.getsizeof(v) for k, v in vars(engine).items() if isinstance(v, (dict, list, set))}

    trained.translate(["the dog sees a house"], glossary={"dog": "koeter"})
    before = sizes()
    for n in range(200):
        trained.translate(["the dog sees a house"], glossary={"dog": f"koeter{n}", "house": f"heim{n}"})
    assert sizes() == before


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

    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator
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


def test_the_api_s_glossary_of_a_wrong_type_is_a_type_error(translator):
    # docs/python-api.md: a wrong type is a TypeError (a mistake in the program); a bad term an NmtError (bad input).
    with pytest.raises(TypeError, match="glossary must be a mapping"):
        translator.translate(["the dog"], glossary=["dog"])
    with pytest.raises(TypeError, match=r"glossary\['dog'\]: terms must be str"):
        translator.translate(["the dog"], glossary={"dog": 3})
    with pytest.raises(NmtError, match="an empty target term"):
        translator.translate(["the dog"], glossary={"dog": ""})
