"""Encoding sentences into token arrays on every core: sentencepiece in a pool of worker processes.

Kept apart from prepare.py so that the workers import only numpy and sentencepiece (not torch):
they start in a fraction of a second and cost little memory. Each worker loads the model once and
turns a slice of sentences into one flat token array plus the sentences' lengths; only numpy arrays
travel back. The result does not depend on the number of workers or how the sentences are sliced.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import sentencepiece as spm

_model: spm.SentencePieceProcessor | None = None


def _load(model_path: str) -> None:
    global _model
    _model = spm.SentencePieceProcessor(model_file=model_path)


def encode_flat(sp: spm.SentencePieceProcessor, sentences: Sequence[str], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(all ids back to back, the length of each sentence)."""
    ids = sp.encode(list(sentences))
    lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=dtype, count=int(lengths.sum()))
    return flat, lengths


def _work(sentences: list[str], dtype: str) -> tuple[np.ndarray, np.ndarray]:
    assert _model is not None
    return encode_flat(_model, sentences, dtype)


class Encoder:
    """`encode(sentences) -> (flat ids, lengths)`, in this process (workers=1) or in a process pool."""

    def __init__(self, model_path: str, dtype: np.dtype, workers: int = 0):
        self.dtype = np.dtype(dtype).str
        self.workers = workers or os.cpu_count() or 1
        self._local = spm.SentencePieceProcessor(model_file=str(model_path))
        self._pool = None
        if self.workers > 1:
            # spawn: a clean interpreter per worker, safe whatever threads the caller runs (progress bars).
            self._pool = ProcessPoolExecutor(self.workers, multiprocessing.get_context("spawn"), initializer=_load, initargs=(str(model_path),))

    def encode(self, sentences: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        if self._pool is None or len(sentences) < 2_000:
            return encode_flat(self._local, sentences, self.dtype)
        step = -(-len(sentences) // (2 * self.workers))  # two slices per worker evens out the load
        slices = [list(sentences[i : i + step]) for i in range(0, len(sentences), step)]
        results = list(self._pool.map(_work, slices, [self.dtype] * len(slices)))
        return np.concatenate([r[0] for r in results]), np.concatenate([r[1] for r in results])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)

    def __enter__(self) -> Encoder:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
