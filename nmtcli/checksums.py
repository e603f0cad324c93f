"""Checksums of files, read in 1 MiB pieces so that multi-gigabyte weights and corpora never sit in memory.

One reader serves every command that hashes a file: `nmt prepare` (the manifest, downloads),
`nmt average` (the vocabulary check) and `nmt info` (sha256, and the git blob id the Hub lists for a
file not in LFS). It imports nothing from the project.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

CHUNK = 1 << 20
# progress(label, bytes hashed so far, file size); the label is the file's name unless one is given.
Progress = Callable[[str, int, int], None]


def file_digests(path: Path, progress: Progress | None = None, git_blob: bool = False, label: str | None = None) -> dict[str, str]:
    """{"sha256": ...} of a file's bytes, and with `git_blob` its git blob id too ("blob_id"), in one pass.

    The git blob id is sha1(b"blob <size>\\0" + content): what the Hub (as git) lists for a file not in LFS.
    """
    path = Path(path)
    size = path.stat().st_size
    label = path.name if label is None else label
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(b"blob %d\0" % size) if git_blob else None
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha256.update(chunk)
            if sha1 is not None:
                sha1.update(chunk)
            done += len(chunk)
            if progress:
                progress(label, done, size)
    digests = {"sha256": sha256.hexdigest()}
    if sha1 is not None:
        digests["blob_id"] = sha1.hexdigest()
    return digests


def file_sha256(path: Path, progress: Progress | None = None, label: str | None = None) -> str:
    return file_digests(path, progress, label=label)["sha256"]
