"""Sentence splitting (nmtcli/documents/sentences.py): real spans of real text, and the join that puts
translations back with the text's own whitespace."""

from __future__ import annotations

import random

import pytest

from nmtcli.documents.sentences import join_sentences, segmenter_language, sentence_spans, sentences


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
