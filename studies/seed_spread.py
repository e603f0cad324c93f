"""The seed spread of a short tiny run on the rule task, for one or two code trees side by side.

Issue 40 item 2: the end-to-end rule-task check (tiny, 1,200 steps, seed 1) scored 68.7 held-out BLEU on
the code of 2026-11-22 and 50-51 since; a learning regression or a seed lottery? For each code tree given
with --code NAME=PATH (default: this tree) and each seed, the user's pipeline with every default:

    nmt prepare --train corpus/train --valid corpus/valid --test corpus/test -s en -t de --vocab-size 1000
    nmt train --preset tiny --max-steps STEPS --seed S --device cpu (+ --train-args)
    nmt average RUN
    nmt translate -m MODEL < test.en ; nmt score (sacreBLEU) against test.de

Each code runs with its own PYTHONPATH and this Python (OMP_NUM_THREADS=1 unless set: one core a run).
The corpus is tests/corpus.py's rule task (lexicon + adjectives after the noun + verb last), --pairs
training pairs, 200 valid and 500 test lines, written once; each code prepares it itself.

Printed: per code and seed the held-out BLEU and the valid loss at each validation; per code the mean,
stdev (n-1), min and max of BLEU; with --cross, every model also translated by every other code (the
search question: the same weights through both codes, BLEU and whether the outputs are identical).
Runs already finished in --workdir are reused (delete the dir to rerun).

    python studies/seed_spread.py --code old=/work/wt-old --code new=. --seeds 1 2 3 4 5 --jobs 2 --cross --workdir /tmp/ss
    python studies/seed_spread.py --seeds 1 2 3 --train-args "--warmup 400" --workdir /tmp/ss-w400
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def nmt(code: Path, *args: str, input: str | None = None, log: Path | None = None) -> str:
    """`nmt ARGS` of the code tree `code`; with `log`, its output goes to that file (a training outlives this
    process, which a pipe to a killed study would not let it)."""
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    command = [sys.executable, "-m", "nmtcli", *args]
    # cwd: `python -m` puts the working directory before PYTHONPATH, so run from the code tree itself
    if log is not None:
        with open(log, "w") as out:
            code_ = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=code).returncode
        if code_ != 0:
            raise SystemExit(f"nmt {' '.join(args)} ({code}) failed:\n{log.read_text()[-3000:]}")
        return ""
    result = subprocess.run(command, capture_output=True, text=True, env=env, input=input, cwd=code)
    if result.returncode != 0:
        raise SystemExit(f"nmt {' '.join(args)} ({code}) failed:\n{result.stderr[-3000:]}")
    return result.stdout


def corpus(work: Path, pairs: int, seed: int) -> Path:
    from corpus import write_corpus

    out = work / f"corpus-{pairs}-seed{seed}"
    if not (out / "test.de").is_file():
        write_corpus(out, {"train": pairs, "valid": 200, "test": 500}, seed=seed)
    return out


def prepare(code: Path, name: str, text: Path, work: Path) -> Path:
    data = work / f"data-{name}"
    if not (data / "manifest.json").is_file():
        nmt(code, "prepare", "--train", str(text / "train"), "--valid", str(text / "valid"), "--test", str(text / "test"),
            "-s", "en", "-t", "de", "--vocab-size", "1000", "-o", str(data))
    return data


def bleu(hypotheses: Path, references: Path) -> float:
    return json.loads(nmt(ROOT, "score", str(hypotheses), "--ref", str(references), "--json"))["scores"][0]["score"]


def train(code: Path, name: str, data: Path, seed: int, steps: int, extra: list[str], work: Path, also: dict[str, list[int]]) -> dict:
    """One run of one code: train (every checkpoint kept: --keep-last changes nothing else), average with the
    defaults, and also average each --also-average set; its valid curve, minutes, models and what was averaged."""
    run, model = work / f"run-{name}-seed{seed}", work / f"model-{name}-seed{seed}"
    started = time.perf_counter()
    if not (model / "config.json").is_file():
        final, metrics = run / "checkpoints" / str(steps), run / "metrics.jsonl"
        if not final.is_dir() and not (metrics.is_file() and time.time() - metrics.stat().st_mtime < 300):
            nmt(code, "train", "--data", str(data), "--preset", "tiny", "--max-steps", str(steps), "--seed", str(seed),
                "--device", "cpu", "-o", str(run), "--restart", "--keep-last", "1000", *extra, log=work / f"train-{name}-seed{seed}.log")
        while not final.is_dir():  # an earlier invocation of this study is still training it
            time.sleep(30)
        nmt(code, "average", str(run), "-o", str(model), log=work / f"average-{name}-seed{seed}.txt")
    models = {"default": model}
    for label, at in also.items():  # the same run's checkpoints averaged another way (by this tree's nmt average)
        if not all((run / "checkpoints" / str(step)).is_dir() for step in at):
            continue  # a code that saved elsewhere (the old tiny saved every 250 steps)
        models[label] = work / f"model-{name}-seed{seed}-{label}"
        if not (models[label] / "config.json").is_file():
            nmt(ROOT, "average", *(str(run / "checkpoints" / str(step)) for step in at), "-o", str(models[label]))
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    valid = {v["step"]: v["valid_nll"] for v in lines if "valid_nll" in v}
    averaged = (work / f"average-{name}-seed{seed}.txt").read_text().strip().splitlines()
    return {"models": models, "valid_nll": valid, "minutes": (time.perf_counter() - started) / 60,
            "averaged": next((line for line in averaged if "averaging" in line), "?")}


# Model config keys added after 2026-11-22, with the value that means what the code of then did: a model dir of this
# code without them is the same model to the older code (which refuses keys it does not know).
LATER_KEYS = {"position_offset": 0, "language_tags": False}


def readable_by_older(model: Path, work: Path) -> Path:
    """A copy of `model` whose config leaves out LATER_KEYS where they hold the older code's meaning."""
    copy = work / f"{model.name}-for-older"
    if not (copy / "config.json").is_file():
        shutil.copytree(model, copy, dirs_exist_ok=True)
        config = json.loads((model / "config.json").read_text())
        config["model"] = {k: v for k, v in config["model"].items() if LATER_KEYS.get(k, object()) != v}
        (copy / "config.json").write_text(json.dumps(config, indent=2))
    return copy


def translate(code: Path, name: str, model: Path, text: Path, work: Path, foreign: bool = False) -> tuple[float, Path]:
    """`code` translates the test split with `model` (made by another code if `foreign`): BLEU and the output file."""
    out = work / f"hyp-{model.name}-by-{name}.txt"
    if not out.is_file():
        source = (text / "test.en").read_text()
        try:
            out.write_text(nmt(code, "translate", "-m", str(model), "--device", "cpu", input=source))
        except SystemExit as failed:
            if "unknown model config keys" not in str(failed):  # a model averaged by a later code
                raise
            out.write_text(nmt(code, "translate", "-m", str(readable_by_older(model, work)), "--device", "cpu", input=source))
    return bleu(out, text / "test.de"), out


def summary(values: list[float]) -> dict:
    return {"mean": statistics.mean(values), "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--code", action="append", default=[], metavar="NAME=PATH",
                        help="a code tree to run (its PYTHONPATH); repeat for two. Default: this tree as 'this'")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--code-seeds", action="append", default=[], metavar="NAME=SEED,SEED",
                        help="run only these of --seeds with that code (e.g. old=1,2: the others with every code)")
    parser.add_argument("--pairs", type=int, default=2000, help="training pairs of the rule task")
    parser.add_argument("--corpus-seed", type=int, default=0, help="write_corpus's seed (the corpus itself)")
    parser.add_argument("--train-args", default="", help="more `nmt train` flags for every code, e.g. '--warmup 400'")
    parser.add_argument("--also-average", action="append", default=[], metavar="LABEL=STEP,STEP,...",
                        help="also average these checkpoints of each run (where it has them all) and score that model")
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time (one thread each)")
    parser.add_argument("--cross", action="store_true", help="also translate every default model with every other code")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    args = parser.parse_args()
    codes = dict(c.split("=", 1) for c in args.code) or {"this": str(ROOT)}
    codes = {name: Path(path).resolve() for name, path in codes.items()}
    also = {label: [int(s) for s in steps.split(",")] for label, steps in (a.split("=", 1) for a in args.also_average)}
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    text = corpus(work, args.pairs, args.corpus_seed)
    data = {name: prepare(code, name, text, work) for name, code in codes.items()}
    only = {name: {int(s) for s in seeds.split(",")} for name, seeds in (c.split("=", 1) for c in args.code_seeds)}
    jobs = [(name, seed) for seed in args.seeds for name in codes if seed in only.get(name, {seed})]

    with ThreadPoolExecutor(args.jobs) as pool:
        runs = dict(zip(jobs, pool.map(lambda job: train(codes[job[0]], job[0], data[job[0]], job[1], args.steps,
                                                         args.train_args.split(), work, also), jobs)))
        translations = [(maker, seed, variant, by) for maker, seed in jobs for variant in runs[maker, seed]["models"]
                        for by in (codes if args.cross and variant == "default" else [maker])]
        scored = dict(zip(translations, pool.map(
            lambda t: translate(codes[t[3]], t[3], runs[t[0], t[1]]["models"][t[2]], text, work, t[3] != t[0]), translations)))
    results = {"pairs": args.pairs, "steps": args.steps, "seeds": args.seeds, "train_args": args.train_args,
               "codes": {n: str(c) for n, c in codes.items()}, "also_average": also, "runs": [], "summary": {}}
    for (maker, seed), run in runs.items():
        entry = {"code": maker, "seed": seed, "bleu": scored[maker, seed, "default", maker][0], "valid_nll": run["valid_nll"],
                 "averaged": run["averaged"], "minutes": round(run["minutes"], 1),
                 "bleu_also": {v: scored[maker, seed, v, maker][0] for v in run["models"] if v != "default"}}
        for by in codes:
            if args.cross and by != maker:
                entry[f"bleu_by_{by}"] = scored[maker, seed, "default", by][0]
                entry[f"same_output_as_{by}"] = (scored[maker, seed, "default", by][1].read_text()
                                                 == scored[maker, seed, "default", maker][1].read_text())
        results["runs"].append(entry)
    for name in codes:
        mine = [r for r in results["runs"] if r["code"] == name]
        results["summary"][name] = summary([r["bleu"] for r in mine])
        for label in also:
            values = [r["bleu_also"][label] for r in mine if label in r["bleu_also"]]
            if values:
                results["summary"][f"{name}, {label}"] = summary(values)
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"rule task: {args.pairs} training pairs, 500 test lines; tiny, {args.steps} steps, train args {args.train_args!r}")
    steps = sorted({s for r in results["runs"] for s in r["valid_nll"]})
    others = [b for b in codes if args.cross and len(codes) > 1]
    print("\n| code | seed | test BLEU | " + " | ".join([f"by {b} (same output?)" for b in others] + list(also)
                                                        + [f"valid nll @{s}" for s in steps]) + " | averaged |")
    print("|---|---|---|" + "---|" * (len(others) + len(also) + len(steps)) + "---|")
    for r in sorted(results["runs"], key=lambda r: (r["code"], r["seed"])):
        cells = [f"{r[f'bleu_by_{b}']:.1f} ({'yes' if r[f'same_output_as_{b}'] else 'no'})" if f"bleu_by_{b}" in r else "" for b in others]
        cells += [f"{r['bleu_also'][label]:.1f}" if label in r["bleu_also"] else "" for label in also]
        cells += [f"{r['valid_nll'][s]:.3f}" if s in r["valid_nll"] else "" for s in steps]
        print(f"| {r['code']} | {r['seed']} | {r['bleu']:.1f} | " + " | ".join(cells) + f" | {r['averaged'].removeprefix('nmt: ')} |")
    print("\n| code, model | seeds | mean BLEU | stdev | min | max |\n|---|---|---|---|---|---|")
    for name, s in results["summary"].items():
        print(f"| {name} | {s['n']} | {s['mean']:.1f} | {s['stdev']:.1f} | {s['min']:.1f} | {s['max']:.1f} |")


if __name__ == "__main__":
    main()
