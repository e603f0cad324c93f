#!/usr/bin/env python3
"""How fast `nmt prepare` is at WMT scale, and how much memory it needs (not run in CI).

Writes a synthetic corpus of N pairs as parquet files with the Hub's WMT schema (WMT-like sentence
lengths: about 23 words on average, log-normal, up to a few hundred; a Zipfian vocabulary of 60,000
made-up words per language; 1% exact duplicates; some empty sides), then runs the real pipeline
(`nmtcli.data.prepare.prepare`, the code behind `nmt prepare wmt14-en-de` after the download) in a
child process and reports per-stage wall time, pairs/s and the child's peak RSS. The result is
extrapolated to WMT14 en-de's 4,508,785 pairs: cleaning and encoding scale with the corpus, BPE
training with its sample (`--spm-sentences`, the same 1M pairs for both).

    python benchmarks/prepare_speed.py --pairs 1000000            # the issue's benchmark
    python benchmarks/prepare_speed.py --pairs 100000 --spm-sentences 100000   # a quick look

Synthetic text is not WMT text: BPE training time depends on the number of distinct words, which
this corpus sets to 60,000 per side (real WMT14 en-de has more, with a long tail); treat the BPE
number as an estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

WMT14_PAIRS = 4_508_785


def wmt_like_pairs(pairs: int, seed: int = 0, parts: int = 1, learnable: bool = False) -> Iterator[list[tuple[str, str]]]:
    """Synthetic sentence pairs shaped like WMT's, in `parts` lists: log-normal lengths of about 23 words
    (up to a few hundred), a Zipfian vocabulary of 60,000 made-up words per language, 1% exact
    duplicates, and an empty target in every thousand pairs.

    By default a target is drawn independently of its source: the shape of WMT without its content (what
    `nmt prepare` costs), and a model can learn no more than the target's unigram distribution from it
    (a loss that stays near 7 is then the right one). `learnable`: each target is its source translated
    word by word through a fixed lexicon (the same length, the same order), a task a model learns, for
    training runs whose loss and translations must mean something."""
    import numpy as np

    rng = np.random.default_rng(seed)
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ei", "au", "en", "er")]

    def lexicon(n: int) -> np.ndarray:
        lengths = rng.integers(1, 5, n)
        words = {"".join(rng.choice(syllables, k)) for k in lengths}
        while len(words) < n:
            words.add("".join(rng.choice(syllables, int(rng.integers(2, 6)))))
        return np.array(sorted(words)[:n])

    vocab = 60_000
    en, de = lexicon(vocab), lexicon(vocab)
    zipf = 1.0 / np.arange(1, vocab + 1) ** 1.07
    zipf /= zipf.sum()
    per_part = (pairs + parts - 1) // parts
    for part in range(parts):
        n = min(per_part, pairs - part * per_part)
        src_len = np.clip(rng.lognormal(3.0, 0.55, n).astype(int), 1, 400)
        tgt_len = src_len if learnable else np.maximum(1, (src_len * rng.normal(1.0, 0.12, n)).astype(int))
        rows = []
        words = rng.choice(vocab, size=int(src_len.sum() + tgt_len.sum()), p=zipf)
        at = 0
        for s, t in zip(src_len, tgt_len):
            src = " ".join(en[words[at : at + s]]).capitalize() + "."
            at += s
            if learnable:  # the source's words through the lexicon
                tgt = " ".join(de[words[at - s : at]]).capitalize() + "."
            else:
                tgt = " ".join(de[words[at : at + t]]).capitalize() + "."
                at += t
            rows.append((src, tgt))
        for i in rng.choice(n, size=n // 100, replace=False)[1:]:
            rows[i] = rows[i - 1]  # exact duplicates
        for i in rng.choice(n, size=n // 1000, replace=False):
            rows[i] = (rows[i][0], "")  # empty sides
        yield rows


def make_corpus(directory: Path, pairs: int, seed: int = 0, learnable: bool = False) -> list[Path]:
    """The pairs as parquet files with the Hub's WMT schema (3 train files and a validation file)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = []
    struct = pa.struct([("de", pa.string()), ("en", pa.string())])
    for part, rows in enumerate(wmt_like_pairs(pairs, seed, parts=3, learnable=learnable)):
        path = directory / f"train-{part:05d}-of-00003.parquet"
        pq.write_table(pa.table({"translation": pa.array([{"en": s, "de": t} for s, t in rows], type=struct)}), path)
        paths.append(path)
    valid = directory / "validation.parquet"
    pq.write_table(pa.table({"translation": pa.array([{"en": "Ein Test.", "de": "A test."}] * 3000, type=struct)}), valid)
    return paths + [valid]


CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from nmtcli.data.prepare import prepare
from nmtcli.data.settings import PrepareSettings
from nmtcli.data.sources import ParquetFiles

def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime

marks = {}  # task -> (wall, own CPU, finished children's CPU) at its first report
def progress(task, done, total):
    marks.setdefault(task, (time.time(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)))

args = json.loads(sys.argv[1])
paths = [Path(p) for p in args["paths"]]
sources = {
    "train": ParquetFiles(tuple(paths[:-1]), "en", "de", {"benchmark": "train"}),
    "valid": ParquetFiles((paths[-1],), "en", "de", {"benchmark": "valid"}),
}
settings = PrepareSettings("en", "de", args["vocab_size"], spm_sentences=args["spm_sentences"], workers=args["workers"],
                           drop_misaligned=args["drop_misaligned"])
start = (time.time(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN))
manifest = prepare(Path(args["out"]), sources, settings, "benchmark", progress)
end = (time.time(), cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN))
misaligned = marks.get("learning word translations", marks["sampling for sentencepiece"])
bounds = {"clean": (start, misaligned), "misaligned": (misaligned, marks["sampling for sentencepiece"]),
          "bpe": (marks["sampling for sentencepiece"], marks["encoding train"]),
          "encode": (marks["encoding train"], end)}
stages = {k: {"wall": b[0] - a[0], "own_cpu": b[1] - a[1], "worker_cpu": b[2] - a[2]} for k, (a, b) in bounds.items()}
print(json.dumps({"stages": stages, "splits": manifest["splits"]}))
"""


def _tree_rss_kib(root: int) -> tuple[int, int]:
    """(summed VmRSS of a process and its descendants, the root's own VmHWM), from /proc (Linux)."""
    def status(pid: int) -> dict[str, int]:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            return {}
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in lines) if k in ("VmRSS", "VmHWM")}

    def children(pid: int) -> list[int]:
        found = []
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                found += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
        return found

    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += status(pid).get("VmRSS", 0)
        stack += children(pid)
    return total, status(root).get("VmHWM", 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--vocab-size", type=int, default=37000)
    parser.add_argument("--spm-sentences", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=0, help="encoding/BPE threads (0: all cores)")
    parser.add_argument("--keep", type=Path, help="write the corpus and data here and keep them")
    parser.add_argument("--aligned", action="store_true", help="targets that translate their sources word by word (the "
                        "misaligned filter then judges a real corpus; by default every target is another sentence's shape)")
    parser.add_argument("--keep-misaligned", action="store_true", help="the misaligned filter off (the cost without it)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        started = time.time()
        paths = make_corpus(root, args.pairs, learnable=args.aligned)
        print(f"synthetic corpus: {args.pairs:,} pairs, {sum(p.stat().st_size for p in paths) / 1e6:.0f} MB parquet, "
              f"made in {time.time() - started:.0f} s", file=sys.stderr)
        child_args = {"paths": [str(p) for p in paths], "out": str(root / "prepared"), "vocab_size": args.vocab_size,
                      "spm_sentences": args.spm_sentences, "workers": args.workers, "drop_misaligned": not args.keep_misaligned}
        started = time.time()
        child = subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(child_args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        peak_tree = peak_own = 0
        while child.poll() is None:  # sample the memory of the whole process tree (prepare + encoding workers)
            tree, own = _tree_rss_kib(child.pid)
            peak_tree, peak_own = max(peak_tree, tree), max(peak_own, own)
            time.sleep(0.2)
        stdout, stderr = child.communicate()
        total = time.time() - started
        if child.returncode:
            sys.exit(stderr)
        report = json.loads(stdout.strip().splitlines()[-1])

    stages = report["stages"]
    n, sampled = args.pairs, min(args.spm_sentences, args.pairs)
    threads = args.workers or os.cpu_count()
    scale = WMT14_PAIRS / n
    bpe_scale = min(args.spm_sentences, WMT14_PAIRS) / sampled  # BPE cost follows the sample, not the corpus
    print(f"\nnmt prepare on {n:,} synthetic pairs; {threads} workers; {os.cpu_count()} cores visible; "
          f"load average before/after: {os.getloadavg()[0]:.1f}")
    print(f"{'stage':<14}{'wall s':>9}{'pairs/s':>10}{'own CPU s':>11}{'worker CPU s':>14}{'4.5M, 8 idle cores':>21}")
    estimate_total = 0.0
    for name, label, pairs, factor in (("clean", "clean", n, scale), ("misaligned", "misaligned", n, scale),
                                       ("bpe", "BPE training", sampled, bpe_scale), ("encode", "encode", n, scale)):
        st = stages[name]
        # On 8 idle cores: the single-threaded part takes its CPU time, the parallel part (workers,
        # and sentencepiece's own threads in BPE training, counted in own CPU) at most 1/8 of it.
        if name == "encode":
            estimate = (st["own_cpu"] + st["worker_cpu"] / 8) * factor
        elif name == "misaligned":  # own CPU: mostly the fit, on a sample that stops growing at 100,000 pairs
            estimate = st["own_cpu"] * min(factor, 100_000 / n if n < 100_000 else 1) + st["worker_cpu"] / 8 * factor
        elif name == "bpe":
            estimate = st["own_cpu"] * factor  # upper bound: sentencepiece training is partly multi-threaded
        else:
            estimate = st["own_cpu"] * factor
        estimate_total += estimate
        print(f"{label:<14}{st['wall']:>9.1f}{pairs / max(st['wall'], 1e-9):>10,.0f}{st['own_cpu']:>11.1f}{st['worker_cpu']:>14.1f}{estimate:>20.0f}s")
    print(f"{'total':<14}{total:>9.1f}{'':>10}{'':>11}{'':>14}{estimate_total:>20.0f}s  (plus the download)")
    print(f"peak RSS: prepare process {peak_own / 1024 / 1024:.2f} GiB; whole process tree (sampled every 0.2 s) {peak_tree / 1024 / 1024:.2f} GiB")
    print(f"train pairs kept: {report['splits']['train']['pairs']:,} of {n:,}; dropped {report['splits']['train']['dropped']}")


if __name__ == "__main__":
    main()
