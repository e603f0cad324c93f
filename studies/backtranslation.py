"""Back-translation in `nmt prepare` (issue 53, part 3): BLEU without, with untagged and with tagged back-translation.

The small-parallel setting: a few real pairs and about ten times as much target-side text, the target sides of other
pairs of the same corpus (never of the valid or test split), so that the monolingual text is in-domain and known
to be German:

- `demo`: the demo corpus shipped with nmt (4,228 training pairs of English-German UI strings): the first `--real`
  (400) as the real pairs, the German of the other 3,828 as the monolingual text (9.6 x), its own valid and test
  splits. The demo corpus is too small for "a few thousand real pairs plus ten times as much";
- `generated`: tests/corpus.py's rule task with years (studies/cleaning.py's `generated`): `--real` (300) real
  pairs and ten times as many German sentences of other pairs, 500 valid and 500 test pairs. The rule task is nearly
  learnt from 1,000 pairs (BLEU 98.5 at 1,200 steps, studies/results/seed-spread-cpu-2026-11-26.txt), so more real
  pairs leave back-translation nothing to add.

Every model is `--preset tiny`, `--steps` (1,500) steps, its last checkpoints averaged: the reverse (de->en) model,
trained on the real pairs reversed (seed 1), then the forward models of three conditions, each with seeds 1-3:
`none` (the real pairs), `untagged` (the real pairs and the back-translations, --no-bt-tag), `tagged` (the same
back-translations, tagged <BT>: Caswell et al. 2019); the real pairs upsampled to 1:1 (the default --bt-ratio).
The back-translation is made once (beam 5) and reused by the second prepare (DATA/backtranslation.json). BLEU and
chrF on the test split, `nmt score`; the table gives each condition's mean and each seed's.

    python studies/backtranslation.py --corpus demo --workdir /tmp/bt-demo        # 1 + 9 trainings
    python studies/backtranslation.py --corpus generated --workdir /tmp/bt-gen
    python studies/backtranslation.py --smoke --workdir /tmp/bt-smoke             # the pipeline, in seconds

A run appends each result to WORKDIR/results.jsonl and skips what is done, so a killed run continues; the table goes
to stdout and, but for --smoke, to studies/results/backtranslation-CORPUS-cpu-DATE.txt.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "studies"))

CONDITIONS = {"none": [], "untagged": ["--no-bt-tag"], "tagged": []}
SEEDS = (1, 2, 3)


def corpus(name: str, real: int, mono_ratio: float) -> dict[str, list]:
    """{"real": pairs, "mono": German lines, "valid": pairs, "test": pairs}."""
    if name == "demo":
        from nmtcli.data.sources import BundledTsv

        splits = {split: list(BundledTsv("demo/demo.en-de.tsv.xz", split, "en", "de")._lines()) for split in ("train", "valid", "test")}
        train = splits["train"]
    else:
        from cleaning import generated_pair

        rng, seen, train = random.Random(0), set(), []
        want = real + int(real * mono_ratio) + 1_000
        while len(train) < want:
            pair = generated_pair(rng)
            if pair[0] not in seen:
                seen.add(pair[0])
                train.append(pair)
        splits = {"valid": train[-1_000:-500], "test": train[-500:]}
        train = train[:-1_000]
    mono = [t for _, t in train[real:real + int(real * mono_ratio)]]
    return {"real": train[:real], "mono": mono, "valid": splits["valid"], "test": splits["test"]}


def write(prefix: Path, pairs: list[tuple[str, str]], src: str = "en", tgt: str = "de") -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for lang, side in ((src, 0), (tgt, 1)):
        Path(f"{prefix}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")


def nmt(*args: str, log: Path) -> str:
    """`nmt ARGS` of this tree, its stderr appended to `log` (cleaning.py's runner)."""
    from cleaning import run_nmt

    return run_nmt(*args, log=log, code=ROOT)


def train(data: Path, out: Path, steps: int, seed: int, log: Path) -> float:
    """tiny for `steps` steps, averaged into out/model; returns the training's minutes (0 when it was there)."""
    if (out / "model" / "config.json").is_file():
        return 0.0
    started = time.time()
    nmt("train", "--data", str(data), "--preset", "tiny", "--max-steps", str(steps), "--seed", str(seed), "-o", str(out / "run"),
        "--save-every", str(max(1, steps // 10)), log=log)
    minutes = (time.time() - started) / 60
    nmt("average", str(out / "run"), "-o", str(out / "model"), log=log)
    return minutes


def score(model: Path, log: Path) -> dict[str, float]:
    scores = json.loads(nmt("score", "-m", str(model), "--json", log=log))["scores"]
    return {s["name"].split("2")[0].lower(): s["score"] for s in scores}  # BLEU, chrF2 -> bleu, chrf


def run(workdir: Path, name: str, real: int, mono_ratio: float, steps: int, seeds: tuple[int, ...],
        held_out: int | None = None) -> tuple[list[dict], dict[str, float]]:
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "log.txt"
    results_file = workdir / "results.jsonl"
    done = {(r["condition"], r["seed"]): r for r in map(json.loads, results_file.read_text().splitlines())} if results_file.exists() else {}
    text = corpus(name, real, mono_ratio)
    files = workdir / "corpus"
    write(files / "real", text["real"])
    write(files / "valid", text["valid"][:held_out])  # --smoke: 20 pairs each (untrained models write long lines)
    write(files / "test", text["test"][:held_out])
    (files / "mono.de").write_text("".join(line + "\n" for line in text["mono"]), encoding="utf-8")
    print(f"{name}: {len(text['real']):,} real pairs, {len(text['mono']):,} target-side lines ({len(text['mono']) / len(text['real']):.1f} x), "
          f"{len(text['test'][:held_out]):,} test pairs", file=sys.stderr)

    # The reverse model: the real pairs read de->en.
    reverse_data = workdir / "data" / "reverse"
    if not (reverse_data / "manifest.json").is_file():
        nmt("prepare", "--train", str(files / "real"), "--valid", str(files / "valid"), "--test", str(files / "test"), "-s", "de", "-t", "en",
            "-o", str(reverse_data), log=log)
    reverse_minutes = train(reverse_data, workdir / "reverse", steps, 1, log)
    reverse = workdir / "reverse" / "model"

    base = ["--train", str(files / "real"), "--valid", str(files / "valid"), "--test", str(files / "test"), "-s", "en", "-t", "de"]
    bt = ["--target-mono", str(files / "mono.de"), "--bt-model", str(reverse)]
    for condition, flags in CONDITIONS.items():
        data = workdir / "data" / condition
        if condition == "tagged" and not (data / "backtranslation.json").exists():  # the untagged run's translation, reused
            data.mkdir(parents=True, exist_ok=True)
            for f in (workdir / "data" / "untagged").glob("backtranslation.*"):
                if f.is_file():
                    shutil.copy(f, data / f.name)
        if not (data / "manifest.json").is_file():
            started = time.time()
            nmt("prepare", *base, *([] if condition == "none" else bt), *flags, "-o", str(data), log=log)
            print(f"prepared {condition} in {time.time() - started:.0f} s", file=sys.stderr)
        manifest = json.loads((data / "manifest.json").read_text())
        for seed in seeds:
            if (condition, seed) in done:
                continue
            out = workdir / "runs" / f"{condition}-{seed}"
            minutes = train(data, out, steps, seed, log)
            result = {"corpus": name, "condition": condition, "seed": seed, "steps": steps, **score(out / "model", log),
                      "train_pairs": manifest["splits"]["train"]["pairs"], "train_minutes": round(minutes, 1),
                      "reverse_train_minutes": round(reverse_minutes, 1),
                      **({"synthetic_pairs": manifest["backtranslation"]["pairs"], "upsample": manifest["backtranslation"]["upsample"]}
                         if "backtranslation" in manifest else {})}
            with open(results_file, "a") as f:
                f.write(json.dumps(result) + "\n")
            done[(condition, seed)] = result
            print(json.dumps(result), file=sys.stderr)
    reverse_score = score(reverse, log)
    return [done[(c, s)] for c in CONDITIONS for s in seeds], reverse_score


def table(results: list[dict], reverse: dict[str, float]) -> str:
    lines = ["| condition | train pairs (real x upsample + synthetic) | BLEU mean | chrF mean | BLEU by seed |", "|---|---|---|---|---|"]
    for condition in CONDITIONS:
        rows = [r for r in results if r["condition"] == condition]
        bleu = [r["bleu"] for r in rows]
        chrf = [r["chrf"] for r in rows]
        pairs = f"{rows[0]['train_pairs']:,}" + (f" (x{rows[0]['upsample']} + {rows[0]['synthetic_pairs']:,})" if "upsample" in rows[0] else "")
        spread = f" +- {statistics.stdev(bleu):.1f}" if len(bleu) > 1 else ""
        lines.append(f"| {condition} | {pairs} | {statistics.mean(bleu):.1f}{spread} | {statistics.mean(chrf):.1f} | "
                     + ", ".join(f"{b:.1f}" for b in bleu) + " |")
    lines.append(f"\nthe reverse (de->en) model on the test split: BLEU {reverse['bleu']:.1f}, chrF {reverse['chrf']:.1f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--corpus", choices=("demo", "generated"), default="demo")
    parser.add_argument("--real", type=int, help="real pairs (demo: 400, generated: 300)")
    parser.add_argument("--mono-ratio", type=float, default=10.0, help="target-side lines per real pair (at most what the corpus has)")
    parser.add_argument("--steps", type=int, default=1_500)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(SEEDS))
    parser.add_argument("--smoke", action="store_true", help="the whole pipeline, quickly: 100 real pairs, 50 lines, 20 valid and test pairs, "
                        "5 steps, seed 1")
    args = parser.parse_args()
    real = args.real or (400 if args.corpus == "demo" else 300)
    if args.smoke:
        real, args.mono_ratio, args.steps, args.seeds = 100, 0.5, 5, [1]
    started = time.time()
    results, reverse = run(args.workdir, args.corpus, real, args.mono_ratio, args.steps, tuple(args.seeds), 20 if args.smoke else None)
    text = (f"$ python studies/backtranslation.py {' '.join(sys.argv[1:])}\n{args.corpus}: {real:,} real pairs, tiny, {args.steps:,} steps, "
            f"seeds {', '.join(map(str, args.seeds))}; {time.time() - started:.0f} s\n\n{table(results, reverse)}\n")
    print(text)
    if not args.smoke:
        out = ROOT / "studies" / "results" / f"backtranslation-{args.corpus}-cpu-{time.strftime('%Y-%m-%d')}.txt"
        out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
