"""The one exception type for mistakes a user can make (bad paths, bad files, bad flags).

The CLI prints it as `nmt: error: <what happened> (<what to do>)` and exits non-zero without a
traceback. Anything else that escapes is a bug and keeps its traceback. This module imports
nothing from the project, so every package may raise it.

The machine can fail a command too: a full disk, a read-only file system, a permission. Those
arrive as OSErrors (or as another library's error that quotes one); `file_system_error` turns them
into an NmtError that names the file and says what to do. docs/errors.md lists every such message.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path


class NmtError(Exception):
    """A user-facing error: `message` says what happened, `hint` what to do about it."""

    def __init__(self, message: str, hint: str | None = None, exit_code: int = 1):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class NotAvailable(NmtError, NotImplementedError):
    """Something asked for that nmt does not do (yet, or with the engine chosen): an NmtError, and a
    NotImplementedError for code that catches those."""


class FileSystemError(NmtError):
    """The machine refused a read or write of `path` (`errno` says why); not a bug in nmt."""

    def __init__(self, message: str, hint: str, path: Path | str | None, code: int):
        super().__init__(message, hint)
        self.path = path
        self.errno = code


# What happened, and what to do. EFBIG is a file over the file system's or `ulimit -f`'s size limit:
# for the user it is the same as a full disk.
_NO_SPACE = {errno.ENOSPC: ("no space left on device", "free some space and run again"),
             errno.EDQUOT: ("disk quota exceeded", "free some space and run again"),
             errno.EFBIG: ("no space left: the file size limit of the file system or of `ulimit -f` is reached",
                           "raise the limit or write to another file system, and run again")}
_REFUSED = {errno.EACCES: "permission denied", errno.EPERM: "operation not permitted", errno.EROFS: "read-only file system"}
_PATHS = {errno.ENOENT: ("no such file or directory", "check the path"),
          errno.ENOTDIR: ("a part of the path is a file, not a directory", "check the path"),
          errno.EISDIR: ("is a directory, not a file", "pass a file"),
          errno.EEXIST: ("exists and is not a directory", "pass another path")}


def os_errno(e: BaseException | None) -> int | None:
    """The errno of an OSError, or of the one behind another library's error: quoted in its message
    (safetensors: "... (os error 28)") or raised while it ran (torch.save into a Python file)."""
    for _ in range(4):
        if e is None:
            return None
        if isinstance(e, OSError) and e.errno:
            return e.errno
        found = re.search(r"\(os error (\d+)\)", str(e))
        if found:
            return int(found.group(1))
        e = e.__cause__ or e.__context__
    return None


def file_system_error(e: BaseException, path: Path | str | None = None, doing: str = "writing",
                      intact: str | None = None) -> FileSystemError | None:
    """The one-line error for an OSError the machine caused, or None when `e` is not one (then it is a bug).

    `path` is the file the user knows (default: the one the OSError names); `intact` says what the
    failure left unharmed, e.g. "the previous file is unchanged".
    """
    code = os_errno(e)
    if code is None:
        return None
    path = path if path is not None else getattr(e, "filename", None)
    where = f" {doing} {path}" if path is not None else ""
    after = f"; {intact}" if intact else ""
    if code in _NO_SPACE:
        what, hint = _NO_SPACE[code]
        if code == errno.EFBIG and path is not None:
            what = f"no space left{where}: the file size limit of the file system or of `ulimit -f` is reached"
            where = ""
        return FileSystemError(f"{what}{where}", hint + after, path, code)
    if code in _REFUSED:
        hint = "write somewhere else, e.g. with -o" if code == errno.EROFS else "check the permissions, or write somewhere else"
        return FileSystemError(f"{_REFUSED[code]}{where}", hint + after, path, code)
    # For these, name the part of the path that is wrong: a parent dir the OSError names, else the file.
    named = getattr(e, "filename", None)
    culprit = named if named is not None and (path is None or Path(str(named)) in (Path(str(path)), *Path(str(path)).parents)) else path
    if code in _PATHS and culprit is not None:
        what, hint = _PATHS[code]
        return FileSystemError(f"{culprit}: {what}", hint + after, path, code)
    return None


def check_readable(path: Path | str, hint: str) -> None:
    """Refuse a path that is missing, a directory, or unreadable, before a command starts its work."""
    path = Path(path)
    if not path.exists():
        raise NmtError(f"{path} does not exist", hint)
    if path.is_dir():
        raise NmtError(f"{path} is a directory, not a file", hint)
    if not os.access(path, os.R_OK):
        raise NmtError(f"{path} cannot be read: permission denied", "check the file's permissions")
