"""A distilled student's CPU speed against its teacher's, trained models on real text: medians of several rounds.

`nmt distill`'s report times each model once; this times the same rows (teacher fp32; student fp32, int8, and int8
with its lexical shortlist where it has one) on the same source lines in alternating rounds, each model loaded once,
beam 4 as `nmt translate` runs it, and gives each row's median lines/s and words/s and its ratio to the teacher's
(the int8 teacher too: what the student saves over quantizing the teacher alone).
The issue-52 bar: the int8 student at least 5x the fp32 teacher on one thread.

    python benchmarks/distill_speed.py TEACHER distill/en-de/model corpus/test.en --threads 1 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BAR = 5.0  # the int8 student's lines/s over the fp32 teacher's, one thread (issue 52)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("teacher", type=Path)
    parser.add_argument("student", type=Path)
    parser.add_argument("source", type=Path, help="source lines, one sentence a line")
    parser.add_argument("--lines", type=int, default=500, help="the first N lines (the report's 500)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    import torch

    from nmtcli.api import Translator
    from nmtcli.model.checkpoint import SHORTLIST_FILE
    from nmtcli.provenance import versions

    torch.set_num_threads(args.threads)
    lines = args.source.read_text(encoding="utf-8").splitlines()[:args.lines]
    rows = [("teacher", args.teacher, "fp32", False), ("teacher", args.teacher, "int8", False), ("student", args.student, "fp32", False),
            ("student", args.student, "int8", False)]
    if (args.student / SHORTLIST_FILE).is_file():
        rows.append(("student", args.student, "int8", True))
    translators = [Translator.load(path, device="cpu", precision=precision, shortlist=shortlist) for _, path, precision, shortlist in rows]
    for translator in translators:
        translator.translate(lines[:20])  # warm-up
    seconds: list[list[float]] = [[] for _ in rows]
    words = [0] * len(rows)
    for _ in range(args.runs):  # rounds alternate between the models
        for k, translator in enumerate(translators):
            started = time.perf_counter()
            out = translator.translate(lines)
            seconds[k].append(time.perf_counter() - started)
            words[k] = sum(len(t.text.split()) for t in out)
    print(f"{len(lines)} lines of {args.source}, beam 4, {args.threads} thread(s), median of {args.runs} rounds; {versions()}")
    print("| model | precision | lines/s | words/s | x teacher | rounds (s) |")
    print("|---|---|---|---|---|---|")
    teacher = statistics.median(seconds[0])
    for (name, _, precision, shortlist), taken, count in zip(rows, seconds, words):
        median = statistics.median(taken)
        print(f"| {name} | {precision}{' + shortlist' if shortlist else ''} | {len(lines) / median:,.1f} | {count / median:,.0f} | "
              f"{teacher / median:.2f}x | {', '.join(f'{s:.1f}' for s in taken)} |")
    fastest = min(statistics.median(s) for s in seconds[3:])
    print(f"int8 student vs fp32 teacher: {teacher / fastest:.2f}x (bar {BAR:g}x: {'met' if teacher / fastest >= BAR else 'NOT met'}); "
          f"vs the int8 teacher: {statistics.median(seconds[1]) / fastest:.2f}x")


if __name__ == "__main__":
    main()
