"""GNMT's coverage penalty (`nmt translate --coverage-penalty BETA`) on models that end sentences early: BLEU, chrF2,
brevity penalty and time at each beta.

Issue 40: tiny on the demo corpus writes translations too short (BP ~0.75), and no length penalty fixed it without
costing BLEU (docs/training.md, "Short outputs"): the model itself prefers the short hypothesis. The coverage
penalty ranks the beam's hypotheses also by how much of the source they attended to (inference/coverage.py). This
translates a prepared data dir's test split with each model given, at each beta, through the Python API (the code
`nmt translate` runs), and prints one row per model and beta, then the mean over the models per beta.

    OMP_NUM_THREADS=1 python studies/coverage_penalty.py --data data/demo --models runs/a/model runs/b/model \\
        --betas 0 0.2 0.4 0.7 1.0
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def test_split(data: Path) -> tuple[list[str], list[str]]:
    """A prepared data dir's test split: (source lines, reference lines)."""
    from nmtcli.data.prepare import read_manifest

    manifest = read_manifest(data)
    src, tgt = manifest["source_lang"], manifest["target_lang"]
    return ((data / f"test.{src}").read_text(encoding="utf-8").splitlines(),
            (data / f"test.{tgt}").read_text(encoding="utf-8").splitlines())


def main() -> None:
    import sacrebleu
    import torch

    from nmtcli import Translator

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a data dir `nmt prepare` wrote (its test split is translated)")
    parser.add_argument("--models", type=Path, nargs="+", required=True)
    parser.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.2, 0.4, 0.7, 1.0])
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--lines", type=int, default=0, help="the first N test lines (0: all)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sources, references = test_split(args.data)
    if args.lines:
        sources, references = sources[: args.lines], references[: args.lines]
    print(f"{len(sources)} test lines of {args.data}, beam {args.beam}, alpha {args.alpha}, {args.threads} thread(s), torch {torch.__version__}")
    print("| model | beta | BLEU | chrF2 | BP | hyp/ref | seconds | time / beta 0 |")
    print("|---|---|---|---|---|---|---|---|")
    rows: dict[float, list[tuple[float, float, float, float]]] = {b: [] for b in args.betas}
    for model in args.models:
        translator = Translator.load(model, device="cpu")
        translator.translate(sources[:20], beam=args.beam)  # warm: the first batches pay for allocation
        base = None
        for beta in args.betas:
            start = time.perf_counter()
            out = translator.translate(sources, beam=args.beam, alpha=args.alpha, coverage_penalty=beta, protect=False)
            seconds = time.perf_counter() - start
            base = seconds if base is None else base
            hyps = [t.text for t in out]
            bleu = sacrebleu.corpus_bleu(hyps, [references])
            chrf = sacrebleu.corpus_chrf(hyps, [references]).score
            ratio = bleu.sys_len / bleu.ref_len
            rows[beta].append((bleu.score, chrf, bleu.bp, seconds / base))
            print(f"| {model} | {beta} | {bleu.score:.1f} | {chrf:.1f} | {bleu.bp:.3f} | {ratio:.3f} | {seconds:.1f} | {seconds / base:.2f} |",
                  flush=True)
    print(f"\nmean over {len(args.models)} model(s)")
    print("| beta | BLEU | chrF2 | BP | time / beta 0 (median) |")
    print("|---|---|---|---|---|")
    for beta, values in rows.items():
        bleu, chrf, bp, times = zip(*values)
        print(f"| {beta} | {statistics.mean(bleu):.2f} | {statistics.mean(chrf):.2f} | {statistics.mean(bp):.3f} | "
              f"{statistics.median(times):.2f} |")


if __name__ == "__main__":
    main()
