"""Encoding sentences into token arrays on every core: sentencepiece in a pool of worker processes.

Kept apart from prepare.py so that the workers import only numpy and sentencepiece (not torch):
they start in a fraction of a second and cost little memory. Each worker loads the model once and
turns a slice of sentences into one flat token array plus the sentences' lengths; only numpy arrays
travel back. The result does not depend on the number of workers or how the sentences are sliced.

A model imported from OPUS-MT (`nmt prepare --vocab-from`) splits each side with its own
sentencepiece model and maps the pieces to ids through its joint `vocab.json`, exactly as
MarianTokenizer does (`marian_ids`, which the translator's tokenizer calls too). A multilingual model
(M2M-100, NLLB-200) maps one sentencepiece model's pieces through its `vocab.json` likewise, and each side
starts with its language's tag (PieceMap.tags), as M2M100Tokenizer and NllbTokenizer encode a pair.
"""

from __future__ import annotations

import itertools
import multiprocessing
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import sentencepiece as spm

from nmtcli.threads import exit_with_parent, usable_cpus

# Multilingual OPUS-MT models select the output language with a leading token such as ">>fra<<";
# it is a vocabulary entry of its own and must not go through sentencepiece.
LANGUAGE_CODE = re.compile(r"^\s*(>>[^<>\s]+<<)\s*")


def marian_ids(sp: spm.SentencePieceProcessor, piece_ids: dict[str, int], unk_id: int, text: str) -> list[int]:
    """MarianTokenizer's ids of `text` (without EOS): a leading language code as itself, then the
    sentencepiece pieces through `vocab.json`, a piece it lacks as the unknown id."""
    ids = []
    code = LANGUAGE_CODE.match(text)
    if code:
        ids.append(piece_ids.get(code.group(1), unk_id))
        text = text[code.end() :]
    ids.extend(piece_ids.get(p, unk_id) for p in sp.encode(text, out_type=str))
    return ids


@dataclass(frozen=True)
class PieceMap:
    """Marian's layout: pieces -> ids through `vocab.json` (see vocabulary.read_piece_ids)."""

    vocab: str  # path of vocab.json
    unk_id: int
    tags: tuple[int, int] | None = None  # a multilingual model's: the source and the target language's tag ids


class _Model:
    """One side's sentencepiece model, with or without Marian's piece -> id map (and a multilingual model's tag)."""

    def __init__(self, model_path: str, pieces: PieceMap | None, side: str = "source"):
        self.sp = spm.SentencePieceProcessor(model_file=model_path)
        self.unk_id = pieces.unk_id if pieces else 0
        self.tag = pieces.tags[side == "target"] if pieces is not None and pieces.tags else None
        if pieces is not None:
            from nmtcli.data.vocabulary import read_piece_ids

            self.piece_ids: dict[str, int] | None = read_piece_ids(Path(pieces.vocab))
        else:
            self.piece_ids = None

    @property
    def unknown_id(self) -> int:
        """The id of text this vocabulary cannot write (nmt's own sentencepiece falls back to bytes: never)."""
        return self.unk_id if self.piece_ids is not None else self.sp.unk_id()

    def encode(self, sentences: list[str]) -> list[list[int]]:
        if self.piece_ids is None:
            return self.sp.encode(sentences)
        if self.tag is not None:  # no ">>fra<<" codes: the language is the tag's
            get, unk = self.piece_ids.get, self.unk_id
            return [[self.tag, *(get(p, unk) for p in pieces)] for pieces in self.sp.encode(sentences, out_type=str)]
        return [marian_ids(self.sp, self.piece_ids, self.unk_id, s) for s in sentences]


_models: dict[str, _Model] = {}


def _load(model_paths: dict[str, str], pieces: PieceMap | None) -> None:
    _models.update({side: _Model(path, pieces, side) for side, path in model_paths.items()})
    exit_with_parent()


def encode_flat(sp: spm.SentencePieceProcessor | _Model, sentences: Sequence[str], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(all ids back to back, the length of each sentence)."""
    ids = sp.encode(list(sentences))
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    return flat, lengths


def _work(sentences: list[str], dtype: str, side: str) -> tuple[np.ndarray, np.ndarray]:
    return encode_flat(_models[side], sentences, dtype)


class Encoder:
    """`encode(sentences, side) -> (flat ids, lengths)`, in this process (workers=1) or in a process pool.

    One sentencepiece model for both sides (nmt's joint vocabulary), or with `target_model` one per
    side, whose pieces `pieces` maps to the model's ids (Marian's).
    """

    def __init__(self, model_path: str, dtype: np.dtype, workers: int = 0, target_model: str | None = None,
                 pieces: PieceMap | None = None):
        self.dtype = np.dtype(dtype).str
        self.workers = workers or usable_cpus()
        paths = {"source": str(model_path), "target": str(target_model or model_path)}
        self._local = {side: _Model(path, pieces, side) for side, path in paths.items()}
        self._pool = None
        if self.workers > 1:
            # spawn: a clean interpreter per worker, safe whatever threads the caller runs (progress bars).
            self._pool = ProcessPoolExecutor(self.workers, multiprocessing.get_context("spawn"), initializer=_load, initargs=(paths, pieces))

    def encode(self, sentences: Sequence[str], side: str = "source") -> tuple[np.ndarray, np.ndarray]:
        if self._pool is None or len(sentences) < 2_000:
            return encode_flat(self._local[side], sentences, self.dtype)
        step = -(-len(sentences) // (2 * self.workers))  # two slices per worker evens out the load
        slices = [list(sentences[i : i + step]) for i in range(0, len(sentences), step)]
        results = list(self._pool.map(_work, slices, [self.dtype] * len(slices), [side] * len(slices)))
        return np.concatenate([r[0] for r in results]), np.concatenate([r[1] for r in results])

    def unknown(self, sentences: Iterable[str], tokens: np.ndarray, lengths: np.ndarray, side: str,
                sample: int = 100) -> tuple[int, str]:
        """(how many of `sentences` encode to the unknown id somewhere, the characters of the first `sample` of them
        that the vocabulary lacks: each alone encodes to it). tokens, lengths: `encode`'s for the sentences, which are
        read only where the unknown id is among the tokens (nmt's own vocabularies fall back to bytes: never)."""
        model = self._local[side]
        if not (tokens == model.unknown_id).any():
            return 0, ""
        starts = (np.cumsum(lengths) - lengths)[lengths > 0]
        hits = np.add.reduceat((tokens == model.unknown_id).astype(np.int64), starts) if len(starts) else []
        flagged = [s for s, n in zip((s for s, k in zip(sentences, lengths) if k > 0), hits) if n]
        characters = sorted({c for s in flagged[:sample] for c in s if not c.isspace()})
        lacking = [c for c, ids in zip(characters, model.encode(characters)) if model.unknown_id in ids]
        return len(flagged), "".join(lacking)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def __enter__(self) -> Encoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
