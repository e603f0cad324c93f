"""Sentence splitting (nmtcli/documents/sentences.py): real spans of real text, and the join that puts
translations back with the text's own whitespace."""

from __future__ import annotations

import json
import random

import pytest

from nmtcli.documents.sentences import join_sentences, segmenter_language, sentence_spans, sentences


# Golden Rules of the Pragmatic Segmenter (MIT, Kevin S. Dias; studies/data/sentence_gold_*.json has them all,
# and studies/sentence_split.py the ones sentencex misses: inline lists "1. ... 2. ...", a 4-dot ellipsis).
GOLDEN_RULES = [
    ("en", "Hello World. My name is Jonas.", ["Hello World.", "My name is Jonas."]),
    ("en", "What is your name? My name is Jonas.", ["What is your name?", "My name is Jonas."]),
    ("en", "My name is Jonas E. Smith.", ["My name is Jonas E. Smith."]),
    ("en", "Please turn to p. 55.", ["Please turn to p. 55."]),
    ("en", "Let's ask Jane and co. They should know.", ["Let's ask Jane and co.", "They should know."]),
    ("en", "I visited the U.S.A. last year.", ["I visited the U.S.A. last year."]),
    ("en", "I live in the U.S. How about you?", ["I live in the U.S.", "How about you?"]),
    ("en", "She has $100.00. It is in her bag.", ["She has $100.00.", "It is in her bag."]),
    ("en", "Her email is Jane.Doe@example.com. I sent her an email.", ["Her email is Jane.Doe@example.com.", "I sent her an email."]),
    ("en", "The site is: https://www.example.50.com/new-site/awesome_content.html. Please check it out.",
     ["The site is: https://www.example.50.com/new-site/awesome_content.html.", "Please check it out."]),
    ("en", 'She turned to him, "This is great." she said.', ['She turned to him, "This is great." she said.']),
    ("en", 'She turned to him, "This is great." She held the book out to show him.',
     ['She turned to him, "This is great."', "She held the book out to show him."]),
    ("en", "Hello!? Is that you?", ["Hello!?", "Is that you?"]),
    ("en", "I never meant that.... She left the store.", ["I never meant that....", "She left the store."]),
    ("en", "I wasn’t really ... well, what I mean...see . . . what I'm saying, the thing is . . . I didn’t mean it.",
     ["I wasn’t really ... well, what I mean...see . . . what I'm saying, the thing is . . . I didn’t mean it."]),
    ("en", "Hello world.Today is Tuesday.Mr. Smith went to the store and bought 1,000.That is a lot.",
     ["Hello world.", "Today is Tuesday.", "Mr. Smith went to the store and bought 1,000.", "That is a lot."]),
    ("de", "„Ich habe heute keine Zeit“, sagte die Frau und flüsterte leise: „Und auch keine Lust.“ Wir haben 1.000.000 Euro.",
     ["„Ich habe heute keine Zeit“, sagte die Frau und flüsterte leise: „Und auch keine Lust.“", "Wir haben 1.000.000 Euro."]),
    ("de", "Es gibt jedoch einige Vorsichtsmaßnahmen, die Du ergreifen kannst, z. B. ist es sehr empfehlenswert, dass Du Dein "
           "Zuhause von allem Junkfood befreist.",
     ["Es gibt jedoch einige Vorsichtsmaßnahmen, die Du ergreifen kannst, z. B. ist es sehr empfehlenswert, dass Du Dein "
      "Zuhause von allem Junkfood befreist."]),
    ("de", "Was sind die Konsequenzen der Abstimmung vom 12. Juni?", ["Was sind die Konsequenzen der Abstimmung vom 12. Juni?"]),
    ("de", "Bitte überweisen Sie 5.300,25 Euro. Wir trafen Dr. med. Meyer in der Stadt.",
     ["Bitte überweisen Sie 5.300,25 Euro.", "Wir trafen Dr. med. Meyer in der Stadt."]),
    ("de", "Ich kann u.a. Spanisch sprechen. Frau Prof. Schulze ist z. Z. nicht da.",
     ["Ich kann u.a. Spanisch sprechen.", "Frau Prof. Schulze ist z. Z. nicht da."]),
    ("de", "Z. T. ist die Lieferung unvollständig. Das finden Sie auf S. 225.",
     ["Z. T. ist die Lieferung unvollständig.", "Das finden Sie auf S. 225."]),
    ("de", "Dies ist meine Adresse: Dr. Meier, Berliner Str. 5, 21234 Bremen.", ["Dies ist meine Adresse: Dr. Meier, Berliner Str. 5, 21234 Bremen."]),
    ("de", "Er sagte: „Hallo, wie geht´s Ihnen, Frau Prof. Müller?“ Sie besucht eine kath. Schule.",
     ["Er sagte: „Hallo, wie geht´s Ihnen, Frau Prof. Müller?“", "Sie besucht eine kath. Schule."]),
    ("de", "Wir brauchen Getränke, z. B. Wasser, Saft, Bier usw.", ["Wir brauchen Getränke, z. B. Wasser, Saft, Bier usw."]),
    # list markers, which sentencex cuts off on their own, stay with their item (documents/sentences.LIST_MARKER)
    ("de", "1. Dies ist eine Punkteliste.", ["1. Dies ist eine Punkteliste."]),
    ("en", "1. The first item. 2. The second item.", ["1. The first item.", "2. The second item."]),
    ("en", "1.) The first item. b) The second item. iv. The fourth.", ["1.) The first item.", "b) The second item.", "iv. The fourth."]),
    ("en", "Q. What is his name? A. His name is Alfred E. Sloan.", ["Q. What is his name?", "A. His name is Alfred E. Sloan."]),
]


@pytest.mark.parametrize("language, text, expected", GOLDEN_RULES, ids=[f"{c}-{t[:30]}" for c, t, _ in GOLDEN_RULES])
def test_golden_rules_of_the_pragmatic_segmenter(language, text, expected):
    spans, at = [], 0
    for sentence in expected:
        start = text.index(sentence, at)
        spans.append((start, start + len(sentence)))
        at = start + len(sentence)
    assert sentence_spans(text, language) == spans


def test_abbreviations_numbers_and_times_do_not_split_the_issue_example():
    text = "Dr. Smith arrived at 3 p.m. on Jan. 5. He left at noon."
    assert sentence_spans(text, "en") == [(0, 38), (39, 55)]
    assert sentences(text, "en") == ["Dr. Smith arrived at 3 p.m. on Jan. 5.", "He left at noon."]


def test_spans_are_trimmed_and_whitespace_between_them_is_kept_verbatim():
    text = "  One sentence.   Two sentences?\t Three!  "
    spans = sentence_spans(text, "en")
    assert spans == [(2, 15), (18, 32), (34, 40)]
    assert join_sentences(text, spans, ["A", "B", "C"]) == "  A   B\t C  "


def test_every_line_break_ends_a_sentence_and_survives_the_join():
    text = "First line without a stop\r\nsecond line.\n\nThird\u2028fourth.\rFifth"
    assert sentences(text, "en") == ["First line without a stop", "second line.", "Third", "fourth.", "Fifth"]
    spans = sentence_spans(text, "en")
    assert join_sentences(text, spans, ["1", "2", "3", "4", "5"]) == "1\r\n2\n\n3\u20284\r5"


def test_german_abbreviations_do_not_split():
    text = "Herr Dr. Müller kam z. B. mit Prof. Schmidt usw. zur Sitzung. Dann gingen sie."
    assert sentences(text, "de") == ["Herr Dr. Müller kam z. B. mit Prof. Schmidt usw. zur Sitzung.", "Dann gingen sie."]


def test_language_codes_use_their_primary_subtag_and_unknown_ones_english_rules():
    assert segmenter_language("pt-BR") == segmenter_language("pt_br") == "pt"
    assert segmenter_language("") == "en"
    text = "Mr. Smith met Mrs. Jones. They talked."
    assert sentences(text, "xx") == sentences(text, "en") == ["Mr. Smith met Mrs. Jones.", "They talked."]


def test_text_without_sentences_has_no_spans():
    assert sentence_spans("", "en") == []
    assert sentence_spans(" \n\t\r\n ", "en") == []
    assert join_sentences(" \n\t\r\n ", [], []) == " \n\t\r\n "


def test_join_with_a_wrong_number_of_translations_is_a_bug():
    with pytest.raises(ValueError, match="1 translations for 2 sentences"):
        join_sentences("It rains. It pours.", sentence_spans("It rains. It pours.", "en"), ["x"])


def test_spans_partition_the_text_into_sentences_and_whitespace_on_random_text():
    """The contract on many random texts: ordered, non-overlapping, trimmed spans without line breaks,
    only whitespace outside them, and joining the sentences themselves gives the text back."""
    rng = random.Random(22)
    pieces = ["Dr.", "Smith", "3", "p.m.", "Jan.", "5.", "e.g.", "Hello!", "What?", "...", "\"Quoted.\"", "„Zitat.“",
              "Ünïcödé", "😀", "z. B.", "word", "end.", " ", "  ", "\t", "\n", "\r\n", "\r", "\u2028", "\u00a0", "\u3000"]
    for _ in range(300):
        text = "".join(rng.choice(pieces) + rng.choice(["", " "]) for _ in range(rng.randint(0, 30)))
        spans = sentence_spans(text, rng.choice(["en", "de", "fr", "xx"]))
        end = 0
        for a, b in spans:
            assert end <= a < b <= len(text)
            assert not text[end:a].strip()
            assert text[a] == text[a:b].strip()[0] and text[b - 1] == text[a:b].strip()[-1]
            assert len(text[a:b].splitlines()) == 1
            end = b
        assert not text[end:].strip()
        assert join_sentences(text, spans, [text[a:b] for a, b in spans]) == text


# --- nmt translate --split-sentences ---------------------------------------------------------------------

# A random model writes to the length limit: a limit of source length + 10 keeps its translations short.
SHORT = ["--threads", "1", "--max-len-b", "10"]
PARAGRAPHS = ["Dr. Smith sees the dog at 3 p.m. on Jan. 5. The dog sees a cat!  A red car?", "", "   ",
              "the old man reads a book in the garden", "\tIt rains. It pours.\t \u00a0"]


def _records(out) -> list[dict]:
    return [json.loads(line) for line in out.stdout.split("\n")[:-1]]


def same(a, b) -> bool:
    """JSON values equal but for float rounding: a sentence's score depends on the batch it was searched in by
    some 1e-6 (the same text and tokens)."""
    if isinstance(a, float) or isinstance(b, float):
        return a == pytest.approx(b, abs=1e-4)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def test_split_sentences_translates_each_paragraph_as_its_sentences_one_by_one(random_model, nmt_main, tmp_path):
    """A paragraph's line is its sentences translated as lines of their own and joined with the paragraph's own
    whitespace: text and json, the n-best list (the k-th of each sentence, joined), scores summed."""
    spans = [sentence_spans(p, "en") for p in PARAGRAPHS]
    assert [[p[a:b] for a, b in s] for p, s in zip(PARAGRAPHS, spans)] == [
        ["Dr. Smith sees the dog at 3 p.m. on Jan. 5.", "The dog sees a cat!", "A red car?"], [], [],
        ["the old man reads a book in the garden"], ["It rains.", "It pours."]]
    sentences = [p[a:b] for p, s in zip(PARAGRAPHS, spans) for a, b in s]
    common = ("translate", "-m", str(random_model), *SHORT)
    alone = _records(nmt_main(*common, "--output-format", "json", "--nbest", "2", input="\n".join(sentences) + "\n", cwd=tmp_path))
    assert len(alone) == 6 and all(len(r["nbest"]) == 2 for r in alone)
    per_line, start = [], 0
    for s in spans:
        per_line.append(alone[start:start + len(s)])
        start += len(s)
    best = [join_sentences(p, s, [r["translation"] for r in rs]) for p, s, rs in zip(PARAGRAPHS, spans, per_line)]
    second = [join_sentences(p, s, [r["nbest"][1]["translation"] for r in rs]) for p, s, rs in zip(PARAGRAPHS, spans, per_line)]
    assert best[1:3] == ["", "   "] and best[4].startswith("\t") and best[4].endswith("\t \u00a0")

    text = nmt_main(*common, "--split-sentences", input="\n".join(PARAGRAPHS) + "\n", cwd=tmp_path)
    assert text.stdout == "".join(line + "\n" for line in best)
    assert "translated 5 line(s)" in text.stderr
    records = _records(nmt_main(*common, "--split-sentences", "--output-format", "json", "--nbest", "2", "--window", "2",
                                input="\n".join(PARAGRAPHS) + "\n", cwd=tmp_path))
    assert [r["translation"] for r in records] == best
    assert [[e["translation"] for e in r["nbest"]] for r in records] == [[b, s] if ss else [] for b, s, ss in zip(best, second, spans)]
    for record, paragraph, s, rs in zip(records, PARAGRAPHS, spans, per_line):
        assert same(record["sentences"], [{"source": paragraph[a:b], "start": a, "end": b, **r} for (a, b), r in zip(s, rs)])
        assert record["log_prob"] == (pytest.approx(sum(r["log_prob"] for r in rs), abs=1e-5) if rs else None)
        assert record["score"] == (pytest.approx(sum(r["score"] for r in rs), abs=1e-5) if rs else None)


def test_split_sentences_names_the_line_and_sentence_it_truncates(random_model, nmt_main, tmp_path):
    """A sentence the splitter cannot cut and the model cannot read whole (the random model reads 255 tokens) is
    truncated with nmt translate's warning, which names the input line and the sentence in it."""
    long = "It rains. " + "a " * 300 + "end"
    out = nmt_main("translate", "-m", str(random_model), *SHORT, "--split-sentences", input=f"Fine.\n{long}\n", cwd=tmp_path)
    assert out.stdout.count("\n") == 2
    warnings = [line for line in out.stderr.splitlines() if line.startswith("nmt: warning:")]
    assert warnings == ["nmt: warning: line 2, sentence 2: 302 tokens, truncated to the model's 255"], out.stderr


@pytest.mark.parametrize("flags, message", [
    (["--forced-decoding", "--target-file", "IN"], "--split-sentences does not go with --forced-decoding (a given translation belongs to a whole line"),
    (["--prefix-file", "IN"], "--split-sentences does not go with --prefix-file (a prefix belongs to a whole line"),
])
def test_split_sentences_is_refused_with_flags_of_whole_lines(random_model, nmt_main, tmp_path, flags, message):
    from test_finetune import one_error_line

    (tmp_path / "in.txt").write_text("It rains. It pours.\n")
    flags = [str(tmp_path / "in.txt") if f == "IN" else f for f in flags]
    out = nmt_main("translate", "-m", str(random_model), "--split-sentences", "-i", str(tmp_path / "in.txt"), *flags, check=False)
    assert out.stdout == "" and message in one_error_line(out, "split-sentences-whole-lines")


def test_split_sentences_with_the_ctranslate2_engine(random_model, nmt_main, tmp_path):
    """The exported model cuts by the source language of its nmt.json, and translates each sentence as a line."""
    pytest.importorskip("ctranslate2")
    nmt_main("export", "ctranslate2", str(random_model), str(tmp_path / "ct2"))
    common = ("translate", "-m", str(tmp_path / "ct2"), "--engine", "ctranslate2", "--length-penalty", "power", *SHORT)
    spans = [sentence_spans(p, "en") for p in PARAGRAPHS]
    sentences = [p[a:b] for p, s in zip(PARAGRAPHS, spans) for a, b in s]
    alone = iter(nmt_main(*common, input="\n".join(sentences) + "\n", cwd=tmp_path).stdout.split("\n"))
    split = nmt_main(*common, "--split-sentences", input="\n".join(PARAGRAPHS) + "\n", cwd=tmp_path)
    assert split.stdout == "".join(join_sentences(p, s, [next(alone) for _ in s]) + "\n" for p, s in zip(PARAGRAPHS, spans))
    assert "warning" not in split.stderr, split.stderr


def test_a_model_without_a_source_language_is_split_by_english_rules_with_a_warning(random_model, nmt_main, tmp_path):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(random_model, model)
    values = json.loads((model / "config.json").read_text())
    del values["languages"]
    (model / "config.json").write_text(json.dumps(values))
    out = nmt_main("translate", "-m", str(model), *SHORT, "--split-sentences", input="Mr. Smith left. He was late.\n", cwd=tmp_path)
    assert "nmt: warning: the model's config.json names no source language: sentences are split by the rules for 'en'" in out.stderr
    records = _records(nmt_main("translate", "-m", str(model), *SHORT, "--split-sentences", "--output-format", "json",
                                input="Mr. Smith left. He was late.\n", cwd=tmp_path))
    assert [s["source"] for s in records[0]["sentences"]] == ["Mr. Smith left.", "He was late."]
