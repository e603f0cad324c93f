"""Downloading corpus files from the Hugging Face Hub: cached, resumable, pinned, checked.

`huggingface_hub.hf_hub_download` does the transfer, so the standard variables work exactly as
they do for every Hub library: `HF_ENDPOINT` (another Hub, or a loopback server in the tests),
`HF_HOME` / `HF_HUB_CACHE` (where the cache lives), `HF_HUB_OFFLINE=1` (use the cache, never the
network), `HF_TOKEN`. Finished files stay in the cache, so an interrupted `prepare` downloads only
what it had not finished. Within one run, a dropped connection is resumed by huggingface_hub with an
HTTP Range request; a file whose run was killed starts over, because huggingface_hub (since 2.x)
writes each transfer to a process-unique `blobs/<etag>.<random>.incomplete` that no later process
reuses. Such leftovers of killed runs are removed here once they are an hour old (a live transfer
keeps its file's modification time current).

What the Hub library does not do is check what it got: a truncated or corrupted blob in the cache
is served as if it were whole. So every file is checked after the call: its size and sha256
against the recipe where the recipe knows them, otherwise its sha256 against the ETag (for files
stored with Git LFS, as all parquet files on the Hub are, the ETag is the sha256 of the content),
and, for parquet, that its footer reads and its row count matches. A file that fails is deleted
from the cache and fetched once more; failing twice is an error.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from nmtcli.checksums import file_sha256
from nmtcli.errors import NmtError

Progress = Callable[[str, int, "int | None"], None]
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class HubFile:
    """A file of a Hub repository, with what is known about it at the recipe's pinned revision."""

    path: str
    sha256: str | None = None
    size: int | None = None
    rows: int | None = None  # parquet rows


def _progress_class(progress: Progress, task: str) -> type:
    """A tqdm stand-in for `hf_hub_download(tqdm_class=...)` that reports bytes to our callback."""

    class Bar:
        def __init__(self, *args, total: int | None = None, initial: int = 0, **kwargs):
            self.total, self.n = total, initial or 0
            progress(task, self.n, self.total)

        def update(self, n: int = 1) -> None:
            self.n += n
            progress(task, self.n, self.total)

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.close()

        def close(self) -> None:
            pass

        def refresh(self, *args, **kwargs) -> None:
            pass

        def set_description(self, *args, **kwargs) -> None:
            pass

    return Bar


def _problem(local: Path, expected: HubFile, digest: str) -> str | None:
    """What is wrong with a downloaded file, or None. Checks size, sha256, and parquet footer/rows."""
    size = local.stat().st_size
    if expected.size is not None and size != expected.size:
        return f"{size:,} bytes, expected {expected.size:,}"
    # The cache names each blob by its ETag (where the file system has symlinks; otherwise the
    # snapshot holds the file itself and only the recipe's sha256 can be checked).
    etag = Path(os.path.realpath(local)).name
    want = expected.sha256 or (etag if _SHA256.match(etag) else None)
    if want is not None and digest != want:
        return f"sha256 differs from {want[:12]}..."
    if local.name.endswith(".parquet"):
        import pyarrow.parquet as pq

        try:
            rows = pq.ParquetFile(local).metadata.num_rows
        except Exception as e:  # noqa: BLE001 - pyarrow raises several types for a bad footer
            return f"not a readable parquet file ({e})"
        if expected.rows is not None and rows != expected.rows:
            return f"{rows:,} rows, expected {expected.rows:,}"
    return None


STALE_PARTIAL_SECONDS = 3600


def _remove_stale_partials(local: Path) -> None:
    """Delete `<etag>.*.incomplete` files of this blob left by killed runs (not touched for an hour)."""
    import time

    blob = Path(os.path.realpath(local))
    for partial in blob.parent.glob(f"{blob.name}.*.incomplete"):
        try:
            if time.time() - partial.stat().st_mtime > STALE_PARTIAL_SECONDS:
                partial.unlink()
        except FileNotFoundError:
            pass


def _evict(local: Path) -> None:
    """Remove a bad file from the cache (the blob and the snapshot link to it) so it is fetched anew."""
    blob = Path(os.path.realpath(local))
    for path in {blob, Path(local)}:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _hub_error(e: Exception, repo: str, what: str) -> NmtError:
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        EntryNotFoundError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(e, (OfflineModeIsEnabled, LocalEntryNotFoundError)):
        if constants.HF_HUB_OFFLINE:
            return NmtError(f"{repo}: {what} is not in the Hub cache and HF_HUB_OFFLINE is set", "run once without HF_HUB_OFFLINE to download it")
        return NmtError(f"cannot download {repo}: {what}: {constants.ENDPOINT} cannot be reached and the file is not in the Hub cache", "check the network connection and HF_ENDPOINT, then run again: finished files are kept")
    if isinstance(e, RevisionNotFoundError):
        return NmtError(f"{repo} has no revision {what}", "pass an existing branch, tag or commit with --revision")
    if isinstance(e, RepositoryNotFoundError):
        return NmtError(f"dataset {repo} not found on {constants.ENDPOINT}", "check HF_ENDPOINT and that you have access (HF_TOKEN)")
    if isinstance(e, ValueError) and "Invalid filename" in str(e):  # "../x" or "/x": huggingface_hub refuses it
        return NmtError(f"{repo} has a file whose name points outside the download folder ({what})",
                        "nothing was written outside the Hub cache; do not use this dataset repo, and tell its owner")
    if isinstance(e, EntryNotFoundError):
        return NmtError(f"{repo} has no file {what}", "the dataset's layout changed; pin the recipe's revision with --revision")
    return NmtError(f"downloading {repo}: {what} failed: {e}", "run again to resume; finished files are kept")


def resolve_files(repo: str, revision: str, pattern: str) -> list[HubFile]:
    """The files of `repo` at `revision` matching a glob (sorted): from the Hub, or the cache when offline."""
    from huggingface_hub import HfApi, constants, snapshot_download

    try:
        if constants.HF_HUB_OFFLINE:
            root = Path(snapshot_download(repo, repo_type="dataset", revision=revision, allow_patterns=[pattern]))
            names = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink()]
        else:
            names = HfApi().list_repo_files(repo, repo_type="dataset", revision=revision)
    except Exception as e:  # noqa: BLE001 - translated into one user-facing line
        raise _hub_error(e, repo, revision) from None
    matched = sorted(n for n in names if fnmatch.fnmatchcase(n, pattern))
    if not matched:
        raise NmtError(f"{repo} at {revision} has no files matching {pattern}", "the dataset's layout changed; pin a revision with --revision")
    return [HubFile(n) for n in matched]


def download(repo: str, files: Sequence[HubFile], revision: str, progress: Progress) -> tuple[list[Path], str, list[str]]:
    """Fetch (or find in the cache) each file of a dataset repo; returns local paths, the commit hash
    and the files' sha256 digests.

    Every file is checked (see the module docstring); a bad one is fetched once more.
    """
    from huggingface_hub import hf_hub_download

    paths, commits, digests = [], set(), []
    for spec in files:
        task = f"downloading {spec.path}"
        for attempt in (1, 2):
            try:
                local = Path(
                    hf_hub_download(
                        repo, spec.path, repo_type="dataset", revision=revision,
                        force_download=attempt > 1, tqdm_class=_progress_class(progress, task),
                    )
                )
            except Exception as e:  # noqa: BLE001 - translated into one user-facing line
                raise _hub_error(e, repo, spec.path if not isinstance(e, _revision_errors()) else revision) from None
            digest = file_sha256(local, progress, f"checking {spec.path}")
            problem = _problem(local, spec, digest)
            if problem is None:
                break
            _evict(local)
            if attempt == 2:
                raise NmtError(
                    f"{repo}: {spec.path} is corrupt even after downloading it again ({problem})",
                    "the server sends a different file than the recipe expects; try later, or pin another --revision",
                )
        _remove_stale_partials(local)
        # The cache keeps files under snapshots/<commit>/<path>: the commit is what was downloaded.
        commits.add(local.parents[len(Path(spec.path).parts) - 1].name)
        paths.append(local)
        digests.append(digest)
    if len(commits) > 1:
        raise NmtError(f"{repo}: files come from different commits {sorted(commits)}", "the dataset changed during the download; run again")
    return paths, commits.pop(), digests


def _revision_errors() -> tuple[type, ...]:
    from huggingface_hub.errors import RevisionNotFoundError

    return (RevisionNotFoundError,)
