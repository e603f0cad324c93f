"""The bookkeeping that makes `nmt prepare` resumable: what each stage's output depends on, and whether it is done.

Each stage's key is a fingerprint (sha256) of everything its output depends on: the inputs' identities, the settings
that change the output, the key of the stage before it. A finished stage leaves a marker, `.work/<stage>.json`,
holding its key and counts; a stage whose marker matches (and whose outputs exist) is not run again. The finished
data dir's manifest.json holds the encode stage's key and every file's checksum: a later run with the same inputs
and settings finds them in order and does nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtcli.checksums import file_sha256
from nmtcli.data.settings import SAMPLES, PairSource, PrepareSettings
from nmtcli.data.vocab_size import RULE as VOCAB_RULE
from nmtcli.files import atomic_write_json

if TYPE_CHECKING:
    from nmtcli.data.score_filter import ScoreFilter
    from nmtcli.data.vocabulary import ModelVocabulary

MANIFEST = "manifest.json"
WORK = ".work"  # the stages' intermediate files and markers, removed once manifest.json is written


def fingerprint(*parts: Any) -> str:
    """sha256 of `parts` as JSON: a stage's key, of everything its output depends on."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def read_marker(work: Path, stage: str, key: str) -> dict[str, Any] | None:
    """The stage's marker in `work` (its key and counts) when it was written with `key`; else None."""
    path = work / f"{stage}.json"
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if marker.get("key") == key else None


def write_marker(work: Path, stage: str, key: str, counts: dict[str, Any]) -> None:
    atomic_write_json(work / f"{stage}.json", {"key": key, "counts": counts})


def manifest_is_current(out_dir: Path, key: str) -> dict[str, Any] | None:
    """The finished data dir's manifest when it was made with `key` (the encode stage's fingerprint) and every file
    it lists still has its checksum; else None."""
    try:
        manifest = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("fingerprint") != key:
        return None
    for name, digest in manifest.get("files", {}).items():
        if not (out_dir / name).is_file() or file_sha256(out_dir / name) != digest:
            return None
    return manifest


def stage_keys(sources: dict[str, PairSource], settings: PrepareSettings, vocabulary: ModelVocabulary | None = None,
               score_filter: ScoreFilter | None = None) -> tuple[str, str, str]:
    """The fingerprints of the text, sentencepiece and encode stages: each of everything its output depends on (the
    score filter's models and percent, where it runs between the text and the vocabulary)."""
    # The switches, not the filters they make: that would load the language detector before anything is written.
    # "partial-2": the misaligned filter's word-by-word rules, which joined it later and were then narrowed (a data dir
    # made before either is remade).
    filters = [settings.drop_long_words, settings.drop_non_alphabetic, settings.drop_url_mismatch, settings.drop_number_mismatch,
               settings.drop_copies, settings.drop_wrong_language, *(["misaligned", "partial-2"] if settings.drop_misaligned else []),
               *(["short_copy"] if settings.drop_copies else [])]
    text_key = fingerprint("text", {k: v.identity() for k, v in sorted(sources.items())}, settings.source_lang, settings.target_lang,
                           settings.drop_duplicates, settings.drop_markup, settings.drop_wrong_script, filters, settings.seed, SAMPLES)
    # A vocabulary size from the corpus is a function of the text stage's output: the rule stands for it.
    vocab = settings.vocab_size if settings.vocab_size is not None else VOCAB_RULE
    text = text_key if score_filter is None else score_filter.key(text_key)
    spm_key = fingerprint("sentencepiece", text, vocab, settings.spm_sentences, settings.seed)
    if vocabulary is not None:  # the model's tokenizer files, by content, replace the trained sentencepiece model
        spm_key = fingerprint("vocabulary", text, vocabulary.tokenizer, vocabulary.files, vocabulary.special_ids, vocabulary.size,
                              *([vocabulary.tags] if vocabulary.tags else []))
    # The slack joined the ratio filter later: without it (0, the default) a data dir keeps the fingerprint it was made with.
    ratio = (settings.max_ratio,) if settings.ratio_slack == 0 else (settings.max_ratio, settings.ratio_slack)
    encode_key = fingerprint("encode", spm_key, settings.max_tokens, *ratio)
    return text_key, spm_key, encode_key


def run_stage(work: Path, stage: str, key: str, outputs: list[Path], run: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """(counts, "reused") when the stage's marker matches `key` and its outputs exist; else run it: (counts, "done")."""
    if (marker := read_marker(work, stage, key)) is not None and all(p.is_file() for p in outputs):
        return marker["counts"], "reused"
    counts = run()
    write_marker(work, stage, key, counts)
    return counts, "done"

