"""Which language a text is written in: py3langid, for `nmt prepare`'s language filter and `nmt serve`'s detection.

py3langid is a maintained fork of Lui & Baldwin's langid.py: naive Bayes over byte n-grams, 140 languages, its model an
LZMA-compressed npz inside its wheel (nothing fetched, nothing unpickled). It lives in the data layer so that the
cleaning of a corpus (cleaning.py) and the detection of a served text (documents/languages.py) share one model.

`posterior` is Bayes' rule over the detector's probabilities with a prior: some languages (a server's, a corpus's
two) `prior` times likelier than any other before the text is read.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from nmtcli.errors import NmtError

NO_LANGUAGE = "zxx"  # py3langid's label for text with no linguistic content (ISO 639-2)


@lru_cache(maxsize=1)
def identifier() -> Any:
    """py3langid's identifier with probabilities normalised over its languages, loaded once per process."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        raise NmtError("language identification needs py3langid, which is not installed",
                       "pip install py3langid (a dependency of nmtcli), or prepare with --keep-wrong-language") from None
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def languages() -> set[str]:
    """The codes the detector knows (ISO 639-1 where there is one)."""
    return set(identifier().labels) - {NO_LANGUAGE}


def primary(code: str) -> str:
    """A language code's primary subtag, as the detector names languages: "pt-BR", "zh_Hant" -> "pt", "zh"."""
    return code.replace("_", "-").split("-")[0].lower()


def posterior(text: str, likelier: Iterable[str] = (), prior: float = 1.0) -> list[tuple[str, float]]:
    """Every language with its probability given `text`, best first; the languages in `likelier` are `prior` times
    likelier than the others before the text is read."""
    likelier = set(likelier)
    weighted = [(language, p * (prior if language in likelier else 1.0)) for language, p in identifier().rank(text)]
    total = sum(p for _, p in weighted) or 1.0
    return sorted(((language, p / total) for language, p in weighted), key=lambda lp: lp[1], reverse=True)
