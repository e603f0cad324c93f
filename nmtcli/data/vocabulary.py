"""A model's vocabulary for data: `nmt prepare --vocab-from MODEL` encodes with it instead of training a new one.

Fine-tuning a model needs data in the model's own token ids. A model dir names its tokenizer in
`config.json` ("tokenizer"; absent: nmt's joint `sentencepiece.model`); models imported from
OPUS-MT hold Marian's `source.spm`, `target.spm` and the joint `vocab.json`, and their special
ids differ from nmt's (EOS 0, padding last, decoding starts from the pad token); imported M2M-100 and NLLB-200 models
hold one sentencepiece model, `vocab.json` and a tag per language, which prepare puts before every
source (the source language's tag) and every target (the target language's), as fairseq trained
them, so that the decoder reads `</s> TAG pieces` and writes `TAG pieces </s>`. `ModelVocabulary`
is what prepare needs of that: the files to copy into the data dir (and their sha256, which also
identify the vocabulary to `nmt train --init`), the tokenizer section, the vocabulary size, the
special ids and the languages. Reading it needs no torch: only `config.json` and the files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nmtcli.checksums import file_sha256
from nmtcli.errors import NmtError
from nmtcli.files import atomic_copy, read_json

CONFIG_FILE = "config.json"  # a model dir's, as model/checkpoint.py names it (not imported: it loads torch)
SPECIAL_IDS = ("pad_id", "unk_id", "bos_id", "eos_id")


def tokenizer_files(tokenizer: dict[str, Any] | None) -> dict[str, str]:
    """The files a tokenizer section names, by role: {"model": ...} or {"source", "target", "vocab"}."""
    from nmtcli.data.text import SPM_FILE

    spec = tokenizer or {"kind": "sentencepiece"}
    if spec.get("kind") == "multilingual":
        return {"model": spec.get("model", "sentencepiece.bpe.model"), "vocab": spec.get("vocab", "vocab.json")}
    if spec.get("kind") == "marian":
        return {role: spec.get(role, default) for role, default in (("source", "source.spm"), ("target", "target.spm"), ("vocab", "vocab.json"))}
    return {"model": spec.get("model", SPM_FILE)}


@dataclass(frozen=True)
class ModelVocabulary:
    """What `nmt prepare --vocab-from` takes from a model dir (see the module's docstring)."""

    model_dir: Path
    tokenizer: dict[str, Any]  # config.json's "tokenizer" section, e.g. {"kind": "marian", "source": "source.spm", ...}
    files: dict[str, str]  # file name (the same in the model dir and the data dir) -> sha256
    size: int  # the model's vocab_size: every id the data holds is below it
    special_ids: dict[str, int]  # pad_id, unk_id, bos_id, eos_id
    source_lang: str
    target_lang: str
    origin: dict[str, Any] = field(default_factory=dict)  # {"model": id or path, "revision": commit or None, ...}
    # A multilingual model's: the model's codes of the data's source and target language, whose tags prepare puts
    # before each side (the command line resolves `en` to `eng_Latn`: inference/language_codes.py); {} otherwise.
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def multilingual(self) -> bool:
        return self.kind == "multilingual"

    def tag_ids(self) -> tuple[int, int]:
        """The ids of the source and target language's tags (vocab.json's)."""
        ids = read_piece_ids(self.model_dir / tokenizer_files(self.tokenizer)["vocab"])
        languages = self.tokenizer["languages"]
        return ids[languages[self.tags["source"]]], ids[languages[self.tags["target"]]]

    @property
    def languages_known(self) -> bool:
        """Whether the model says its languages (an import of an unnamed repo writes "src" and "tgt")."""
        return "" not in (self.source_lang, self.target_lang) and (self.source_lang, self.target_lang) != ("src", "tgt")

    @property
    def kind(self) -> str:
        return self.tokenizer.get("kind", "sentencepiece")

    def describe(self) -> dict[str, Any]:
        """The manifest's record of the vocabulary: which model, which revision, which files (sha256)."""
        return {**self.origin, "kind": self.kind, "files": dict(self.files)}

    def copy_into(self, out_dir: Path) -> dict[str, Any]:
        """Copy the tokenizer files into the data dir (each atomically); they must still be what was read."""
        for name, digest in self.files.items():
            if file_sha256(self.model_dir / name) != digest:
                raise NmtError(f"{self.model_dir / name} changed while preparing", "run `nmt prepare` again")
            atomic_copy(self.model_dir / name, Path(out_dir) / name)
        return {"copied_from": str(self.origin.get("model", self.model_dir))}


def read_vocabulary(model_dir: Path, origin: dict[str, Any] | None = None) -> ModelVocabulary:
    """The vocabulary of the model dir `model_dir` (nmt's own or imported from OPUS-MT)."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise NmtError(f"{model_dir} is not a directory", "pass a model dir (or a Hub id) to --vocab-from")
    hint = "pass a model dir written by `nmt average`, `nmt import marian` or `nmt pull`"
    values = read_json(model_dir / CONFIG_FILE, (f"{model_dir} has no {CONFIG_FILE}", hint), hint)
    if not isinstance(values, dict) or not isinstance(values.get("model"), dict):
        raise NmtError(f"{model_dir / CONFIG_FILE} is not an nmt model config (it has no \"model\" section)",
                       "for a Hugging Face Marian model run `nmt import marian DIR` first, then pass the model dir it writes")
    model, languages = values["model"], values.get("languages") or {}
    tokenizer = values.get("tokenizer") or {"kind": "sentencepiece", "model": tokenizer_files(None)["model"]}
    if tokenizer.get("kind") not in ("sentencepiece", "marian", "multilingual"):
        raise NmtError(f"{model_dir / CONFIG_FILE} names an unknown tokenizer {tokenizer.get('kind')!r}", "upgrade nmt")
    names = list(tokenizer_files(tokenizer).values())
    for name in names:
        if not (model_dir / name).is_file():
            raise NmtError(f"{model_dir} has no {name}, which its {CONFIG_FILE} names as the vocabulary", "copy the whole model dir, or pull it again")
    defaults = {"pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3}
    return ModelVocabulary(
        model_dir=model_dir,
        tokenizer=dict(tokenizer),
        files={name: file_sha256(model_dir / name) for name in names},
        size=int(model["vocab_size"]),
        special_ids={k: int(model.get(k, defaults[k])) for k in SPECIAL_IDS},
        # a multilingual model translates between any two of its languages: the data's are the user's choice
        source_lang="" if tokenizer.get("kind") == "multilingual" else str(languages.get("source", "")),
        target_lang="" if tokenizer.get("kind") == "multilingual" else str(languages.get("target", "")),
        origin={"model": str(model_dir.resolve()), "revision": None, **(origin or {})},
    )


def data_vocabulary(manifest: dict[str, Any]) -> dict[str, str]:
    """The tokenizer files of a prepared data dir and their sha256: what a model must share to train on it."""
    return {name: manifest["files"][name] for name in tokenizer_files(manifest.get("tokenizer")).values() if name in manifest["files"]}


def read_piece_ids(path: Path) -> dict[str, int]:
    """Marian's `vocab.json`: piece -> id."""
    try:
        mapping = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise NmtError(f"cannot read the vocabulary {path}: {e}", "re-import the model with `nmt import marian`") from None
    if not isinstance(mapping, dict) or not all(isinstance(v, int) for v in mapping.values()):
        raise NmtError(f"{path} is not a piece -> id mapping", "re-import the model with `nmt import marian`")
    return mapping


def check_languages(vocabulary: ModelVocabulary, source_lang: str, target_lang: str) -> None:
    """The data must be in the model's direction (where the model says which; imports of unnamed repos do not)."""
    if vocabulary.multilingual and set(vocabulary.tags) != {"source", "target"}:
        raise NmtError(f"{vocabulary.origin.get('model', vocabulary.model_dir)} is multilingual: its language codes for the data are not known",
                       "prepare through `nmt prepare --vocab-from MODEL -s CODE -t CODE`, which resolves them", exit_code=2)
    model = (vocabulary.source_lang, vocabulary.target_lang)
    if not vocabulary.languages_known or model == (source_lang, target_lang):
        return
    raise NmtError(f"{vocabulary.origin.get('model', vocabulary.model_dir)} translates {model[0]}->{model[1]}, not {source_lang}->{target_lang}",
                   f"prepare {model[0]}->{model[1]} data (-s {model[0]} -t {model[1]}, the default with --vocab-from), or take a model for {source_lang}->{target_lang}",
                   exit_code=2)
