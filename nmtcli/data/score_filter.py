"""The score filter of `nmt prepare` and `nmt distill`: each pair scored by a model's forced decoding, the worst share
dropped (issue 53).

A model's per-token cross-entropy of a pair (x, y) is H(y|x) = -log P(y|x) / |y|, |y| counting EOS: the forced
decoding's log-probability over the power length penalty with alpha 1, no brevity penalty (`nmt translate
--forced-decoding --length-penalty power --alpha 1 --brevity-penalty 0` writes -H, one line a pair). With a forward
model alone, a pair's cost is H_f = H(y|x), which `nmt distill` has always ranked by (the teacher's own per-token
score, as Bergamot drops the worst 5%); with a reverse model alone H_b = H(x|y); with both, Junczys-Dowmunt's dual
conditional cross-entropy (2018, "Dual Conditional Cross-Entropy Filtering of Noisy Parallel Corpora"):

    |H_f - H_b| + (H_f + H_b) / 2

low when both models find the pair likely (the mean) and agree on it (the difference: a copy or a fragment that one
direction finds easy and the other does not). Lower is better; the floor(n * percent / 100) pairs of the highest cost
go, ties broken by line number (the earlier goes first), so the split is deterministic.

The scores themselves come from the layers above (nmtcli/pair_scores.py: the forced decoding in resumable chunks,
nmtcli/bulk.py); here they are read, ranked and the pairs split. The corpus is streamed: memory holds one float per
pair and two integers per dropped pair (the dropped records go to a temporary file in line order, then out worst first).
"""

from __future__ import annotations

from fractions import Fraction

import hashlib
import json
import random
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nmtcli.data.cleaning import with_filter
from nmtcli.errors import NmtError
from nmtcli.files import atomic_path

DROPPED = "score-dropped.jsonl"  # a prepared data dir's pairs the score filter dropped, worst first
DEFAULT_PERCENT = 5.0  # Bergamot's share, and `nmt distill`'s

Progress = Callable[[str, int, "int | None"], None]


def dual_cross_entropy(forward: np.ndarray | float, reverse: np.ndarray | float) -> np.ndarray | float:
    """Junczys-Dowmunt (2018): |H_f - H_b| + (H_f + H_b) / 2 of per-token cross-entropies (lower is better)."""
    return abs(forward - reverse) + (forward + reverse) / 2


def read_log_probs(path: Path, pairs: int | None = None) -> np.ndarray:
    """A forced-decoding score file (one per-token log-probability a line) as float64; `pairs`: the lines it must have."""
    values = np.array([float(line) for line in Path(path).read_text(encoding="utf-8").split("\n") if line], dtype=np.float64)
    if pairs is not None and len(values) != pairs:
        raise NmtError(f"{path} has {len(values):,} scores for {pairs:,} pairs", f"delete {path} to score the pairs again")
    return values


def costs(forward: np.ndarray | None, reverse: np.ndarray | None) -> np.ndarray:
    """Each pair's cost from the per-token log-probabilities (-H) of the forward and/or the reverse model: H_f, H_b, or
    the dual conditional cross-entropy of both. A NaN (a broken score) costs the most."""
    if forward is None and reverse is None:
        raise ValueError("the score filter needs a forward or a reverse model's scores")
    if forward is not None and reverse is not None:
        cost = dual_cross_entropy(-forward, -reverse)
    else:
        cost = -(forward if forward is not None else reverse)
    return np.where(np.isnan(cost), np.inf, cost)


def ranked(cost: np.ndarray) -> np.ndarray:
    """Every line index (from 0), worst first: the highest cost first, of equal cost the earlier line first."""
    return np.lexsort((np.arange(len(cost)), -cost))


def dropped_count(pairs: int, percent: float) -> int:
    """floor(pairs x percent / 100), the percent read as the decimal it is written as (4.6% of 1,500 is 69, not 68)."""
    return int(Fraction(repr(float(percent))) * pairs / 100)


@dataclass(frozen=True)
class Split:
    pairs: int
    dropped: int
    threshold: float | None  # the cost of the best pair kept, which every pair dropped exceeds or equals (None: none or all dropped)


def split_pairs(sources: Path, targets: Path, cost: np.ndarray, percent: float, kept: tuple[Path, Path], dropped_file: Path,
                record: Callable[[int, str, str], dict[str, Any]]) -> Split:
    """Stream the pairs: those kept to `kept` (source, target files; in order, each line as it was), those dropped to
    `dropped_file` as JSON lines (`record(line index, source, target)`), worst first. Every file is written atomically."""
    ranking = ranked(cost)
    drop = dropped_count(len(cost), percent)
    order = ranking[:drop]
    lines = np.sort(order)  # the dropped lines in file order, and where each one's record starts in the spool
    offsets = np.zeros(len(lines) + 1, dtype=np.int64)
    with ExitStack() as stack:
        spool = stack.enter_context(tempfile.TemporaryFile(dir=Path(dropped_file).parent))
        outs = [stack.enter_context(open(stack.enter_context(atomic_path(path)), "wb")) for path in kept]
        ins = [stack.enter_context(open(path, "rb")) for path in (sources, targets)]
        k, i = 0, -1
        for i, pair in enumerate(zip(*ins)):
            if i >= len(cost):
                raise NmtError(f"{sources} has more lines than the {len(cost):,} scored", "score the pairs again")
            source, target = (line[:-1] if line.endswith(b"\n") else line for line in pair)
            if k < len(lines) and lines[k] == i:
                spool.write(json.dumps(record(i, source.decode("utf-8", "replace"), target.decode("utf-8", "replace")),
                                       ensure_ascii=False).encode("utf-8") + b"\n")
                k += 1
                offsets[k] = spool.tell()
            else:
                outs[0].write(source + b"\n")
                outs[1].write(target + b"\n")
        if i + 1 != len(cost):
            raise NmtError(f"{sources} has {i + 1:,} lines but {len(cost):,} pairs were scored", "score the pairs again")
        for f in outs:
            f.close()  # flushed before the atomic renames
        with atomic_path(dropped_file) as tmp, open(tmp, "wb") as out:
            for line in order:
                at = int(np.searchsorted(lines, line))
                spool.seek(offsets[at])
                out.write(spool.read(int(offsets[at + 1] - offsets[at])))
    threshold = float(cost[ranking[drop]]) if 0 < drop < len(cost) else None
    return Split(len(cost), drop, threshold)


def read_records(path: Path, picked: list[int]) -> list[dict[str, Any]]:
    """The records at lines `picked` (sorted, from 0) of a JSON-lines file, read through once."""
    wanted, found = set(picked), []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            if i in wanted:
                found.append(json.loads(line))
    return found


# --- nmt prepare's stage --------------------------------------------------------------------------


@dataclass(frozen=True)
class ScoreFilter:
    """`nmt prepare --score-model/--reverse-model/--drop-worst`: the models (`models`: "forward" and "reverse", each
    described by what identifies it, path and weights' sha256, or None) and the percent dropped. `score(sources,
    targets, work, progress, resumed)` writes each model's per-token log-probabilities of the pairs under `work` and
    returns their files (forward, reverse; None for a model not given): the layers above do the forced decoding, in
    resumable chunks, and put in `resumed` (`resumed_chunks`) how many of each model's chunks an interrupted run had
    left done (the manifest's "score_filter.resumed_chunks": this run's, 0 where the stage was skipped)."""

    percent: float
    models: dict[str, Any]
    score: Callable[[Path, Path, Path, Progress, dict[str, int]], tuple[Path | None, Path | None]]
    resumed_chunks: dict[str, int] = field(default_factory=dict, compare=False)

    def describe(self) -> dict[str, Any]:
        """The manifest's "score_filter"."""
        return {**self._identity(), "resumed_chunks": sum(self.resumed_chunks.values())}

    def _identity(self) -> dict[str, Any]:
        return {"percent": self.percent, **self.models}

    def key(self, text_key: str) -> str:
        """The score stage's fingerprint: the cleaned text's, the models and the percent."""
        return hashlib.sha256(json.dumps(["score", text_key, self._identity()], sort_keys=True).encode()).hexdigest()


def score_stage(out_dir: Path, work: Path, text_key: str, text_counts: dict[str, Any], languages: tuple[str, str],
                score_filter: ScoreFilter, seed: int, samples: int, cleaning_sample: Path, progress: Progress) -> dict[str, Any]:
    """The cleaned training pairs (work/train.*) scored and split: the kept ones to work/scored/train.*, the dropped to
    OUT/score-dropped.jsonl worst first, a seeded sample of `samples` of them beside the text filters' in
    `cleaning_sample`; returns the text stage's counts with the `score` filter after the others."""
    src, tgt = (work / f"train.{lang}" for lang in languages)
    pairs = text_counts["train"]["clean_pairs"]
    # The scores depend on the text and the models, not on the percent: another --drop-worst reuses them.
    models = hashlib.sha256(json.dumps([text_key, score_filter.models], sort_keys=True).encode()).hexdigest()[:16]
    forward, reverse = score_filter.score(src, tgt, work / f"scores-{models}", progress, score_filter.resumed_chunks)
    f_values, r_values = (read_log_probs(path, pairs) if path is not None else None for path in (forward, reverse))
    cost = costs(f_values, r_values)
    progress("score filter", 0, pairs)

    def record(i: int, source: str, target: str) -> dict[str, Any]:
        parts = {"forward": round(-float(f_values[i]), 4)} if f_values is not None else {}
        if r_values is not None:
            parts["reverse"] = round(-float(r_values[i]), 4)
        return {"filter": "score", "cost": round(float(cost[i]), 4), **parts, "source": source, "target": target}

    (work / "scored").mkdir(exist_ok=True)
    split = split_pairs(src, tgt, cost, score_filter.percent, tuple(work / "scored" / f"train.{lang}" for lang in languages),
                        out_dir / DROPPED, record)
    progress("score filter", pairs, pairs)
    if split.pairs == split.dropped:
        raise NmtError(f"--drop-worst {score_filter.percent:g} leaves no training pair", "drop a smaller share")
    picked = sorted(random.Random(seed).sample(range(split.dropped), min(samples, split.dropped)))
    with open(cleaning_sample, encoding="utf-8") as f:  # the text filters' sample (a score sample of an earlier run goes)
        text_records = [r for r in map(json.loads, f) if r.get("filter") != "score"]
    with atomic_path(cleaning_sample) as tmp:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in text_records + read_records(out_dir / DROPPED, picked)),
                       encoding="utf-8")
    return {**text_counts, "train": with_filter(text_counts["train"], "score", split.dropped)}
