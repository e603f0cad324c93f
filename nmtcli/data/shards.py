"""Binarized token arrays: `<split>.<lang>.bin` holds every sentence's ids back to back, `.idx` the offsets.

Both are plain little-endian arrays read through `numpy.memmap`, so a 4.5M-sentence corpus costs
no memory until a batch touches it. The id width (uint16 or uint32) follows from the vocabulary size.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from nmtcli.files import atomic_path

OFFSET_DTYPE = np.dtype("<i8")


def token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype("<u2") if vocab_size <= 1 << 16 else np.dtype("<u4")


class ShardWriter:
    """Append tokenized sentences; `close()` renames both files into place (atomically, offsets last)."""

    def __init__(self, prefix: Path, vocab_size: int):
        self.prefix = Path(prefix)
        self.dtype = token_dtype(vocab_size)
        self._bin_ctx = atomic_path(self.prefix.with_suffix(self.prefix.suffix + ".bin"))
        self._bin_tmp = self._bin_ctx.__enter__()
        self._file = open(self._bin_tmp, "wb")
        self._offsets = [0]

    def add(self, sentences: Iterable[Sequence[int]]) -> None:
        for ids in sentences:
            array = np.asarray(ids, dtype=self.dtype)
            self._file.write(array.tobytes())
            self._offsets.append(self._offsets[-1] + len(array))

    def close(self) -> int:
        self._file.close()
        self._bin_ctx.__exit__(None, None, None)
        with atomic_path(self.prefix.with_suffix(self.prefix.suffix + ".idx")) as tmp:
            np.asarray(self._offsets, dtype=OFFSET_DTYPE).tofile(tmp)
        return len(self._offsets) - 1

    def abort(self) -> None:
        self._file.close()
        self._bin_ctx.__exit__(RuntimeError, RuntimeError("aborted"), None)


class Shard:
    """Read-only view of one binarized file: `len(shard)`, `shard[i]` (np array), `shard.lengths`."""

    def __init__(self, prefix: Path, vocab_size: int):
        prefix = Path(prefix)
        self.offsets = np.fromfile(prefix.with_suffix(prefix.suffix + ".idx"), dtype=OFFSET_DTYPE)
        bin_path = prefix.with_suffix(prefix.suffix + ".bin")
        dtype = token_dtype(vocab_size)
        if bin_path.stat().st_size != self.offsets[-1] * dtype.itemsize:
            raise ValueError(f"{bin_path} does not match its offsets (truncated?)")
        self.tokens = np.memmap(bin_path, dtype=dtype, mode="r") if self.offsets[-1] else np.zeros(0, dtype)
        self.lengths = np.diff(self.offsets)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i] : self.offsets[i + 1]]
