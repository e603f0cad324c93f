"""Language detection (nmtcli/documents/languages.py) on real text: the Universal Declaration of Human Rights
in 14 languages (tests/data/udhr.tsv, OHCHR's translations), whole paragraphs and 3-word snippets of them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("py3langid")

# The study's texts: the numbers asserted here are those studies/language_detect.py prints.
sys.path.insert(0, str(Path(__file__).parents[1] / "studies"))
from language_detect import read_texts

from nmtcli.documents.languages import Detector

LONG, SHORT = read_texts()


def share(found: list[bool]) -> float:
    return sum(found) / len(found)


@pytest.fixture(scope="module")
def detector() -> Detector:
    return Detector()


def test_paragraphs_and_snippets_in_14_languages_are_detected(detector):
    languages = sorted({language for language, _ in LONG})
    assert len(languages) == 14 and {"en", "de", "fr", "es", "it", "nl", "pt"} <= set(languages)
    long = {language: share([detector.detect(text)[0].language == language for lang, text in LONG if lang == language]) for language in languages}
    assert min(long.values()) >= 0.96, long  # 99.2% over all (studies/language_detect.py)
    short = [detector.detect(text)[0].language == language for language, text in SHORT[::4]]
    assert share(short) >= 0.85, share(short)  # 3 words: 89.7%


def test_a_servers_languages_win_their_snippets_and_other_languages_stay_other(detector):
    """The prior for an en<->de server: its snippets detected right more often than with no prior, and
    text in the other 12 languages still found to be neither English nor German (so /translate refuses it)."""
    server, plain = Detector(["en", "de"]), detector
    ours = [(language, text) for language, text in SHORT if language in ("en", "de")]
    others = [(language, text) for language, text in SHORT[::4] if language not in ("en", "de")]
    with_prior = share([server.detect(text)[0].language == language for language, text in ours])
    without = share([plain.detect(text)[0].language == language for language, text in ours])
    assert with_prior >= 0.99 and with_prior > without, (with_prior, without)
    assert share([server.detect(text)[0].language not in ("en", "de") for _, text in others]) >= 0.9
    sentences = [text for language, text in LONG if language in ("fr", "es", "it", "pl") and len(text.split()) >= 8]
    assert all(server.detect(text)[0].language not in ("en", "de") for text in sentences)  # ("proclama" alone is "en" at 12%)


def test_guesses_are_libretranslates_confidences_in_the_servers_codes(detector):
    text = next(text for language, text in LONG if language == "pt")
    guesses = detector.detect(text)
    assert guesses[0].language == "pt" and guesses[0].confidence > 90 and all(g.confidence > 0 for g in guesses)
    assert len(detector.detect("Hello World")) == 3  # a short text: runners-up close behind
    assert all(0 <= g.confidence <= 100 for g in guesses) and [g.confidence for g in guesses] == sorted((g.confidence for g in guesses), reverse=True)
    assert Detector(["en", "pt-BR"]).detect(text)[0].language == "pt-BR"  # a server's regional code stands for its language
    assert detector.detect(text, candidates=1) == guesses[:1]


@pytest.mark.parametrize("text", ["", "   ", "12 345,67", "!!! ?", "🙂🙂", "3.14 + 2 = 5.14"])
def test_text_without_letters_has_no_language(detector, text):
    assert detector.detect(text) == []
