"""Fine-tuning an OPUS-MT-shaped model with `nmt train --init`: what it learns of a domain, what it forgets, what a step costs.

The base model is the tests' Marian fixture (tests/marian_fixture.py: a small MarianMTModel that
transformers itself trained on the synthetic corpus of tests/corpus.py), imported with
`nmt import marian`. The domain is the same language in which six frequent target words translate
differently (tests/corpus.py's DOMAIN_WORDS: "hund" -> "koeter", "sieht" -> "schaut", ...); the
general test set is the base model's own language. At each in-domain size (--sizes) the base model
is fine-tuned twice:

- the old recipe: nmt 2026-11-25's defaults spelled out as flags (peak rate d_model^-0.5 x 100k^-0.5,
  warmup 100, a 100,000-step ceiling, BLEU early stopping with patience 5), then `nmt average RUN
  --at best` (the 5 checkpoints up to the best validation, the old default);
- the new recipe: `nmt train --init MODEL --data DIR` and `nmt average RUN` with every default.

Each model is scored on 500 in-domain and 500 general test lines (sacreBLEU through `nmt translate`
+ `nmt score`), and for the share of the domain's words it gets right: of the occurrences of
DOMAIN_WORDS' targets in the references, those the hypothesis has too (clipped counts per line).
`--curve` prints each validation of the old recipe's run at that size (valid BLEU on the in-domain
valid split, the learning rate at that step) and what `nmt average` took.

The step-time part compares a step of `nmt train --init MODEL` with a step of `nmt train` from
scratch on the same model shape and the same batches (the same Trainer, random weights instead of
the model's), alternating the two, medians; on the fixture's shape and on the shape of the real
OPUS-MT models (6+6 layers, d_model 512, 58,101 pieces; random weights, Marian's switches).

    OMP_NUM_THREADS=1 python studies/finetune.py --skip-speed     # CPU; an hour or more on one core
    python studies/finetune.py --sizes 2000 --systems new --skip-speed
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
OLD_RATE_STEP = 100_000  # the old recipe's peak rate: eq. 3 at step 100k


def nmt(*args: str, input: str | None = None) -> str:
    result = subprocess.run([sys.executable, "-m", "nmtcli", *args], capture_output=True, text=True, env=ENV, input=input)
    if result.returncode != 0:
        raise SystemExit(f"nmt {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def scores(model: Path, prefix: Path) -> tuple[float, float]:
    """(sacreBLEU, % of the domain words' occurrences in the references that the hypotheses have) on `prefix`."""
    from corpus import DOMAIN_WORDS

    hypotheses = nmt("translate", "-m", str(model), "--device", "cpu", input=Path(f"{prefix}.en").read_text())
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as out:
        out.write(hypotheses)
    bleu = json.loads(nmt("score", out.name, "--ref", f"{prefix}.de", "--json"))["scores"][0]["score"]
    words = set(DOMAIN_WORDS.values())
    right = total = 0
    for hyp, ref in zip(hypotheses.splitlines(), Path(f"{prefix}.de").read_text().splitlines()):
        wanted = Counter(w for w in ref.split() if w in words)
        got = Counter(hyp.split())
        total += sum(wanted.values())
        right += sum(min(n, got[w]) for w, n in wanted.items())
    return bleu, 100 * right / total if total else float("nan")


def base_model(root: Path, base_steps: int, marian: Path | None) -> Path:
    from marian_fixture import write_marian_model

    base = root / "models" / "opus-mt-en-de"
    nmt("import", "marian", str(marian or write_marian_model(root / "marian" / "opus-mt-en-de", train_steps=base_steps)), "-o", str(base))
    return base


def old_flags(base: Path) -> list[str]:
    d_model = json.loads((base / "config.json").read_text())["model"]["d_model"]
    lr = d_model**-0.5 * OLD_RATE_STEP**-0.5
    return ["--lr", f"{lr:.6g}", "--warmup", "100", "--max-steps", "100000", "--patience", "5", "--valid-bleu", "500",
            "--min-delta", "0"]


def finetune(base: Path, data: Path, run: Path, out: Path, system: str) -> dict:
    """Fine-tune `base` on `data` with the old or new recipe, average as that recipe does; what the run did."""
    started = time.perf_counter()
    flags = old_flags(base) if system == "old" else []
    nmt("train", "--init", str(base), "--data", str(data), "-o", str(run), "--device", "cpu", *flags)
    said = subprocess.run([sys.executable, "-m", "nmtcli", "average", str(run), "-o", str(out), *(["--at", "best", "--last", "5"] if system == "old" else [])],
                          capture_output=True, text=True, env=ENV, check=True).stderr
    averaged = re.search(r"averaging (\d+) checkpoint\(s\).*?: ([\d, ]+)", said)
    valid = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"valid_nll"' in line]
    best = json.loads((run / "checkpoints" / "best" / "config.json").read_text())["best"]
    return {"minutes": (time.perf_counter() - started) / 60, "steps": valid[-1]["step"] if valid else 0, "best": best,
            "averaged": averaged.group(2).strip() if averaged else "?", "valid": valid, "run": run}


def curve(reports: dict[str, dict], base: Path) -> None:
    """Each validation of the runs side by side: valid BLEU (in-domain) and the learning rate at that step."""
    from nmtcli.training.schedule import inverse_sqrt_lr, peak_scale

    d_model = json.loads((base / "config.json").read_text())["model"]["d_model"]
    columns = {}
    for system, report in reports.items():
        config = json.loads((report["run"] / "config.json").read_text())["training"]
        scale = peak_scale(d_model, config["warmup"], config["lr"])
        columns[system] = {v["step"]: (v.get("valid_bleu", float("nan")), inverse_sqrt_lr(v["step"], d_model, config["warmup"], scale), v.get("best"))
                           for v in report["valid"]}
    names = list(reports)
    runs = ", ".join(f"{n}: {reports[n]['run'].name}, best at {reports[n]['best']['step']}" for n in names)
    print(f"\nlearning curves ({runs}; * a new best):\n")
    print("| step | " + " | ".join(f"{n}: valid BLEU | {n}: rate" for n in names) + " |\n|---|" + "---|---|" * len(names))
    for step in sorted({step for c in columns.values() for step in c}):
        cells = []
        for n in names:
            if step in columns[n]:
                bleu, rate, best = columns[n][step]
                cells += [f"{bleu:.1f}{' *' if best else ''}", f"{rate:.1e}"]
            else:
                cells += ["", ""]
        print(f"| {step} | " + " | ".join(cells) + " |")


def replay(report: dict, patience: int, deltas: list[float]) -> None:
    """Where the run would have stopped with each min_delta: its validations replayed through the trainer's rule
    (early_stopping.py). Exact for any min_delta >= the run's own, which stops it no later."""
    from nmtcli.training.early_stopping import validations_without_progress

    print(f"\nmin_delta replayed on {report['run'].name} (patience {patience}):\n")
    print("| --min-delta (BLEU) | stops at step | validations | best valid BLEU by then | its step |\n|---|---|---|---|---|")
    valid = report["valid"]
    for delta in deltas:
        end = next((n for n in range(1, len(valid) + 1) if validations_without_progress(valid[:n], delta) >= patience), len(valid))
        best = max(valid[:end], key=lambda v: v["valid_bleu"])
        print(f"| {delta:g} | {valid[end - 1]['step']} | {end} | {best['valid_bleu']:.2f} | {best['step']} |")


def quality(root: Path, base: Path, sizes: list[int], systems: list[str], curve_size: int | None) -> list[tuple]:
    from corpus import DOMAIN_WORDS, write_corpus

    general = write_corpus(root / "general", {"test": 500}, seed=7)
    rows = []
    for size in sizes:
        indomain = write_corpus(root / f"indomain-{size}", {"train": size, "valid": 200, "test": 500}, seed=5, substitute=DOMAIN_WORDS)
        data = root / f"data-{size}"
        nmt("prepare", "--vocab-from", str(base), "--train", str(indomain["train"]), "--valid", str(indomain["valid"]),
            "--max-ratio", "3", "-o", str(data))
        pairs = json.loads((data / "manifest.json").read_text())["splits"]["train"]["pairs"]
        if not rows:
            rows.append(("base model", "-", *scores(base, indomain["test"]), scores(base, general["test"])[0], "", "", ""))
        reports = {}
        for system in systems:
            report = finetune(base, data, root / f"run-{system}-{size}", root / f"model-{system}-{size}", system)
            b, share = scores(root / f"model-{system}-{size}", indomain["test"])
            rows.append((f"{system} recipe", f"{size} ({pairs})", b, share, scores(root / f"model-{system}-{size}", general["test"])[0],
                         f"{report['steps']} (best {report['best']['step']}, {report['best']['value']:.1f})", report["averaged"],
                         f"{report['minutes']:.1f}"))
            print("| " + " | ".join(x if isinstance(x, str) else f"{x:.1f}" for x in rows[-1]) + " |", file=sys.stderr, flush=True)
            reports[system] = report
            if system == "old":  # what the old average cost: the same run's best checkpoint alone
                alone = root / f"model-old-best-{size}"
                nmt("average", str(report["run"]), "--at", "best", "--last", "1", "-o", str(alone))
                rows.append(("old recipe, best checkpoint alone", f"{size} ({pairs})", *scores(alone, indomain["test"]),
                             scores(alone, general["test"])[0], "", str(report["best"]["step"]), ""))
        if size == curve_size:
            curve(reports, base)
            for report in reports.values():
                replay(report, 5, [0, 0.1, 0.2, 0.5, 1.0])
    return rows


def step_times(shape: str, root: Path, repeats: int) -> tuple[float, float]:
    """Median seconds per step: (from --init, from scratch) on the same shape and batches."""
    import torch

    from nmtcli.model.checkpoint import model_dir_config, write_model_dir
    from nmtcli.model.config import ModelConfig
    from nmtcli.model.transformer import Transformer
    from nmtcli.training.finetune import finetune_settings, read_init
    from nmtcli.training.loader import StepLoader
    from nmtcli.training.trainer import Trainer

    fixture = root / "models" / "opus-mt-en-de"
    values = json.loads((fixture / "config.json").read_text())
    config = ModelConfig.from_dict(values["model"])
    model_dir = fixture
    data = root / "data-2000"
    if shape == "opus-mt":  # the real OPUS-MT shape; the fixture's tokenizer with vocab.json padded to 58,101 pieces
        vocab = json.loads((fixture / "vocab.json").read_text())
        pad = vocab.pop("<pad>")
        vocab.update({f"<unused{i}>": i for i in range(pad, 58100)})
        vocab["<pad>"] = 58100
        config = config.replace(vocab_size=58101, d_model=512, d_ff=2048, heads=8, layers=6, max_positions=512, pad_id=58100, bos_id=58100)
        model_dir = root / "models" / "opus-mt-shape"
        (root / "vocab.json").write_text(json.dumps(vocab))
        torch.manual_seed(0)
        files = {"source.spm": fixture / "source.spm", "target.spm": fixture / "target.spm", "vocab.json": root / "vocab.json"}
        write_model_dir(model_dir, Transformer(config).state_dict(), model_dir_config(config, "en", "de", tokenizer=values["tokenizer"]), files, "#\n")
        nmt("prepare", "--vocab-from", str(model_dir), "--train", str(root / "indomain-2000" / "train"), "--valid", str(root / "indomain-2000" / "valid"),
            "--max-ratio", "3", "-o", str(root / "data-opus-mt"))
        data = root / "data-opus-mt"
    init = read_init(model_dir)
    manifest = json.loads((data / "manifest.json").read_text())
    settings = finetune_settings(init, manifest, None, {"device": "cpu", "valid_bleu": 0})
    trainers = {"init": Trainer(root / f"speed-{shape}-init", data, init.config, settings, init=init),
                "scratch": Trainer(root / f"speed-{shape}-scratch", data, init.config, settings)}
    loaders = {k: StepLoader(t.stream, t.update_freq, 0, 1, t.device) for k, t in trainers.items()}
    times: dict[str, list[float]] = {"init": [], "scratch": []}
    for i in range(repeats + 2):
        for name in (("init", "scratch") if i % 2 else ("scratch", "init")):
            batches = next(loaders[name])
            start = time.perf_counter()
            trainers[name].train_step(batches)
            if i >= 2:  # the first steps warm up allocators and caches
                times[name].append(time.perf_counter() - start)
    for loader in loaders.values():
        loader.close()
    return statistics.median(times["init"]), statistics.median(times["scratch"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="500,2000,10000", help="in-domain training pairs, comma-separated")
    parser.add_argument("--systems", default="old,new", help="recipes to compare: old, new")
    parser.add_argument("--curve", type=int, default=2000, help="print the old recipe's learning curve at this size (0: none)")
    parser.add_argument("--base-steps", type=int, default=2000,
                        help="steps transformers trains the base model (the tests' fixture: 300, which leaves it at 39 general BLEU)")
    parser.add_argument("--marian", type=Path, help="a base model write_marian_model wrote before (the same --base-steps), instead of training one")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps per system and shape")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nmt-finetune-bench-"))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; work dir {root}", file=sys.stderr)
    base = base_model(root, args.base_steps, args.marian)
    rows = quality(root, base, [int(s) for s in args.sizes.split(",")], args.systems.split(","), args.curve or None)
    print("\n| model | in-domain pairs (after cleaning) | in-domain BLEU | domain words right % | general BLEU | steps (best step, its valid BLEU) "
          "| checkpoints averaged | minutes |\n|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(x if isinstance(x, str) else f"{x:.1f}" for x in row) + " |")
    if not args.skip_speed:
        print("\n| shape | s/step --init | s/step from scratch | ratio |\n|---|---|---|---|")
        for shape in ("fixture", "opus-mt"):
            init, scratch = step_times(shape, root, args.repeats)
            print(f"| {shape} | {init:.3f} | {scratch:.3f} | {init / scratch:.2f} |")
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
