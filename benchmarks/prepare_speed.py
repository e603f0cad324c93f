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
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WMT14_PAIRS = 4_508_785


def make_corpus(directory: Path, pairs: int, seed: int = 0) -> list[Path]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

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
    paths = []
    per_file = (pairs + 2) // 3
    struct = pa.struct([("de", pa.string()), ("en", pa.string())])
    for part in range(3):
        n = min(per_file, pairs - part * per_file)
        src_len = np.clip(rng.lognormal(3.0, 0.55, n).astype(int), 1, 400)
        tgt_len = np.maximum(1, (src_len * rng.normal(1.0, 0.12, n)).astype(int))
        rows = []
        words = rng.choice(vocab, size=int(src_len.sum() + tgt_len.sum()), p=zipf)
        at = 0
        for s, t in zip(src_len, tgt_len):
            src = " ".join(en[words[at : at + s]]).capitalize() + "."
            at += s
            tgt = " ".join(de[words[at : at + t]]).capitalize() + "."
            at += t
            rows.append({"en": src, "de": tgt})
        for i in rng.choice(n, size=n // 100, replace=False)[1:]:
            rows[i] = rows[i - 1]  # exact duplicates
        for i in rng.choice(n, size=n // 1000, replace=False):
            rows[i] = {"en": rows[i]["en"], "de": ""}  # empty sides
        path = directory / f"train-{part:05d}-of-00003.parquet"
        pq.write_table(pa.table({"translation": pa.array(rows, type=struct)}), path)
        paths.append(path)
    valid = directory / "validation.parquet"
    pq.write_table(pa.table({"translation": pa.array([{"en": "Ein Test.", "de": "A test."}] * 3000, type=struct)}), valid)
    return paths + [valid]


CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from nmtcli.data.prepare import PrepareSettings, prepare
from nmtcli.data.sources import ParquetFiles
args = json.loads(sys.argv[1])
paths = [Path(p) for p in args["paths"]]
sources = {
    "train": ParquetFiles(tuple(paths[:-1]), "en", "de", {"benchmark": "train"}),
    "valid": ParquetFiles((paths[-1],), "en", "de", {"benchmark": "valid"}),
}
settings = PrepareSettings("en", "de", args["vocab_size"], spm_sentences=args["spm_sentences"], workers=args["workers"])
manifest = prepare(Path(args["out"]), sources, settings, "benchmark")
print(json.dumps({"stage_seconds": manifest["stage_seconds"], "splits": manifest["splits"],
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "worker_peak_rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--vocab-size", type=int, default=37000)
    parser.add_argument("--spm-sentences", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=0, help="encoding/BPE threads (0: all cores)")
    parser.add_argument("--keep", type=Path, help="write the corpus and data here and keep them")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        started = time.time()
        paths = make_corpus(root, args.pairs)
        print(f"synthetic corpus: {args.pairs:,} pairs, {sum(p.stat().st_size for p in paths) / 1e6:.0f} MB parquet, "
              f"made in {time.time() - started:.0f} s", file=sys.stderr)
        child_args = {"paths": [str(p) for p in paths], "out": str(root / "prepared"), "vocab_size": args.vocab_size,
                      "spm_sentences": args.spm_sentences, "workers": args.workers}
        started = time.time()
        result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(child_args)], capture_output=True, text=True)
        total = time.time() - started
        if result.returncode:
            sys.exit(result.stderr)
        report = json.loads(result.stdout.strip().splitlines()[-1])

    seconds = report["stage_seconds"]
    n, sampled = args.pairs, min(args.spm_sentences, args.pairs)
    cores = args.workers or os.cpu_count()
    print(f"\nnmt prepare on {n:,} synthetic pairs, {cores} threads, {os.cpu_count()} cores visible")
    print(f"{'stage':<16}{'seconds':>10}{'pairs/s':>12}{'at 4.5M pairs':>16}")
    scale = WMT14_PAIRS / n
    rows = [
        ("clean", seconds["text"], n, seconds["text"] * scale),
        ("BPE training", seconds["sentencepiece"], sampled, seconds["sentencepiece"] * min(args.spm_sentences, WMT14_PAIRS) / sampled),
        ("encode", seconds["encode"], n, seconds["encode"] * scale),
    ]
    for name, s, pairs, extrapolated in rows:
        print(f"{name:<16}{s:>10.1f}{pairs / max(s, 1e-9):>12,.0f}{extrapolated:>15.0f}s")
    print(f"{'total':<16}{total:>10.1f}{'':>12}{sum(r[3] for r in rows):>15.0f}s  (excluding the download)")
    print(f"peak RSS of the prepare process: {report['peak_rss_kib'] / 1024 / 1024:.2f} GiB; "
          f"largest encoding worker: {report['worker_peak_rss_kib'] / 1024 / 1024:.2f} GiB (x{cores} workers)")
    print(f"train pairs kept: {report['splits']['train']['pairs']:,} of {n:,}; dropped {report['splits']['train']['dropped']}")


if __name__ == "__main__":
    main()
