"""The calibrated brevity penalty (`nmt average`'s, issue 40) on models that end sentences early: for each model, the
weight `nmt average` would record (found on the data dir's validation split, training/brevity.py), then the test
split translated with the paper's search (weight 0) and with that weight: BLEU, chrF2, BLEU's brevity penalty and
the time, one row per model, then the means over the models.

    OMP_NUM_THREADS=1 python studies/brevity_penalty.py --data data/demo --models runs/a/model runs/b/model

The models are read as they are (a model dir's own "search" section is ignored: both searches are given here).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from coverage_penalty import ROOT, test_split  # noqa: F401  (ROOT: the tree's nmtcli on sys.path)


def main() -> None:
    import sacrebleu
    import torch

    from nmtcli.data.prepare import read_manifest
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator
    from nmtcli.training.brevity import calibrate

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="the data dir `nmt prepare` wrote that the models were trained on")
    parser.add_argument("--models", type=Path, nargs="+", required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    manifest = read_manifest(args.data)
    sources, references = test_split(args.data)
    print(f"{len(sources)} test lines of {args.data}, beam 4, alpha 0.6, {args.threads} thread(s), torch {torch.__version__}")
    print("| model | weight | valid BP | valid BLEU | test BLEU | chrF2 | BP | calibrating (s) | time / weight 0 |")
    print("|---|---|---|---|---|---|---|---|---|")
    rows: dict[str, list[tuple[float, float, float]]] = {"paper's search (weight 0)": [], "calibrated": []}
    times = []
    for model in args.models:
        start = time.perf_counter()
        found = calibrate(model, args.data, manifest, "cpu")
        calibrating = time.perf_counter() - start
        translator = Translator(model, "cpu")
        seconds = []
        for name, weight in (("paper's search (weight 0)", 0.0), ("calibrated", found.weight)):
            settings = SearchSettings(brevity_penalty=weight, length_ratio=found.length_ratio)
            start = time.perf_counter()
            hyps = [h[0].text if h else "" for h in translator.translate_lines(sources, settings)]
            seconds.append(time.perf_counter() - start)
            bleu = sacrebleu.corpus_bleu(hyps, [references])
            chrf = sacrebleu.corpus_chrf(hyps, [references]).score
            rows[name].append((bleu.score, chrf, bleu.bp))
            valid = found.trial(weight)
            print(f"| {model} | {weight:g} | {valid.bp:.3f} | {valid.bleu:.1f} | {bleu.score:.1f} | {chrf:.1f} | {bleu.bp:.3f} | "
                  f"{calibrating:.1f} | {seconds[-1] / seconds[0]:.2f} |", flush=True)
        times.append(seconds[1] / seconds[0])
    print(f"\nmean (stdev) over {len(args.models)} model(s); time: median")
    print("| search | test BLEU | chrF2 | BP | time |")
    print("|---|---|---|---|---|")
    for name, values in rows.items():
        bleu, chrf, bp = zip(*values)
        spread = f" ({statistics.stdev(bleu):.1f})" if len(bleu) > 1 else ""
        print(f"| {name} | {statistics.mean(bleu):.2f}{spread} | {statistics.mean(chrf):.2f} | {statistics.mean(bp):.3f} | "
              f"{1.0 if name.startswith('paper') else statistics.median(times):.2f} |")


if __name__ == "__main__":
    main()
