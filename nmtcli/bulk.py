"""A large file translated in chunks: each chunk written whole as it finishes, a killed run resumed, ranks sharing the work.

`nmt translate -i FILE -o OUT` (and `nmt distill`'s teacher, and the forced scores of a filter) read FILE as chunks
of `chunk_lines` lines. Each chunk's output lines go to OUT.parts/NNNNNN.txt by one rename, then its record
(lines, bytes, sha256) to NNNNNN.json: a chunk is done when both are there and agree, so a chunk cut short by a
kill or a full disk is never taken as done, and a run started again translates only what is missing. When every
chunk is done, rank 0 checks each against its record and joins them, in order, into OUT (one rename), and
OUT.parts goes. OUT.parts/job.json says what is being translated (the input files' sizes and sha256, the chunk
size and the settings): a run with other input or other settings refuses to mix its lines into it.

Ranks (torchrun's RANK and WORLD_SIZE: `nmt translate --gpus N`, or several nodes that share a file system) take
the chunks k with k % WORLD_SIZE == RANK, so they need no messages: rank 0 waits on the file system for the others'
chunks. Any number of ranks writes the same bytes as one process, and a run may resume with another number.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmtcli import faults
from nmtcli.errors import FileSystemError, NmtError, file_system_error
from nmtcli.files import atomic_path, file_system_errors

PARTS = ".parts"  # OUT's chunks are built in OUT.parts/
JOB = "job.json"
LOCK = "lock"  # held by rank 0 while a job runs: a second command writing the same OUT is refused
CHUNK_LINES = 5_000  # a kill loses at most one chunk per rank: ~2 min of a tiny model on one CPU thread
POLL_S = 1.0  # rank 0 looks for the other ranks' chunks this often


@dataclass(frozen=True)
class Chunk:
    index: int
    first: int  # the number of its first line, from 1
    lines: int
    offsets: tuple[int, ...]  # where it starts in each input file, in bytes


@dataclass
class Outcome:
    """What a run did: lines in all, lines this run translated (every rank's), the output's sha256."""

    lines: int
    translated: int
    sha256: str


def parts_dir(output: Path) -> Path:
    return output.with_name(output.name + PARTS)


def drop_other_attempt(parts: Path, record: Path, name: str, attempt: Any) -> bool:
    """Before a command's translation `name` runs into `parts` (its -o's chunks): the chunks a run cut short left there
    are kept when `record` (JSON: each translation's last attempt, by name) says they are of this very `attempt` (the
    same command: it resumes from them), deleted when not; `record` then names this attempt. Returns whether chunks
    were deleted. A command that owns the chunks (nmt distill, nmt prepare's back-translation) calls it, where a user's
    `nmt translate -o` refuses another job's chunks instead."""
    try:
        tried = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        tried = {}
    tried = tried if isinstance(tried, dict) else {}
    dropped = parts.is_dir() and tried.get(name) != attempt
    if dropped:
        shutil.rmtree(parts)
    with atomic_path(record) as tmp:
        tmp.write_text(json.dumps({**tried, name: attempt}, indent=2) + "\n", encoding="utf-8")
    return dropped


def chunks_done(output: Path) -> int:
    """The chunks of OUT that a run cut short left done in OUT.parts/ (a record, and its text of the recorded size, as
    Job.is_done reads them): what the next run of the same job resumes from, and does not translate again. 0 for an
    OUT finished (its parts are gone) or never started."""
    parts = parts_dir(Path(output))
    done = 0
    for record in parts.glob("[0-9]*.json") if parts.is_dir() else ():
        try:
            size = json.loads(record.read_text(encoding="utf-8")).get("bytes")
            done += record.with_suffix(".txt").stat().st_size == size
        except (OSError, ValueError, AttributeError):
            continue
    return done


def index(paths: Sequence[Path], chunk_lines: int) -> tuple[list[Chunk], list[dict[str, Any]]]:
    """Each input file read once: the chunks (every file's byte offset at each chunk's first line) and each file's
    size and sha256. The files must have as many lines as the first (a target, prefix or reference file beside it)."""
    counts, digests, starts = [], [], []
    for path in paths:
        digest, lines, offset, offsets = hashlib.sha256(), 0, 0, []
        with file_system_errors(path), open(path, "rb") as f:
            for line in f:
                if lines % chunk_lines == 0:
                    offsets.append(offset)
                lines += 1
                offset += len(line)
                digest.update(line)
        counts.append(lines)
        digests.append({"path": str(Path(path).resolve()), "bytes": offset, "sha256": digest.hexdigest()})
        starts.append(offsets)
    for path, count in zip(paths[1:], counts[1:]):
        if count != counts[0]:
            raise NmtError(f"{path} has {count:,} line(s) but {paths[0]} has {counts[0]:,}",
                           "give exactly one line beside each input line", exit_code=2)
    total = counts[0]
    chunks = [Chunk(k, k * chunk_lines + 1, min(chunk_lines, total - k * chunk_lines), tuple(s[k] for s in starts))
              for k in range(len(starts[0]))]
    return chunks, digests


class Job:
    """One translation of input files into `output`, in chunks; `what` names everything that decides its lines
    (the model, the search settings), so that a resumed run is the same translation."""

    def __init__(self, inputs: Sequence[Path], output: Path, what: dict[str, Any], chunk_lines: int = CHUNK_LINES,
                 rank: int = 0, world_size: int = 1):
        if chunk_lines < 1:
            raise NmtError(f"chunk lines must be at least 1, not {chunk_lines}", exit_code=2)
        self.inputs, self.output, self.rank, self.world_size = [Path(p) for p in inputs], Path(output), rank, world_size
        self.parts = parts_dir(self.output)
        self.chunks, files = index(self.inputs, chunk_lines)
        self.lines = sum(c.lines for c in self.chunks)
        self.description = {"inputs": files, "lines": self.lines, "chunk_lines": chunk_lines, "what": what}
        self._begin()
        self.done_before = self._done_lines()  # lines of the chunks an earlier run left done

    def _begin(self) -> None:
        """Start OUT.parts/ (rank 0, which holds its lock while the job runs), or join the one there if it holds
        this very job."""
        job = self.parts / JOB
        if self.rank == 0:
            with self._writing():
                self.parts.mkdir(parents=True, exist_ok=True)
            self._lock = locked(self.parts / LOCK, self.output)
            holds_chunks = any(p.name[:1].isdigit() for p in self.parts.iterdir())
            if not job.exists() and holds_chunks:
                raise NmtError(f"{self.parts} holds chunks but no {JOB} saying what they translate",
                               f"delete {self.parts} to start over", exit_code=2)
            if not holds_chunks and _read_job(job) != self.description:  # none of another translation done: this one starts
                with self._writing(job), atomic_path(job) as tmp:
                    tmp.write_text(json.dumps(self.description, indent=2) + "\n", encoding="utf-8")
        while not job.exists():  # another rank: rank 0 writes it first
            time.sleep(POLL_S / 10)
        if _read_job(job) != self.description:
            raise NmtError(f"{self.parts} holds the chunks of another translation (other input, model or settings)",
                           f"finish it with the command and input that started it, or delete {self.parts} to start over", exit_code=2)

    @contextlib.contextmanager
    def _writing(self, path: Path | None = None) -> Iterator[None]:
        """A write into OUT.parts/ that fails for want of space or rights: one line that says what is kept."""
        try:
            yield
        except (FileSystemError, OSError) as e:
            cause = e.__cause__ if isinstance(e, FileSystemError) else e
            intact = (f"the previous {self.output.name} is unchanged" if self.output.exists() else
                      f"the chunks done stay in {self.parts.name} and the same command resumes from them")
            error = file_system_error(cause, getattr(cause, "filename", None) or path or self.parts, intact=intact) if cause is not None else None
            if error is None:
                raise
            raise error from cause

    # --- the chunks ---------------------------------------------------------------------------------

    def _paths(self, chunk: Chunk) -> tuple[Path, Path]:
        return self.parts / f"{chunk.index:06d}.txt", self.parts / f"{chunk.index:06d}.json"

    def is_done(self, chunk: Chunk) -> bool:
        """Both files there, the record the chunk's and the text its size (the sha256 is checked when joining)."""
        text, record = self._paths(chunk)
        try:
            done = json.loads(record.read_text(encoding="utf-8"))
            return done.get("lines") == chunk.lines and done.get("first") == chunk.first and text.stat().st_size == done.get("bytes")
        except (OSError, ValueError, AttributeError):
            return False

    def _done_lines(self) -> int:
        return sum(c.lines for c in self.chunks if self.is_done(c))

    def mine(self) -> list[Chunk]:
        """This rank's chunks not yet done."""
        return [c for c in self.chunks if c.index % self.world_size == self.rank and not self.is_done(c)]

    def read(self, chunk: Chunk) -> list[list[bytes]]:
        """The chunk's lines of each input file, raw (each line without its LF)."""
        columns = []
        for path, offset in zip(self.inputs, chunk.offsets):
            with file_system_errors(path), open(path, "rb") as f:
                f.seek(offset)
                columns.append([f.readline().rstrip(b"\n") for _ in range(chunk.lines)])
        return columns

    def write(self, chunk: Chunk, lines: Iterable[str]) -> None:
        """The chunk's output lines written (exactly its line count, or a bug), then its record."""
        text, record = self._paths(chunk)
        digest, count, size = hashlib.sha256(), 0, 0
        with self._writing(text), atomic_path(text) as tmp, open(tmp, "wb") as f:
            for line in lines:
                data = (line + "\n").encode("utf-8")
                f.write(data)
                digest.update(data)
                count, size = count + 1, size + len(data)
            if count != chunk.lines:
                raise RuntimeError(f"chunk {chunk.index}: {count} lines out for {chunk.lines} in")
        with self._writing(record), atomic_path(record) as tmp:
            tmp.write_text(json.dumps({"first": chunk.first, "lines": count, "bytes": size, "sha256": digest.hexdigest()}),
                           encoding="utf-8")
        faults.point("chunk-written", chunk=chunk.index)

    # --- the run ------------------------------------------------------------------------------------

    def run(self, translate: Callable[[Chunk, list[list[bytes]]], Iterator[str]],
            progress: Callable[[int, int], None] | None = None) -> Outcome | None:
        """Translate this rank's missing chunks (`translate(chunk, columns)` gives its output lines, in order), then
        on rank 0 wait for the rest and join them into the output. `progress(done, total)` counts lines of every
        rank's done chunks and of this rank's chunk in flight. Returns rank 0's Outcome (None on the other ranks)."""
        finished = self.done_before
        for chunk in self.mine():
            def counted(lines: Iterator[str], base: int = finished) -> Iterator[str]:
                for n, line in enumerate(lines, start=1):
                    if progress is not None and (n % 16 == 0 or n == chunk.lines):
                        progress(base + n, self.lines)
                    yield line

            self.write(chunk, counted(translate(chunk, self.read(chunk))))
            finished = self._done_lines()  # the other ranks' too
            if progress is not None:
                progress(finished, self.lines)
        if self.rank != 0:
            return None
        while (missing := [c for c in self.chunks if not self.is_done(c)]):
            time.sleep(POLL_S)
            if progress is not None:
                progress(self.lines - sum(c.lines for c in missing), self.lines)
        return Outcome(self.lines, self.lines - self.done_before, self.join())

    def join(self) -> str:
        """Every chunk checked against its record and written, in order, into the output (one rename); the parts go.
        A chunk that fails its check is deleted, so that the next run translates it again."""
        digest = hashlib.sha256()
        with self._writing(self.output), atomic_path(self.output) as tmp, open(tmp, "wb") as out:
            for chunk in self.chunks:
                text, record = self._paths(chunk)
                data = text.read_bytes()
                expected = json.loads(record.read_text(encoding="utf-8"))
                if hashlib.sha256(data).hexdigest() != expected["sha256"] or data.count(b"\n") != chunk.lines:
                    for path in (record, text):
                        path.unlink(missing_ok=True)
                    raise NmtError(f"chunk {chunk.index} of {self.parts} is damaged (its sha256 is not the one recorded)",
                                   "run the same command again: it translates that chunk again")
                out.write(data)
                digest.update(data)
        shutil.rmtree(self.parts, ignore_errors=True)
        return digest.hexdigest()


def _read_job(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def locked(lock: Path, output: Path):
    """`lock` opened and locked for this process (released when closed, or when the process ends however it ends);
    held by another, the one-line error."""
    f = open(lock, "a")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise NmtError(f"another command is writing {output} ({lock.parent} is locked)",
                       "wait for it to finish, or write to another -o", exit_code=2) from None
    return f


def check_unlocked(output: Path) -> None:
    """Before `nmt translate` writes OUT in one piece: no chunked translation is writing it (OUT.parts locked)."""
    lock = parts_dir(Path(output)) / LOCK
    if lock.is_file():
        locked(lock, output).close()


def decode_line(raw: bytes, number: int, name: str, warn: Callable[[str], None] | None = None) -> str:
    """One line as `nmt translate` reads it (CRLF accepted, a BOM at the file's start dropped, invalid UTF-8 replaced
    and reported by the line's number in the file)."""
    raw = raw.rstrip(b"\n").rstrip(b"\r")
    if number == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise NmtError(f"{name} is UTF-16 (it starts with a UTF-16 byte order mark)",
                       "convert it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8", exit_code=2)
    if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        if warn is not None:
            warn(f"{name}, line {number}: invalid UTF-8 replaced with U+FFFD")
        return raw.decode("utf-8", errors="replace")


def decoded(raw: list[bytes], name: str, first: int, warn: Callable[[str], None] | None = None) -> list[str]:
    """A chunk's raw lines as text (decode_line), its first line numbered `first` in the file."""
    return [decode_line(line, number, name, warn) for number, line in enumerate(raw, start=first)]


def renumbered(warn: Callable[[str], None], first: Callable[[], int]) -> Callable[[str], None]:
    """A warning about "line N" of the chunk in flight (counted from 1 in it; `first()`: its first line's number in
    the file) said about line N of the file."""
    import re

    def chunk_warn(message: str) -> None:
        found = re.match(r"line (\d+)([:,])", message)
        if found:
            message = f"line {int(found[1]) + first() - 1}{found[2]}{message[found.end():]}"
        warn(message)

    return chunk_warn
