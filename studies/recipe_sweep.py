"""Training recipes compared over seeds on one prepared corpus: the mean and the spread of test BLEU.

Issue 40: tiny on a small corpus moves several BLEU points from seed to seed, so a recipe is judged by the
mean and the spread over seeds, not by one run. For each recipe given with --recipe NAME="FLAGS" and each
seed, the user's pipeline:

    nmt train --data DATA --preset PRESET --max-steps STEPS --seed S --device cpu FLAGS
                               (--steps 0: without --max-steps, the preset's own schedule)
    nmt average RUN            (the run's own default choice of checkpoints)
    nmt translate -m MODEL (beam 4, alpha 0.6 and --alphas) on DATA's test split; BLEU, chrF2, BP (sacreBLEU)

Each run gets one CPU thread (OMP_NUM_THREADS, unless set); --jobs runs at a time. Finished runs in
--workdir are reused (their scores kept in NAME-sSEED/score.json; delete the dir to rerun).

Printed: one row per run (BLEU, chrF2, BP and hyp/ref length at each alpha, the best validation perplexity),
then per recipe the mean, stdev (n-1), min and max of BLEU at alpha 0.6, and the mean BP.

    python studies/recipe_sweep.py --data data/demo --recipe default= --recipe lr2e-3="--lr 2e-3" \\
        --seeds 1 2 3 4 5 --steps 1500 --jobs 2 --workdir /tmp/sweep
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from seed_spread import ROOT, nmt  # `nmt ARGS` of a code tree, one thread, its output to a log file

sys.path.insert(0, str(ROOT))


def score(model: Path, data: Path, alphas: list[float]) -> dict:
    """BLEU, chrF2, BP and length ratio of `model` on `data`'s test split at each alpha (beam 4), in this process."""
    import sacrebleu
    import torch

    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    manifest = json.loads((data / "manifest.json").read_text())
    sources = (data / f"test.{manifest['source_lang']}").read_text(encoding="utf-8").splitlines()
    references = (data / f"test.{manifest['target_lang']}").read_text(encoding="utf-8").splitlines()
    translator = Translator(model, "cpu")
    scores = {}
    for alpha in alphas:
        hypotheses = [nbest[0].text for nbest in translator.translate_lines(sources, SearchSettings(alpha=alpha))]
        bleu = sacrebleu.corpus_bleu(hypotheses, [references])
        scores[str(alpha)] = {"bleu": bleu.score, "chrf": sacrebleu.corpus_chrf(hypotheses, [references]).score,
                              "bp": bleu.bp, "ratio": bleu.sys_len / bleu.ref_len}
    return scores


def best_valid_ppl(run: Path) -> float | None:
    """The lowest validation perplexity the run's metrics.jsonl records."""
    values = [json.loads(line).get("valid_ppl") for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    values = [v for v in values if v is not None]
    return min(values) if values else None


def one_run(args: argparse.Namespace, name: str, flags: str, seed: int) -> dict:
    out = Path(args.workdir).resolve() / f"{name}-s{seed}"
    saved = out / "score.json"
    if saved.is_file():
        return json.loads(saved.read_text())
    out.mkdir(parents=True, exist_ok=True)
    if not (out / "model" / "config.json").is_file():
        # --steps 0: the preset's own schedule (tiny: epochs, at least 4,000 steps, early stopping on valid BLEU)
        budget = ["--max-steps", str(args.steps), "--valid-every", str(args.valid_every)] if args.steps else []
        nmt(ROOT, "train", "--data", str(Path(args.data).resolve()), "--preset", args.preset, "-o", str(out / "run"), *budget,
            "--seed", str(seed), "--device", "cpu", "--restart", *shlex.split(flags), log=out / "train.log")
        nmt(ROOT, "average", str(out / "run"), "-o", str(out / "model"), log=out / "average.log")
    result = {"recipe": name, "flags": flags, "seed": seed, "steps": args.steps, "valid_ppl": best_valid_ppl(out / "run"),
              "scores": score(out / "model", Path(args.data).resolve(), args.alphas)}
    saved.write_text(json.dumps(result, indent=1))
    print(row(result, args.alphas), flush=True)
    return result


def row(result: dict, alphas: list[float]) -> str:
    cells = [f"{s['bleu']:.1f} / {s['chrf']:.1f} / {s['bp']:.3f} / {s['ratio']:.3f}" for s in (result["scores"][str(a)] for a in alphas)]
    ppl = f"{result['valid_ppl']:.1f}" if result["valid_ppl"] is not None else "-"
    return f"| {result['recipe']} | {result['seed']} | {ppl} | " + " | ".join(cells) + " |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a data dir `nmt prepare` wrote")
    parser.add_argument("--recipe", action="append", default=[], metavar="NAME=FLAGS", help="more `nmt train` flags, named (repeatable)")
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--steps", type=int, default=1500, help="training steps a run (0: the preset's own schedule and early stopping)")
    parser.add_argument("--valid-every", type=int, default=250)
    parser.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.0], help="length penalties scored (the first is the summary's)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (one thread each)")
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    recipes = [spec.split("=", 1) for spec in args.recipe or ["default="]]
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda job: one_run(args, *job), [(n, f, s) for s in args.seeds for n, f in recipes]))
    alphas = args.alphas
    print(f"\n{args.preset}, {args.steps or 'its own schedule of'} steps, {args.data}; BLEU / chrF2 / BP / hyp:ref at each alpha (beam 4)")
    print("| recipe | seed | best valid ppl | " + " | ".join(f"alpha {a}" for a in alphas) + " |")
    print("|---|---|---|" + "---|" * len(alphas))
    for result in results:
        print(row(result, alphas))
    print(f"\n| recipe | flags | seeds | mean BLEU | stdev | min | max | mean BP (alpha {alphas[0]}) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, flags in recipes:
        mine = [r["scores"][str(alphas[0])] for r in results if r["recipe"] == name]
        bleu = [s["bleu"] for s in mine]
        spread = statistics.stdev(bleu) if len(bleu) > 1 else 0.0
        print(f"| {name} | {flags or '(none)'} | {len(bleu)} | {statistics.mean(bleu):.1f} | {spread:.1f} | {min(bleu):.1f} | "
              f"{max(bleu):.1f} | {statistics.mean(s['bp'] for s in mine):.3f} |")


if __name__ == "__main__":
    main()
