"""Writes that matter, done so that a crash or a full disk never leaves half a file or half a dir.

A file is written to a temporary name beside its place and renamed over it (`atomic_path`); a
directory is built whole beside its place and then moved in (`staged_dir`). A rename within one
file system is atomic, so readers see the old version or the new one, never a mixture. This module
knows nothing of models, data or torch: data, training, the Hub and exports all write through it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nmtcli import faults
from nmtcli.errors import FileSystemError, NmtError, file_system_error

_UMASK = os.umask(0)
os.umask(_UMASK)


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it replaces `path` in one rename."""
    path = Path(path)
    with file_system_errors(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    try:
        with file_system_errors(path):
            yield Path(tmp)
            os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; the final file gets the usual permissions
            os.replace(tmp, path)
        faults.point("renamed")
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def file_system_errors(path: Path) -> Iterator[None]:
    """Turn a full disk, a read-only file system, a permission ... while writing `path` into one NmtError line."""
    try:
        yield
    except NmtError:
        raise
    except Exception as e:
        intact = f"the previous {Path(path).name} is unchanged" if Path(path).exists() else "nothing was written"
        error = file_system_error(e, path, intact=intact)
        if error is None:
            raise
        raise error from e


@contextlib.contextmanager
def staged_dir(out_dir: Path, last: str | None = None, stage_name: str | None = None) -> Iterator[Path]:
    """Build a directory beside `out_dir`, then move it into place: yields the empty stage to write into.

    Every byte is written (and flushed to disk) before `out_dir` is touched, so a full disk or a crash
    while writing leaves the previous `out_dir` exactly as it was. Then:
    - `last` given (a model dir): the stage's files replace those of `out_dir` one rename each and
      files of `out_dir` the stage does not have stay (scores.json, a user's notes). The previous
      `last` goes first and the new one comes last, so a crash among the renames leaves a dir that
      nothing loads, never new weights under an old config.json: running the command again completes it.
    - `last` None (a checkpoint, an export): the stage replaces `out_dir` whole, in one rename when
      there is no previous one.
    `stage_name` fixes the stage's name (a caller that cleans up stages left by a crash globs for it);
    by default it is a fresh hidden name beside `out_dir`.
    """
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NmtError(f"{out_dir} exists and is not a directory", "pass another output dir")
    with file_system_errors(out_dir):
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        if stage_name is None:
            stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
        else:
            stage = out_dir.parent / stage_name
            shutil.rmtree(stage, ignore_errors=True)
            stage.mkdir()
    try:
        try:
            yield stage
            for name in os.listdir(stage):
                with file_system_errors(stage / name), open(stage / name, "rb") as f:
                    os.fsync(f.fileno())
        except FileSystemError as e:  # name the file the user asked for, not the hidden one
            target = out_dir / Path(e.path).name if e.path is not None else out_dir
            intact = f"{out_dir}/ is unchanged" if out_dir.is_dir() else "nothing was written"
            raise (file_system_error(e.__cause__, target, intact=intact) or e) from e.__cause__
        with file_system_errors(out_dir):
            if last is None:
                if out_dir.exists():
                    shutil.rmtree(out_dir)
                os.rename(stage, out_dir)
                faults.point("renamed")
                return
            out_dir.mkdir(exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(out_dir / last)
            for name in sorted((p.name for p in stage.iterdir()), key=lambda n: n == last):
                os.replace(stage / name, out_dir / name)
                faults.point("renamed")
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: Path, value: Any) -> None:
    atomic_write_text(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def atomic_copy(src: Path, dst: Path) -> None:
    with atomic_path(dst) as tmp:
        shutil.copyfile(src, tmp)


def read_json(path: Path, missing: tuple[str, str], corrupt_hint: str) -> Any:
    """A JSON file nmt wrote. `missing` is the (message, hint) of the error when it does not exist."""
    path = Path(path)
    if not path.is_file():
        raise NmtError(*missing)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise NmtError(f"{path} is corrupt: {e}", corrupt_hint) from None
