"""The models a server translates with: loaded once at start-up, each known by its language pair, or (a multilingual
model: M2M-100, NLLB-200) by its languages, any two of which are a pair it translates.

LibreTranslate's clients name languages by ISO 639-1 codes (`de`); a multilingual model is served under those
(`deu_Latn` -> `de`, through language_codes' one table) where the table has one, else under its own code
(`ace_Arab`), and a request may also name its own code or an ISO 639-3 one (`deu`). Where a one-direction model and
a multilingual one both translate a pair, the one-direction model does (it was chosen for that pair)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmtcli.api import Translator, open_engine
from nmtcli.errors import NmtError
from nmtcli.inference.language_codes import iso_639_1, resolve
from nmtcli.inference.settings import SearchSettings


@dataclass
class ServedModel:
    name: str  # what the user named with -m: a dir or a Hub id
    source: str
    target: str
    translator: Translator  # the Python API's: `nmt serve` translates through the calls a program makes
    scores: dict[str, Any] = field(default_factory=dict)  # the model dir's scores.json, as `nmt score` wrote it
    # A multilingual model's languages: each code as served -> the model's code ({} for a one-direction model, whose
    # source and target are its pair; a multilingual model's are the direction it was loaded with, the page's default).
    languages: dict[str, str] = field(default_factory=dict)
    _directions: dict[tuple[str, str], ServedModel] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.translator, Translator):  # a native engine (inference/translator.py) loaded by its caller
            self.translator = Translator(self.translator, self.name)

    @property
    def pair(self) -> str:
        return f"multilingual ({len(self.languages)} languages)" if self.languages else f"{self.source}-{self.target}"

    def describe(self) -> dict[str, Any]:
        """What GET /nmt/models (and the page) show of a model."""
        languages = {"languages": sorted(self.languages)} if self.languages else {}
        return {"name": self.name, "source": self.source, "target": self.target, **languages, "scores": self.scores}

    def code(self, code: str) -> str | None:
        """A multilingual model's served code for a code a client sent (`de`, `deu`, `deu_Latn`, `zh-Hant`), or None."""
        if code in self.languages:
            return code
        found = resolve(code, self.languages.values())
        return None if found is None else next(served for served, own in self.languages.items() if own == found)

    def direction(self, source: str, target: str) -> ServedModel | None:
        """A multilingual model's source -> target (codes as a client sends them; None where it lacks either, or they are
        one language): a served model of its own for that pair, made once, translating with this model's weights
        (inference/translator.py `with_languages`), so the batcher puts only one direction's lines in a call."""
        pair = (self.code(source), self.code(target))
        if None in pair or pair[0] == pair[1]:
            return None
        if pair not in self._directions:
            engine = self.translator.engine.with_languages(self.languages[pair[0]], self.languages[pair[1]])
            self._directions[pair] = ServedModel(self.name, *pair, Translator(engine, self.name), self.scores)
        return self._directions[pair]


class ServedModels:
    """The models of one server, and which translates a pair: a one-direction model for its own pair first, then a
    multilingual one for any two of its languages."""

    def __init__(self, models: list[ServedModel]):
        self.models = models
        self.by_pair = {(m.source, m.target): m for m in models if not m.languages}
        self.multilingual = [m for m in models if m.languages]

    def find(self, source: str, target: str) -> ServedModel | None:
        """The model for source -> target, or None."""
        found = self.by_pair.get((source, target))
        for model in self.multilingual:
            found = found or model.direction(source, target)
        return found

    def code(self, code: str) -> str:
        """The code the server knows a language by (a multilingual model's served code: `deu_Latn` -> `de`), else `code`."""
        for model in self.multilingual:
            if (served := model.code(code)) is not None:
                return served
        return code

    def is_source(self, code: str) -> bool:
        return any(m.source == code for m in self.by_pair.values()) or any(m.code(code) for m in self.multilingual)

    def is_target(self, code: str) -> bool:
        return any(m.target == code for m in self.by_pair.values()) or any(m.code(code) for m in self.multilingual)

    def known(self) -> set[str]:
        """Every code a model translates from or into (the language detector's a priori likelier ones)."""
        return {code for m in self.by_pair.values() for code in (m.source, m.target)} | {c for m in self.multilingual for c in m.languages}

    def languages(self) -> list[dict[str, Any]]:
        """GET /languages: each language a model translates from or into with the codes it translates into, as
        LibreTranslate lists them: [{"code", "name", "targets"}] by code."""
        targets: dict[str, set[str]] = {code: set() for code in self.known()}
        for m in self.by_pair.values():
            targets[m.source].add(m.target)
        for m in self.multilingual:
            for code in m.languages:
                targets[code].update(other for other in m.languages if other != code)
        return [{"code": code, "name": language_name(code), "targets": sorted(targets[code])} for code in sorted(targets)]

    def summary(self) -> str:
        """The pairs this server translates, for error messages: "en->de, de->en, any two of the 100 languages of models/m2m"."""
        return ", ".join([f"{m.source}->{m.target}" for m in self.by_pair.values()]
                         + [f"any two of the {len(m.languages)} languages of {m.name}" for m in self.multilingual])


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


def is_multilingual(values: dict[str, Any]) -> bool:
    """Whether a model dir's config.json is a multilingual model's (its tokenizer holds a tag per language)."""
    return (values.get("tokenizer") or {}).get("kind") == "multilingual"


def served_codes(codes: list[str]) -> dict[str, str]:
    """A multilingual model's codes as a server knows them -> the model's: ISO 639-1 where the one table has it
    (`deu_Latn` -> `de`; M2M-100's `de` as it is), else the model's own (`ace_Arab`, `zho_Hant`, `ast`)."""
    served: dict[str, str] = {}
    for code in codes:
        short = iso_639_1(code)
        served[short if len(short) == 2 and short not in served else code] = code
    return served


def default_direction(codes: list[str]) -> tuple[str, str]:
    """The direction a multilingual model is loaded with (and /frontend/settings names): nmt's default pair, en->de,
    where the model has those languages, else its first two."""
    source = resolve("en", codes) or codes[0]
    target = resolve("de", codes)
    return source, target if target not in (None, source) else next(code for code in codes if code != source)


def language_pair(values: dict[str, Any], name: str) -> tuple[str, str]:
    """(source, target) from a one-direction model dir's config.json."""
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


def load_models(dirs: list[tuple[str, Path]], device: str, settings: SearchSettings, precision: str = "fp32",
                warn: Callable[[str], None] | None = None) -> list[ServedModel]:
    """Load each (name, model dir); two one-direction models for one language pair, or two multilingual models, are
    refused before any is loaded."""
    from nmtcli.model.checkpoint import read_model_dir_config

    pairs: dict[tuple[str, str], str] = {}
    multilingual: str | None = None
    for name, path in dirs:
        values = read_model_dir_config(path)
        if is_multilingual(values):
            if multilingual is not None:
                raise NmtError(f"{multilingual} and {name} are both multilingual models",
                               "serve one multilingual model per server (run a second `nmt serve` on another --port for the other)",
                               exit_code=2)
            multilingual = name
            continue
        pair = language_pair(values, name)
        if pair in pairs:
            raise NmtError(f"{pairs[pair]} and {name} both translate {pair[0]}->{pair[1]}",
                           "serve one model per language pair (run a second `nmt serve` on another --port for the other)",
                           exit_code=2)
        pairs[pair] = name
    return [_load(name, path, device, settings, precision, warn) for name, path in dirs]


def _load(name: str, path: Path, device: str, settings: SearchSettings, precision: str, warn: Callable[[str], None] | None) -> ServedModel:
    from nmtcli.model.checkpoint import read_model_dir_config

    values = read_model_dir_config(path)
    if not is_multilingual(values):
        engine = open_engine(path, device=str(device), precision=precision, settings=settings, warn=warn)
        return ServedModel(name, *language_pair(values, name), Translator(engine, name), read_scores(path))
    codes = list(values["tokenizer"]["languages"])
    source, target = default_direction(codes)
    engine = open_engine(path, device=str(device), precision=precision, settings=settings, warn=warn, languages=(source, target))
    languages = served_codes(codes)
    served = {own: code for code, own in languages.items()}
    return ServedModel(name, served[source], served[target], Translator(engine, name), read_scores(path), languages)
