"""The language a text is written in: `source: "auto"` and POST /detect of `nmt serve`.

The detector is py3langid (a maintained fork of Lui & Baldwin's langid.py: naive Bayes over byte
n-grams, 140 languages, its model an LZMA-compressed npz of 4.4 MB inside its wheel: nothing fetched,
nothing unpickled). Chosen over lingua-language-detector by benchmarks/language_detect.py on the
Universal Declaration of Human Rights in 14 languages: as accurate on paragraphs (99.2% against 99.8%)
and nearly so on three-word snippets (89.7% against 92.2%, both choosing among all their languages),
at 7 to 9 times lingua's speed, a fourteenth of its memory (87 MB against 1.2 GB with its models loaded) and a
twentieth of its wheel (4.4 MB against 95 MB). lingua is better at single words (59% against 40%): a
word alone is often too little for either.

A server knows a few languages, and most texts sent to it are in one of them; the detector knows 140.
Choosing only among the server's languages (as LibreTranslate does) is the most accurate for those,
but calls every other text one of them, so a French text sent to an English-German server would be
"translated" as English. Choosing among all 140 refuses that text clearly, but short texts in the
server's own languages are then often taken for a neighbour (3-word snippets: 89.7% right). So the
server's languages get a prior: each is `PRIOR` times likelier than any other language before the text
is read (Bayes' rule on the detector's posterior). With an en<->de server, PRIOR 10 keeps 100% of the
English and German paragraphs and 99.8% of their 3-word snippets right (no prior: 99.2% and 95.9%), and
still finds 99.2% of the paragraphs and 95.4% of the snippets in the 12 other languages to be neither
(restricted to en and de: none).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

PRIOR = 10.0  # how much likelier, before reading the text, each language the server knows is than any other
NO_LANGUAGE = "zxx"  # py3langid's label for text with no linguistic content (ISO 639-2)


@dataclass(frozen=True)
class Guess:
    language: str  # the server's code for it where the server knows the language, else the detector's ISO 639-1 code
    confidence: float  # 0 to 100, as LibreTranslate gives it


class Detector:
    """Detects the language of texts; `known`: the language codes the server translates from or into."""

    def __init__(self, known: Iterable[str] = (), prior: float = PRIOR):
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        self.identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        # A server's code ("pt-BR", "zh_Hant") stands for the detector's primary subtag ("pt", "zh").
        self.known = {code.replace("_", "-").split("-")[0].lower(): code for code in known}
        self.prior = prior

    def detect(self, text: str, candidates: int = 3) -> list[Guess]:
        """The likeliest languages of `text` (at most `candidates`), best first; [] for text without letters (digits,
        punctuation, emoji)."""
        if not any(ch.isalpha() for ch in text):
            return []
        weighted = [(language, p * (self.prior if language in self.known else 1.0)) for language, p in self.identifier.rank(text)]
        weighted.sort(key=lambda lp: lp[1], reverse=True)
        if weighted[0][0] == NO_LANGUAGE:
            return []
        total = sum(p for _, p in weighted)
        guesses = [Guess(self.known.get(language, language), round(100 * p / total, 1))
                   for language, p in weighted[:candidates] if language != NO_LANGUAGE]
        return guesses[:1] + [g for g in guesses[1:] if g.confidence > 0]  # no runner-up at 0.0%
