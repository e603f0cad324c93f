"""`nmt prepare` from local files: clean, train the joint BPE, binarize, write `manifest.json`.

A prepared data dir holds:
  sentencepiece.model                 joint BPE over both languages
  train.<src>.bin/.idx, train.<tgt>.bin/.idx, valid.*.bin/.idx   binarized ids (see shards.py)
  valid.<src>, valid.<tgt>, test.<src>, test.<tgt>                 plain text, every line, for scoring
  manifest.json                       written last: what went in, what was dropped, checksums, versions
"""

from __future__ import annotations

import hashlib
import itertools
import platform
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import sentencepiece as spm

import nmtcli
from nmtcli.data.shards import ShardWriter
from nmtcli.data.text import (
    MAX_RATIO,
    MAX_TOKENS,
    check_parallel,
    keep_pair,
    load_sentencepiece,
    read_lines,
    read_pairs,
    train_sentencepiece,
)
from nmtcli.errors import NmtError
from nmtcli.model.checkpoint import SPM_FILE, atomic_copy, atomic_write_json

MANIFEST = "manifest.json"
CHUNK = 10_000  # sentences encoded per sentencepiece call

# progress(task, done, total): the CLI draws it; the core only reports.
Progress = Callable[[str, int, "int | None"], None]


def _no_progress(task: str, done: int, total: int | None) -> None:
    pass


@dataclass(frozen=True)
class PrepareSettings:
    source_lang: str
    target_lang: str
    vocab_size: int = 37000  # sec. 5.1: a shared vocabulary of about 37,000 tokens for WMT14 en-de
    max_tokens: int = MAX_TOKENS
    max_ratio: float = MAX_RATIO
    spm_sentences: int = 2_000_000  # sentences sampled to train sentencepiece
    seed: int = 1


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def versions() -> dict[str, str]:
    import torch

    return {
        "nmt": nmtcli.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sentencepiece": spm.__version__,
        "numpy": np.__version__,
    }


def _chunks(items: Iterator, size: int) -> Iterator[list]:
    while chunk := list(itertools.islice(items, size)):
        yield chunk


def _binarize(
    sp: spm.SentencePieceProcessor,
    pairs: Iterator[tuple[str, str]],
    out_dir: Path,
    split: str,
    settings: PrepareSettings,
    max_ratio: float | None,
    total: int,
    progress: Progress,
) -> dict[str, Any]:
    """Encode, filter and write one split; returns its counts."""
    vocab = sp.get_piece_size()
    writers = [ShardWriter(out_dir / f"{split}.{lang}", vocab) for lang in (settings.source_lang, settings.target_lang)]
    dropped: Counter[str] = Counter()
    kept = seen = src_tokens = tgt_tokens = 0
    try:
        for chunk in _chunks(pairs, CHUNK):
            src_ids = sp.encode([s for s, _ in chunk])
            tgt_ids = sp.encode([t for _, t in chunk])
            keep_src, keep_tgt = [], []
            for s, t in zip(src_ids, tgt_ids):
                reason = keep_pair(len(s), len(t), settings.max_tokens, max_ratio)
                if reason:
                    dropped[reason] += 1
                    continue
                keep_src.append(s)
                keep_tgt.append(t)
                src_tokens += len(s)
                tgt_tokens += len(t)
            writers[0].add(keep_src)
            writers[1].add(keep_tgt)
            kept += len(keep_src)
            seen += len(chunk)
            progress(f"encoding {split}", seen, total)
    except BaseException:
        for w in writers:
            w.abort()
        raise
    for w in writers:
        w.close()
    return {
        "input_pairs": seen,
        "pairs": kept,
        "dropped": dict(sorted(dropped.items())),
        "source_tokens": src_tokens,
        "target_tokens": tgt_tokens,
    }


def prepare_files(
    out_dir: Path,
    train: Path,
    valid: Path,
    test: Path | None,
    settings: PrepareSettings,
    name: str,
    progress: Progress = _no_progress,
) -> dict[str, Any]:
    """Prepare `PREFIX.<src>` / `PREFIX.<tgt>` files into `out_dir`; returns the manifest."""
    src, tgt = settings.source_lang, settings.target_lang
    if src == tgt:
        raise NmtError(f"source and target language are both {src!r}", "pass two different codes with -s and -t")
    splits = {"train": train, "valid": valid, **({"test": test} if test is not None else {})}
    paths = {split: (Path(f"{prefix}.{src}"), Path(f"{prefix}.{tgt}")) for split, prefix in splits.items()}
    lines = {split: check_parallel(*pair) for split, pair in paths.items()}
    if lines["train"] == 0:
        raise NmtError(f"{paths['train'][0]} is empty", "the training corpus needs at least one sentence pair")

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # An older manifest would describe files about to be replaced: remove it first, write it last.
    (out_dir / MANIFEST).unlink(missing_ok=True)
    started = time.time()

    def training_text() -> Iterator[str]:
        done = 0
        for s, t in read_pairs(*paths["train"]):
            done += 1
            if done % CHUNK == 0:
                progress("training sentencepiece", done, lines["train"])
            if s.strip() and t.strip():
                yield s
                yield t
        progress("training sentencepiece", done, lines["train"])

    spm_path = out_dir / SPM_FILE
    train_sentencepiece(training_text(), spm_path, settings.vocab_size, 2 * settings.spm_sentences, settings.seed)
    sp = load_sentencepiece(spm_path)

    counts = {
        "train": _binarize(sp, read_pairs(*paths["train"]), out_dir, "train", settings, settings.max_ratio, lines["train"], progress),
        # Validation keeps its natural length ratios: only empty and over-long pairs are dropped.
        "valid": _binarize(sp, read_pairs(*paths["valid"]), out_dir, "valid", settings, None, lines["valid"], progress),
    }
    if counts["train"]["pairs"] == 0:
        raise NmtError("no training pair survived cleaning", "check that the files are aligned and not empty")

    # Plain-text copies of every valid/test line (uncleaned): the references `nmt score` compares against.
    for split in ("valid", "test"):
        if split in paths:
            for lang, path in zip((src, tgt), paths[split]):
                atomic_copy(path, out_dir / f"{split}.{lang}")
                counts.setdefault(split, {})["lines"] = lines[split]

    files = sorted(p.name for p in out_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    manifest = {
        "format": "nmt-data",
        "format_version": 1,
        "name": name,
        "source_lang": src,
        "target_lang": tgt,
        "vocab_size": sp.get_piece_size(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.time() - started, 1),
        "inputs": {split: [str(p.resolve()) for p in pair] for split, pair in paths.items()},
        "settings": asdict(settings),
        "splits": counts,
        "files": {f: sha256(out_dir / f) for f in files if f != MANIFEST},
        "versions": versions(),
    }
    atomic_write_json(out_dir / MANIFEST, manifest)
    return manifest


def read_manifest(data_dir: Path) -> dict[str, Any]:
    import json

    path = Path(data_dir) / MANIFEST
    if not path.is_file():
        raise NmtError(f"{data_dir} is not a prepared data dir (no {MANIFEST})", "run `nmt prepare` first")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise NmtError(f"{path} is corrupt: {e}", "run `nmt prepare` again") from None


def reference_lines(data_dir: Path, split: str, lang: str) -> list[str]:
    path = Path(data_dir) / f"{split}.{lang}"
    if not path.is_file():
        raise NmtError(f"{data_dir} has no {split} split ({path.name})", f"prepare it with --{split} PREFIX")
    return list(read_lines(path))
