"""The language a text is written in: `source: "auto"` and POST /detect of `nmt serve`.

The detector is py3langid (a maintained fork of Lui & Baldwin's langid.py: naive Bayes over byte
n-grams, 140 languages, its model an LZMA-compressed npz inside its wheel: nothing fetched, nothing
unpickled), chosen over lingua-language-detector by studies/language_detect.py: about as accurate,
several times faster and a fraction of the memory (docs/serving.md, "Language detection", has the table).
Its model is loaded once per process by nmtcli/data/language_id.py, which `nmt prepare`'s language filter
shares.

A server knows a few languages, and most texts sent to it are in one of them; the detector knows 140.
Choosing only among the server's languages (as LibreTranslate does) is the most accurate for those,
but calls every other text one of them, so a French text sent to an English-German server would be
"translated" as English. Choosing among all 140 refuses that text clearly, but short texts in the
server's own languages are then often taken for a neighbour. So the server's languages get a prior:
each is `PRIOR` times likelier than any other language before the text is read (Bayes' rule on the
detector's posterior), which keeps the server's own languages right and still finds the others to be
neither (docs/serving.md has the measurement that set PRIOR).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from nmtcli.data.language_id import NO_LANGUAGE, identifier, primary

PRIOR = 10.0  # how much likelier, before reading the text, each language the server knows is than any other


@dataclass(frozen=True)
class Guess:
    language: str  # the server's code for it where the server knows the language, else the detector's ISO 639-1 code
    confidence: float  # 0 to 100, as LibreTranslate gives it


class Detector:
    """Detects the language of texts; `known`: the language codes the server translates from or into."""

    def __init__(self, known: Iterable[str] = (), prior: float = PRIOR):
        self.identifier = identifier()
        # A server's code ("pt-BR", "zh_Hant") stands for the detector's primary subtag ("pt", "zh").
        self.known = {primary(code): code for code in known}
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
