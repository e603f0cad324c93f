"""The models a server translates with: loaded once at start-up, each known by its language pair."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmtcli.api import Translator, open_engine
from nmtcli.errors import NmtError
from nmtcli.inference.translator import SearchSettings


@dataclass
class ServedModel:
    name: str  # what the user named with -m: a dir or a Hub id
    source: str
    target: str
    translator: Translator  # the Python API's: `nmt serve` translates through the calls a program makes
    scores: dict[str, Any] = field(default_factory=dict)  # the model dir's scores.json, as `nmt score` wrote it

    def __post_init__(self) -> None:
        if not isinstance(self.translator, Translator):  # a native engine (inference/translator.py) loaded by its caller
            self.translator = Translator(self.translator, self.name)

    @property
    def pair(self) -> str:
        return f"{self.source}-{self.target}"

    def describe(self) -> dict[str, Any]:
        """What GET /nmt/models (and the page) show of a model."""
        return {"name": self.name, "source": self.source, "target": self.target, "scores": self.scores}


# The names GET /languages gives (LibreTranslate's clients show them); a code not listed is its own name.
LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "fa": "Persian", "fi": "Finnish", "fr": "French",
    "ga": "Irish", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian", "id": "Indonesian", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "lt": "Lithuanian", "lv": "Latvian", "nb": "Norwegian", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sv": "Swedish", "th": "Thai", "tr": "Turkish",
    "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
}


def language_name(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def language_pair(values: dict[str, Any], name: str) -> tuple[str, str]:
    """(source, target) from a model dir's config.json."""
    if (values.get("tokenizer") or {}).get("kind") == "multilingual":
        raise NmtError(f"{name} is a multilingual model (M2M-100, NLLB-200): `nmt serve` does not serve those yet",
                       "translate with `nmt translate -m MODEL --target-lang CODE`, or serve one-direction models")
    languages = values.get("languages") or {}
    source, target = languages.get("source"), languages.get("target")
    if not (isinstance(source, str) and source and isinstance(target, str) and target):
        raise NmtError(f"{name} has no language pair in its config.json (\"languages\": {{\"source\": ..., \"target\": ...}})",
                       "add it to config.json, e.g. \"languages\": {\"source\": \"en\", \"target\": \"de\"}")
    return source, target


def read_scores(model_dir: Path) -> dict[str, Any]:
    """scores.json of a model dir, or {} when it has none or it is unreadable (the page just shows no scores)."""
    try:
        scores = json.loads((Path(model_dir) / "scores.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return scores if isinstance(scores, dict) else {}


def load_models(dirs: list[tuple[str, Path]], device: str, settings: SearchSettings, dtype: str = "fp32",
                warn: Callable[[str], None] | None = None) -> list[ServedModel]:
    """Load each (name, model dir); two models for one language pair are refused before any is loaded."""
    from nmtcli.model.checkpoint import read_model_dir_config

    pairs: dict[tuple[str, str], str] = {}
    for name, path in dirs:
        pair = language_pair(read_model_dir_config(path), name)
        if pair in pairs:
            raise NmtError(f"{pairs[pair]} and {name} both translate {pair[0]}->{pair[1]}",
                           "serve one model per language pair (run a second `nmt serve` on another --port for the other)",
                           exit_code=2)
        pairs[pair] = name
    return [ServedModel(name, *pair, Translator(open_engine(path, device=str(device), dtype=dtype, settings=settings, warn=warn), name),
                        read_scores(path))
            for pair, (name, path) in zip(pairs, dirs)]
