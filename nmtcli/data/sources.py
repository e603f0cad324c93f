"""Where sentence pairs come from: aligned local files, Hub parquet files, the bundled demo corpus.

Each source streams its pairs in batches, every line in its original order, and says how many there
are without reading them (so progress bars have a total). `identity()` describes the exact input
for the stage fingerprints of `prepare.py`: when it changes, the stages that read it run again.
"""

from __future__ import annotations

import io
import itertools
import lzma
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from nmtcli.data.text import check_parallel, one_line, read_lines
from nmtcli.errors import NmtError

Pairs = list[tuple[str, str]]
BATCH = 10_000  # pairs per batch; bounds the memory of every streaming stage


@dataclass(frozen=True)
class TextFiles:
    """`PREFIX.<src>` / `PREFIX.<tgt>`: one sentence a line, aligned line by line."""

    src: Path
    tgt: Path

    def count(self) -> int:
        return check_parallel(self.src, self.tgt)

    def batches(self) -> Iterator[Pairs]:
        pairs = zip(read_lines(self.src), read_lines(self.tgt), strict=True)
        while batch := list(itertools.islice(pairs, BATCH)):
            yield batch

    def identity(self) -> dict[str, Any]:
        def stat(p: Path) -> dict[str, Any]:
            s = os.stat(p)
            return {"path": str(Path(p).resolve()), "bytes": s.st_size, "mtime_ns": s.st_mtime_ns}

        return {"kind": "files", "files": [stat(self.src), stat(self.tgt)]}

    def describe(self) -> list[str]:
        return [str(Path(self.src).resolve()), str(Path(self.tgt).resolve())]


@dataclass(frozen=True)
class ParquetFiles:
    """Parquet files with a `translation: struct<lang: string, ...>` column (the Hub's WMT layout).

    Read in record batches with pyarrow: one batch of strings in memory at a time, whatever the
    file size. `origin` says where the files came from (repo, revision, commit, file names).
    """

    paths: Sequence[Path]
    source_lang: str
    target_lang: str
    origin: dict[str, Any]
    column: str = "translation"

    def count(self) -> int:
        import pyarrow.parquet as pq

        return sum(pq.ParquetFile(p).metadata.num_rows for p in self.paths)

    def batches(self) -> Iterator[Pairs]:
        import pyarrow.parquet as pq

        for path in self.paths:
            file = pq.ParquetFile(path)
            struct = file.schema_arrow.field(self.column).type if self.column in file.schema_arrow.names else None
            names = {struct.field(i).name for i in range(struct.num_fields)} if struct is not None and hasattr(struct, "num_fields") else set()
            if not {self.source_lang, self.target_lang} <= names:
                raise NmtError(
                    f"{path} has no {self.column}.{self.source_lang} / {self.column}.{self.target_lang} columns",
                    "the recipe's files do not match its languages; report it, or pass local files with --train",
                )
            for batch in file.iter_batches(batch_size=BATCH, columns=[self.column]):
                translation = batch.column(0)
                src = translation.field(self.source_lang).to_pylist()
                tgt = translation.field(self.target_lang).to_pylist()
                # A missing side is an empty sentence: dropped by the cleaning, kept (empty) in references.
                yield [(one_line(s or ""), one_line(t or "")) for s, t in zip(src, tgt)]

    def identity(self) -> dict[str, Any]:
        return {"kind": "parquet", **self.origin, "languages": [self.source_lang, self.target_lang]}

    def describe(self) -> dict[str, Any]:
        return self.origin


@dataclass(frozen=True)
class BundledTsv:
    """One split of a corpus shipped inside the package: xz-compressed `split<TAB>en<TAB>de` lines."""

    resource: str
    split: str
    source_lang: str
    target_lang: str
    columns: tuple[str, str] = ("en", "de")

    def _lines(self) -> Iterator[tuple[str, str]]:
        src_col, tgt_col = self.columns.index(self.source_lang), self.columns.index(self.target_lang)
        data = resources.files("nmtcli.data").joinpath(self.resource).read_bytes()
        with io.TextIOWrapper(lzma.LZMAFile(io.BytesIO(data)), encoding="utf-8", newline="\n") as f:
            for line in f:
                split, *texts = line.rstrip("\n").split("\t")
                if split == self.split:
                    yield texts[src_col], texts[tgt_col]

    def count(self) -> int:
        return sum(1 for _ in self._lines())

    def batches(self) -> Iterator[Pairs]:
        pairs = self._lines()
        while batch := list(itertools.islice(pairs, BATCH)):
            yield batch

    def identity(self) -> dict[str, Any]:
        import hashlib

        data = resources.files("nmtcli.data").joinpath(self.resource).read_bytes()
        return {"kind": "bundled", "resource": self.resource, "split": self.split, "sha256": hashlib.sha256(data).hexdigest(),
                "languages": [self.source_lang, self.target_lang]}

    def describe(self) -> dict[str, Any]:
        return {"bundled": f"nmtcli/data/{self.resource}", "split": self.split}
