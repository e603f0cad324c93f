"""`nmt translate -i FILE -o OUT`: the file translated in chunks (nmtcli/bulk.py), resumed when run again, shared among
`--gpus N` ranks (torchrun) or the ranks of several nodes; the progress bar and the summary line."""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmtcli.cli.common import progress_bar, say, warn

if TYPE_CHECKING:
    from nmtcli.inference.translator import SearchSettings


def ranks() -> tuple[int, int, int, int]:
    """(rank, world size, local rank, ranks on this node) as torchrun set them; (0, 1, 0, 1) alone."""
    from nmtcli.training.distributed import from_environment

    here = from_environment()
    try:
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(here.world_size)))
    except ValueError:
        local_world = here.world_size
    return here.rank, here.world_size, here.local_rank, max(local_world, 1)


def launch(gpus: int, device: str) -> None:
    """--gpus N: this very command again as N ranks through torchrun, each translating its share of the chunks."""
    from nmtcli.cli.root import debug_enabled
    from nmtcli.training import distributed

    distributed.check_ranks(gpus, device)
    say(f"starting {gpus} ranks with torchrun")
    distributed.launch(gpus, _without_gpus(sys.argv[sys.argv.index("translate") + 1:]), debug=debug_enabled(), command="translate")


def _without_gpus(argv: list[str]) -> list[str]:
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--gpus":
            skip = True
        elif not arg.startswith("--gpus="):
            kept.append(arg)
    return kept


def rank_device(device: str, local_rank: int) -> str:
    """A rank's device: its own GPU (cuda:LOCAL_RANK) where --device is auto or cuda and there are GPUs, else --device."""
    import torch

    if device in ("auto", "cuda") and torch.cuda.is_available():
        return f"cuda:{local_rank}"
    return device


def rank_threads(threads: int | None, local_world: int) -> int | None:
    """On a CPU, the node's cores shared among its ranks (unless --threads says)."""
    if threads is not None or local_world == 1:
        return threads
    from nmtcli.threads import usable_cpus

    return max(1, usable_cpus() // local_world)


def translate_file(inputs: list[Path], output: Path, chunk_lines: int, what: dict[str, Any],
                   translate: Callable[[int, list[list[bytes]]], Iterator[str]], verb: str = "translated") -> None:
    """The job run on this rank: a progress bar (lines, lines/s, time left) on rank 0, a summary line at the end.
    `translate(first, columns)`: a chunk's output lines, its first line numbered `first` in the file."""
    from nmtcli.bulk import Job

    rank, world, _, _ = ranks()
    started = time.perf_counter()
    job = Job(inputs, output, what, chunk_lines, rank, world)
    if job.done_before and rank == 0:
        say(f"resuming {job.parts}: {job.done_before:,} of {job.lines:,} lines already {verb}")
    if rank == 0:
        with progress_bar(unit="lines") as bar:
            outcome = job.run(lambda chunk, columns: translate(chunk.first, columns), lambda done, total: bar(verb, done, total))
    else:
        outcome = job.run(lambda chunk, columns: translate(chunk.first, columns))
    if outcome is None:
        return
    elapsed = time.perf_counter() - started
    pace = f" ({outcome.translated / elapsed:,.1f} lines/s)" if outcome.translated and elapsed > 0 else ""
    ranks_said = f" by {world} ranks" if world > 1 else ""
    say(f"{verb} {outcome.translated:,} line(s){ranks_said} in {elapsed:.1f} s{pace}; {output}: {outcome.lines:,} lines, "
        f"sha256 {outcome.sha256[:16]}")


def translate_in_chunks(input: Path, output: Path, chunk_lines: int, settings: SearchSettings, output_format: str,
                         forced_decoding: bool, target_file: Path | None, prefix_file: Path | None, closest_to: Path | None,
                         alignment: str | None, protection, split_sentences: bool, min_confidence: float | None,
                         open_translator, device: str, threads: int | None, what: dict) -> None:
    """-i FILE -o OUT: FILE (with the files read beside it) translated a chunk at a time into OUT.parts/, joined into OUT
    (translate_file, nmtcli/bulk.py); this rank's share when torchrun started several."""
    from nmtcli.bulk import decoded, renumbered
    from nmtcli.cli.translate_lines import flagged, scored, sentence_warn, translations
    from nmtcli.model.checkpoint import SHORTLIST_FILE

    rank, world, local_rank, local_world = ranks()
    if world > 1:
        device, threads = rank_device(device, local_rank), rank_threads(threads, local_world)
    first = [1]  # the chunk in flight's first line, for the warnings about its lines
    numbers: dict[int, tuple[int, int]] = {}
    translator = open_translator(device, threads, renumbered(sentence_warn(numbers) if split_sentences else warn, lambda: first[0]))
    beside = [(path, name) for path, name in ((target_file if forced_decoding else None, "targets"), (prefix_file, "prefixes"),
                                              (closest_to, "references")) if path is not None]
    below = [0, 0]

    def lines_of(start: int, columns: list[list[bytes]]) -> Iterator[str]:
        first[0] = start
        read = {name: iter(decoded(column, str(path), start, warn)) for (path, name), column in zip(beside, columns[1:])}
        lines = iter(decoded(columns[0], str(input), start, warn))
        if forced_decoding:
            return scored(translator, settings, lines, read["targets"], output_format, alignment)
        rated = translations(translator, settings, lines, read.get("prefixes"), output_format, protection, split_sentences, numbers,
                             read.get("references"), first=start)
        return flagged(rated, min_confidence, below)

    model = Path(str(translator.name))
    weights = [p.stat() for p in sorted(model.glob("*.safetensors")) if p.name != SHORTLIST_FILE] if model.is_dir() else []
    # The shortlist the search uses, if any (one added or deleted between two runs changes the lines; --no-shortlist, not)
    searched = settings.shortlist and not forced_decoding and getattr(translator.engine, "shortlist", None) is not None
    listed = (model / SHORTLIST_FILE).stat() if searched and (model / SHORTLIST_FILE).is_file() else None
    what = {**what, "model": str(model.resolve()) if model.exists() else str(model), "weights": [[w.st_size, w.st_mtime_ns] for w in weights],
            "shortlist": [listed.st_size, listed.st_mtime_ns] if listed else None,
            "search": {k: str(v) for k, v in dataclasses.asdict(settings).items() if k not in ("glossary", "cuda_graphs", "shortlist")},
            "output_format": output_format, "forced_decoding": forced_decoding, "split_sentences": split_sentences,
            "protection": repr(protection), "min_confidence": min_confidence, "alignment": alignment}
    translate_file([input, *(path for path, _ in beside)], output, chunk_lines, what, lines_of,
                   "scored" if forced_decoding else "translated")
    if min_confidence is not None and rank == 0:
        say(f"{below[0]:,} of {below[1]:,} line(s) this rank translated below --min-confidence {min_confidence:g}")


def check_paths(output: Path | None, *read: Path | None) -> None:
    """-o is none of the files read (it would replace the input with its translation), and --closest-to has a line
    for each input line (two regular files: counted before any work)."""
    from nmtcli.cli.translate_flags import count_lines
    from nmtcli.errors import NmtError

    given = [p for p in read if p is not None]
    if output is not None and output.exists() and any(p.exists() and output.samefile(p) for p in given):
        raise NmtError(f"-o {output} is a file this command reads", "write the translation to another file", exit_code=2)
    input, closest_to = read[0], read[-1]
    if input is not None and closest_to is not None and input.is_file() and closest_to.is_file():
        lines, references = count_lines(input), count_lines(closest_to)
        if lines != references:
            raise NmtError(f"--closest-to {closest_to} has {references:,} line(s) but --input {input} has {lines:,}",
                           "give one reference per input line", exit_code=2)
