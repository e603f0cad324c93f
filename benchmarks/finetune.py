"""Fine-tuning an OPUS-MT-shaped model with `nmt train --init`: what it gains in domain, what it forgets, what a step costs.

The base model is the tests' Marian fixture (tests/marian_fixture.py: a small MarianMTModel that
transformers itself trained on the synthetic corpus of tests/corpus.py), imported with
`nmt import marian`. The "domain" is the same language with the verb after the subject; the general
test set is the base model's own language. For each peak learning rate the model is fine-tuned with
the fine-tuning recipe (`nmt train --init`, early stopping on valid BLEU) and the best checkpoint is
scored on both test sets (sacreBLEU, through `nmt translate` + `nmt score`).

The step-time part compares a step of `nmt train --init MODEL` with a step of `nmt train` from
scratch on the same model shape and the same batches (the same Trainer, random weights instead of
the model's), alternating the two, medians; on the fixture's shape and on the shape of the real
OPUS-MT models (6+6 layers, d_model 512, 58,101 pieces; random weights, Marian's switches).

    python benchmarks/finetune.py                    # CPU; a few minutes on an idle machine
    python benchmarks/finetune.py --lr-factors 1 --steps 300 --skip-speed
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def nmt(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "nmtcli", *args], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    if result.returncode != 0:
        raise SystemExit(f"nmt {' '.join(args)} failed:\n{result.stderr}")
    return result.stdout


def bleu(model: Path, prefix: Path) -> float:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as out:
        out.write(subprocess.run([sys.executable, "-m", "nmtcli", "translate", "-m", str(model), "--device", "cpu"],
                                 input=Path(f"{prefix}.en").read_text(), capture_output=True, text=True, check=True,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)}).stdout)
    return json.loads(nmt("score", out.name, "--ref", f"{prefix}.de", "--json"))["scores"][0]["score"]


def quality(root: Path, factors: list[float], steps: int) -> list[tuple[str, float, float, int]]:
    from corpus import write_corpus
    from marian_fixture import write_marian_model

    from nmtcli.training.finetune import default_lr

    base = root / "models" / "opus-mt-en-de"
    nmt("import", "marian", str(write_marian_model(root / "marian" / "opus-mt-en-de")), "-o", str(base))
    indomain = write_corpus(root / "indomain", {"train": 1000, "valid": 100, "test": 200}, seed=5, verb_second=True)
    general = write_corpus(root / "general", {"test": 200}, seed=7)
    data = root / "data"
    nmt("prepare", "--vocab-from", str(base), "--train", str(indomain["train"]), "--valid", str(indomain["valid"]),
        "--max-ratio", "3", "-o", str(data))
    rows = [("base model (step 0)", bleu(base, indomain["test"]), bleu(base, general["test"]), 0)]
    d_model = json.loads((base / "config.json").read_text())["model"]["d_model"]
    for factor in factors:
        lr = factor * default_lr(d_model)
        run, best = root / f"run-{factor}", root / f"best-{factor}"
        nmt("train", "--init", str(base), "--data", str(data), "-o", str(run), "--max-steps", str(steps), "--lr", f"{lr:.6g}",
            "--valid-every", "50", "--valid-bleu", "100", "--device", "cpu")
        nmt("average", str(run / "checkpoints" / "best"), "-o", str(best))
        step = json.loads((run / "checkpoints" / "best" / "config.json").read_text())["step"]
        label = f"--lr {lr:.2g} ({factor:g} x default)"
        rows.append((label, bleu(best, indomain["test"]), bleu(best, general["test"]), step))
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
        nmt("prepare", "--vocab-from", str(model_dir), "--train", str(root / "indomain" / "train"), "--valid", str(root / "indomain" / "valid"),
            "--max-ratio", "3", "-o", str(root / "data-opus-mt"))
    data = root / ("data-opus-mt" if shape == "opus-mt" else "data")
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
    parser.add_argument("--lr-factors", default="0.3,1,3,10", help="peak learning rates to compare, as multiples of the default")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=10, help="timed steps per system and shape")
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nmt-finetune-bench-"))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; work dir {root}", file=sys.stderr)
    rows = quality(root, [float(f) for f in args.lr_factors.split(",")], args.steps)
    print("| model | in-domain BLEU | general BLEU | best step |\n|---|---|---|---|")
    for label, indomain, general, step in rows:
        print(f"| {label} | {indomain:.1f} | {general:.1f} | {step} |")
    if not args.skip_speed:
        print("\n| shape | s/step --init | s/step from scratch | ratio |\n|---|---|---|---|")
        for shape in ("fixture", "opus-mt"):
            init, scratch = step_times(shape, root, args.repeats)
            print(f"| {shape} | {init:.3f} | {scratch:.3f} | {init / scratch:.2f} |")
    print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()
