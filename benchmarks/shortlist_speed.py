"""What a lexical shortlist (inference/shortlist.py) buys a student on a CPU, against its teacher (issue 52's 5x).

Issue 52 asks for an int8 student (student-tiny: 6+2 layers, d_model 256) at least 5x its teacher's (`small`, 6+6, 512)
fp32 lines/s on one CPU thread. With a 32k vocabulary the student's output projection (256 x 32k multiply-adds a beam
row a step) is most of its decoder's work, and the shortlist removes most of it. Here every model has random weights
(speed does not depend on what the weights say) and decodes the same random sources with beam 4 for exactly --length
steps (EOS banned before, forced at the limit): per-token cost compared fairly. Rows, each in a process of its own
... no: in this process, alternating, medians of --runs:

- teacher: `small`, fp32 (oneDNN-packed, what `nmt translate` runs), the whole vocabulary
- student fp32 / int8: student-tiny, the whole vocabulary
- student int8 + shortlist: each batch decoded over --shortlist-ids target ids. A real shortlist's batch union depends
  on the corpus (the demo corpus's 32-line batches: 1,362 of 4,000 pieces; Marian's students keep 50 per source word
  and 50 frequent ones); the figure is an assumption, given with the table, and --shortlist-ids takes others.

Usage:
  python benchmarks/shortlist_speed.py                      # one thread, 64 sentences, 3 runs
  python benchmarks/shortlist_speed.py --shortlist-ids 1000,2000,4000 --threads 2
  python benchmarks/shortlist_speed.py --sentences 8 --runs 1 --length 5 --smoke
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from nmtcli.inference.beam import beam_search
from nmtcli.inference.cpu import pack_for_cpu
from nmtcli.inference.shortlist import Shortlist
from nmtcli.model.config import PRESETS
from nmtcli.model.transformer import Transformer


def model_of(preset: str, vocab_size: int, precision: str, seed: int) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(PRESETS[preset].replace(vocab_size=vocab_size)).eval()
    if not pack_for_cpu(model, "int8" if precision == "int8" else "packed") and precision == "int8":
        raise SystemExit("this PyTorch build has no int8 linear ops (fbgemm)")
    return model


def shortlist_of(vocab_size: int, ids: int, seed: int) -> Shortlist:
    """A shortlist whose every batch decodes over `ids` target ids (sources' own ids aside): each source id lists 50 of a
    fixed pool of `ids`, and the pool's first 100 are always in."""
    generator = torch.Generator().manual_seed(seed)
    pool = torch.randperm(vocab_size - 4, generator=generator)[:ids] + 4
    table = pool[torch.randint(0, ids, (vocab_size, 50), generator=generator)]
    return Shortlist(table, pool, {"benchmark": True})


def decode(model: Transformer, batches: list[torch.Tensor], length: int, shortlist: Shortlist | None) -> float:
    started = time.perf_counter()
    for src in batches:
        beam_search(model, src, 4, 0.6, 0.0, length - 1, min_len=length - 1, shortlist=shortlist)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab-size", type=int, default=32000)
    parser.add_argument("--sentences", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch (nmt's CPU default, 1,024 tokens, is ~36)")
    parser.add_argument("--source-length", type=int, default=27, help="source tokens (newstest2014: ~27)")
    parser.add_argument("--length", type=int, default=30, help="decoder steps per sentence")
    parser.add_argument("--shortlist-ids", default="2000", help="target ids a batch decodes over, comma-separated")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check the script runs")
    args = parser.parse_args()
    if args.smoke:
        args.vocab_size, args.sentences, args.runs, args.length, args.shortlist_ids = 2000, 8, 1, 5, "500"
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(args.seed)
    sources = torch.randint(4, args.vocab_size, (args.sentences, args.source_length), generator=generator)
    sources[:, -1] = 3  # EOS
    batches = list(sources.split(args.batch))
    rows = [("teacher small fp32", "small", "fp32", None)]
    rows += [("student-tiny fp32", "student-tiny", "fp32", None), ("student-tiny int8", "student-tiny", "int8", None)]
    rows += [(f"student-tiny int8 + shortlist ({int(n):,} ids)", "student-tiny", "int8", int(n)) for n in args.shortlist_ids.split(",")]
    models = {(preset, precision): model_of(preset, args.vocab_size, precision, args.seed) for _, preset, precision, _ in rows}
    shortlists = {n: shortlist_of(args.vocab_size, n, args.seed) for *_, n in rows if n}
    times: dict[str, list[float]] = {name: [] for name, *_ in rows}
    for name, preset, precision, n in rows:  # warm-up
        decode(models[preset, precision], batches[:1], 2, shortlists.get(n))
    for _ in range(args.runs):
        for name, preset, precision, n in rows:
            times[name].append(decode(models[preset, precision], batches, args.length, shortlists.get(n)))
    teacher = statistics.median(times[rows[0][0]])
    print(f"\n{args.sentences} sentences of {args.source_length} tokens, beam 4, {args.length} steps each, vocabulary {args.vocab_size:,}, "
          f"{args.threads} thread(s), torch {torch.__version__}, median of {args.runs}")
    print(f"{'model':<46} {'lines/s':>8} {'x teacher':>10}")
    for name, *_ in rows:
        seconds = statistics.median(times[name])
        print(f"{name:<46} {args.sentences / seconds:>8.2f} {teacher / seconds:>9.2f}x")


if __name__ == "__main__":
    main()
