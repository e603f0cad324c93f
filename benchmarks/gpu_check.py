#!/usr/bin/env python3
"""Everything issue 11 (training at H100 speed) measures on a GPU, in one command.

    python benchmarks/gpu_check.py --out gpu_check                  # one GPU, all stages: ~30 minutes on an H100
    python benchmarks/gpu_check.py --smoke --out /tmp/gpu_check     # CPU, tiny sizes: proves the script runs (~10 min)

The same in parts of under 10 minutes each (the summary gathers them; a later call reuses OUT/data):

    python benchmarks/gpu_check.py --out gpu_check --stages env,check,micro
    python benchmarks/gpu_check.py --out gpu_check --stages batch,corpus
    python benchmarks/gpu_check.py --out gpu_check --stages train --train-variants eager,gpus
    python benchmarks/gpu_check.py --out gpu_check --stages train --train-variants compile

Stages, in order (--stages picks some):
  env      PyTorch, CUDA, the GPU
  check    on the device, against the reference: the chunked loss (training/loss.py) against the loss over
           full logits, in fp32 and bf16 autocast (value and gradients), and packed source attention (the
           flash kernel for padded batches) against the masked kernel, in bf16; relative errors
  micro    benchmarks/train_throughput.py --preset both --precision bf16 at the paper's step (1000 x 25
           source + target tokens): nmt against Hugging Face MarianMTModel in the same run, plus nmt with
           the full-logits loss of before and nmt --compile; tokens/s, MFU, peak memory; and
           torch.profiler's top operations over 5 nmt steps (OUT/micro.log, traces in OUT/)
  batch    nmt alone, base, bf16, at 500, 1000, 2000 and 4000 sentences of 25 tokens a batch: target
           tokens/s, MFU and peak memory against the batch per GPU (what --max-tokens should default to)
  corpus   a generated WMT-shaped corpus (300,000 pairs, 32,000-piece vocabulary; benchmarks/prepare_speed.py's
           generator) through the real `nmt prepare` (OUT/data)
  train    the real `nmt train --preset base --max-time 3m` on it three ways: eager, --compile, and
           --gpus 1 (through torchrun); target tokens/s in the first minute and after it, MFU, steps
Writes OUT/summary.json and a log per stage, and prints a table last. --smoke runs the same stages on
a CPU with the tiny preset, small sizes and no --compile variants (inductor takes minutes on a CPU;
tests/test_training.py compiles for real there).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
NMT = [sys.executable, "-m", "nmtcli"]


def log_run(command: list[str], log: Path, timeout: float | None = None) -> tuple[int, list[tuple[float, str]]]:
    """Run a command, keeping each line of its output with the seconds since the start when it arrived."""
    started = time.perf_counter()
    lines: list[tuple[float, str]] = []
    env = {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1"}
    with open(log, "w", encoding="utf-8") as out:
        out.write("$ " + " ".join(command) + "\n")
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for line in process.stdout:
            at = time.perf_counter() - started
            lines.append((at, line.rstrip("\n")))
            out.write(f"[{at:8.1f}s] {line}")
            out.flush()
            if timeout and at > timeout:
                process.kill()
        rc = process.wait()
    return rc, lines


def stage_env(args) -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": sys.version.split()[0],
            "device": args.device}
    if args.device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpus"] = torch.cuda.device_count()
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    from nmtcli.model import packed_attention

    info["varlen_attention"] = packed_attention.varlen_attention() is not None  # loads it: the global starts as a sentinel
    try:
        info["nvidia_smi"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def relative_error(ours, reference) -> float:
    return float((ours.double() - reference.double()).norm() / reference.double().norm().clamp_min(1e-30))


def stage_check(args) -> dict:
    """The fused paths against their references on the device: relative errors (bf16: expect 1e-3 to 1e-2)."""
    import contextlib

    import torch
    import torch.nn.functional as F

    from nmtcli.model import packed_attention, transformer
    from nmtcli.model.config import PRESETS
    from nmtcli.training.loss import output_loss

    sys.path.insert(0, str(HERE.parent / "tests"))
    from reference_loss import label_smoothed_loss  # the loss over full logits

    device = torch.device(args.device)
    out = {}
    torch.manual_seed(0)
    d, vocab, n = (512, 32000, 4096) if not args.smoke else (64, 1000, 300)
    for precision in ("fp32", "bf16"):
        hidden = torch.randn(n, d, device=device, requires_grad=True)
        weight = (torch.randn(vocab, d, device=device) * d**-0.5).requires_grad_()
        target = torch.randint(4, vocab, (n,), device=device)
        target[-n // 8 :] = 0
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
        results = []
        for chunked in (True, False):
            hidden.grad = weight.grad = None
            with autocast:
                if chunked:
                    loss, _ = output_loss(hidden, weight, None, target, 0.1, 0, int((target != 0).sum()))
                else:
                    loss, _ = label_smoothed_loss(F.linear(hidden, weight), target, 0.1, 0)
            loss.backward()
            results.append((loss.detach(), hidden.grad.clone(), weight.grad.clone()))
        (a, ga, wa), (b, gb, wb) = results
        out[f"loss_{precision}"] = {"loss": relative_error(a, b), "grad_hidden": relative_error(ga, gb),
                                    "grad_weight": relative_error(wa, wb)}
    config = (PRESETS["base"] if not args.smoke else PRESETS["tiny"]).replace(vocab_size=vocab, dropout=0.0)
    kernel = packed_attention.varlen_attention()
    if device.type != "cuda" or kernel is None:
        out["packed_attention"] = "skipped: no varlen flash kernel here (a CPU, or PyTorch before 2.10)"
        return out
    model = transformer.Transformer(config).to(device)
    src = torch.randint(4, vocab, (64, 48), device=device)
    lengths = torch.randint(1, 49, (64,), device=device)
    src[torch.arange(48, device=device)[None, :] >= lengths[:, None]] = 0
    src[torch.arange(64, device=device), lengths - 1] = 3
    tgt = torch.randint(4, vocab, (64, 40), device=device)
    results = []
    applies = packed_attention.applies
    calls = []

    def counted(*args, **kwargs):  # the kernel's calls, counted: whether it ran, not whether it would
        calls.append(1)
        return kernel(*args, **kwargs)

    for packed in (True, False):
        packed_attention.applies = applies if packed else (lambda model, src: False)
        packed_attention.VARLEN_ATTENTION = counted
        try:
            model.zero_grad()
            calls.clear()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                hidden = model(src, tgt, hidden=True)
            hidden.float().square().mean().backward()
            results.append((len(calls), hidden.detach().float(), model.encoder.layers[0].self_attn.qkv_proj.weight.grad.clone()))
        finally:
            packed_attention.applies = applies
            packed_attention.VARLEN_ATTENTION = kernel
    (used, a, ga), (unpacked_calls, b, gb) = results
    assert unpacked_calls == 0, "the varlen kernel ran where packed attention was off"
    out["packed_attention"] = {"varlen_kernel_calls": used, "used_packed_kernel": used == 2 * config.layers,
                               "hidden": relative_error(a, b), "grad_qkv_layer0": relative_error(ga, gb)}
    return out


SMOKE_THROUGHPUT = ["--device", "cpu", "--precision", "fp32", "--length", "12", "--vocab", "2000", "--rounds", "2", "--warmup", "1"]
GPU_THROUGHPUT = ["--device", "cuda", "--precision", "bf16"]


def throughput(args, name: str, flags: list[str]) -> dict:
    """benchmarks/train_throughput.py with `flags`, its output in OUT/NAME.log and its numbers in OUT/NAME.json."""
    json_path = args.out / f"{name}.json"
    rc, _ = log_run([sys.executable, str(HERE / "train_throughput.py"), *(SMOKE_THROUGHPUT if args.smoke else GPU_THROUGHPUT),
                     *flags, "--json", str(json_path)], args.out / f"{name}.log")
    if rc != 0:
        return {"error": f"exit {rc}, see {args.out / (name + '.log')}"}
    return {"results": json.loads(json_path.read_text())}


def stage_micro(args) -> dict:
    if args.smoke:
        return throughput(args, "micro", ["--preset", "base", "--sentences", "8", "--full-logits", "--profile", "1"])
    return throughput(args, "micro", ["--preset", args.micro_preset, "--full-logits", "--compile", "--profile", "5"])


def stage_batch(args) -> dict:
    """nmt alone (base) at growing batches per GPU: where tokens/s stops growing, and what memory each needs."""
    sizes = (4, 8) if args.smoke else (500, 1000, 2000, 4000)  # x 25 tokens: 12,500 to 100,000 tokens a batch
    results = {}
    for n in sizes:
        run = throughput(args, f"batch-{n}", ["--preset", "base", "--no-peer", "--sentences", str(n)])
        if "error" in run:
            results[f"{n} sentences"] = run["error"]
        else:
            result = run["results"][0]
            results[f"{n} x {result['length']} tokens"] = result["systems"]["nmt"]
    return results


def stage_corpus(args) -> dict:
    data = args.out / "data"
    if (data / "manifest.json").is_file():
        return {"data": str(data), "reused": True}
    sys.path.insert(0, str(HERE))
    from prepare_speed import wmt_like_pairs

    text = args.out / "corpus"
    text.mkdir(parents=True, exist_ok=True)
    pairs, vocab = (3000, 2000) if args.smoke else (args.pairs, args.vocab)
    started = time.perf_counter()
    # One draw, cut into the splits: a seed makes its own lexicon, and valid and test must be the language trained on.
    valid, test = min(3000, pairs // 10), 3003 if not args.smoke else 300  # test: newstest2014's 3,003 lines
    rows = [row for part in wmt_like_pairs(pairs + valid + test, 0, learnable=True) for row in part if row[1]]
    for split, part in (("train", rows[: -valid - test]), ("valid", rows[-valid - test : -test]), ("test", rows[-test:])):
        (text / f"{split}.en").write_text("".join(s + "\n" for s, _ in part), encoding="utf-8")
        (text / f"{split}.de").write_text("".join(t + "\n" for _, t in part), encoding="utf-8")
    made = time.perf_counter() - started
    rc, _ = log_run([*NMT, "prepare", "--train", str(text / "train"), "--valid", str(text / "valid"), "-s", "en", "-t", "de",
                     "--vocab-size", str(vocab), "-o", str(data)], args.out / "corpus.log")
    if rc != 0:
        return {"error": f"exit {rc}, see {args.out / 'corpus.log'}"}
    return {"data": str(data), "pairs": pairs, "vocab": vocab, "generate_s": round(made, 1),
            "prepare_s": round(time.perf_counter() - started - made, 1)}


LOG_LINE = re.compile(r"step\s+(\d+)\s+loss .*?([\d,]+) tgt tok/s(?:\s+MFU ([\d.]+)%)?")


def train_figures(lines: list[tuple[float, str]]) -> dict:
    """Tokens/s of the log lines in the first minute after training started, and after it (median)."""
    start = next((at for at, line in lines if "nmt: starting:" in line or "resuming from" in line), None)
    logs = [(at, int(m.group(1)), float(m.group(2).replace(",", "")), float(m.group(3)) if m.group(3) else None)
            for at, line in lines if (m := LOG_LINE.search(line))]
    if start is None or not logs:
        return {"error": "no log lines"}
    first = [tps for at, _, tps, _ in logs if at - start <= 60]
    after = [tps for at, _, tps, _ in logs if at - start > 60]
    mfu = [m for at, _, _, m in logs if at - start > 60 and m is not None]
    return {
        "seconds_to_first_log_line": round(logs[0][0] - start, 1),
        "steps": logs[-1][1],
        "first_minute_tokens_per_s": round(statistics.mean(first)) if first else None,
        "after_first_minute_tokens_per_s": round(statistics.median(after)) if after else None,
        "after_first_minute_mfu_percent": statistics.median(mfu) if mfu else None,
        "log_lines": [(round(at - start, 1), step, tps) for at, step, tps, _ in logs],
    }


def stage_train(args) -> dict:
    data = args.out / "data"
    if not (data / "manifest.json").is_file():
        return {"error": "no prepared data: run the corpus stage first"}
    if args.smoke:
        common = ["--preset", "tiny", "--device", "cpu", "--max-time", "20s", "--max-tokens", "2048", "--log-every", "5"]
        variants = {"eager": [], "gpus 1 (torchrun)": ["--gpus", "1"]}
    else:
        common = ["--preset", "base", "--device", "cuda", "--max-time", args.train_time, "--log-every", "20"]
        variants = {"eager": [], "compile": ["--compile"], "gpus 1 (torchrun)": ["--gpus", "1"]}
    common += ["--valid-every", "1000000", "--save-every", "1000000"]  # one validation and one checkpoint, at the end
    results = {}
    for name, flags in variants.items():
        if args.train_variants and name.split()[0] not in args.train_variants:
            continue
        run_dir = args.out / "runs" / name.split()[0]
        log = args.out / f"train-{name.split()[0]}.log"
        rc, lines = log_run([*NMT, "train", "--data", str(data), "-o", str(run_dir), "--restart", *common, *flags], log)
        results[name] = {"exit": rc, "log": str(log), **train_figures(lines)}
    return results


def system_row(name: str, s: dict | str) -> str:
    """One system of a train_throughput.py result: tokens/s, MFU, peak memory (or the error instead)."""
    if isinstance(s, str):
        return f"{name:<28} {s}"
    mfu = f"{s['mfu']:.1%}" if "mfu" in s else "-"
    memory = f"{s['peak_memory_bytes'] / 2**30:.2f}" if "peak_memory_bytes" in s else "-"
    return f"{name:<28} {s['target_tokens_per_s']:>11,.0f} {mfu:>7} {memory:>9}"


def fmt(value) -> str:
    return f"{value:,}" if isinstance(value, int) else ("-" if value is None else f"{value}")


def table(summary: dict) -> list[str]:
    env = summary.get("env", {})
    rows = ["", f"gpu_check: {env.get('gpu', env.get('device'))}, torch {env.get('torch')}"]
    check = summary.get("check")
    if isinstance(check, dict):
        for key, value in check.items():
            rows.append(f"check {key}: " + (", ".join(f"{k} {v:.2e}" if isinstance(v, float) else f"{k} {v}" for k, v in value.items())
                                            if isinstance(value, dict) else str(value)))
    header = f"{'tgt tok/s':>11} {'MFU':>7} {'peak GiB':>9}"
    for result in (summary.get("micro") or {}).get("results", []):
        rows.append(f"\nmicro {result['preset']} {result['precision']}, {result['sentences']} x {result['length']} tokens, {result['device']}")
        rows.append(f"{'system':<28} {header}")
        rows.extend(system_row(name, s) for name, s in result["systems"].items())
    batch = summary.get("batch")
    if isinstance(batch, dict) and batch:
        rows.append(f"\n{'nmt base, batch of':<28} {header}")
        rows.extend(system_row(name, s) for name, s in batch.items())
    train = summary.get("train")
    if isinstance(train, dict) and train:
        rows.append(f"\n{'nmt train':<20} {'exit':>4} {'steps':>7} {'1st log s':>9} {'tok/s 1st min':>14} {'tok/s after':>12} {'MFU after':>9}")
        for name, r in train.items():
            if not isinstance(r, dict):  # the stage itself failed
                rows.append(f"{name:<20} {r}")
                continue
            if "error" in r:
                rows.append(f"{name:<20} {r.get('exit', '-'):>4} {r['error']}")
                continue
            rows.append(f"{name:<20} {r['exit']:>4} {r['steps']:>7} {r['seconds_to_first_log_line']:>9} "
                        f"{fmt(r['first_minute_tokens_per_s']):>14} {fmt(r['after_first_minute_tokens_per_s']):>12} "
                        f"{fmt(r['after_first_minute_mfu_percent']):>9}")
    return rows


STAGES = {"env": stage_env, "check": stage_check, "micro": stage_micro, "batch": stage_batch, "corpus": stage_corpus,
          "train": stage_train}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check"), help="where logs, data and summary.json go")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated, of {', '.join(STAGES)}")
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny preset, small sizes: check that the script works")
    parser.add_argument("--micro-preset", default="both", choices=["base", "big", "both"])
    parser.add_argument("--pairs", type=int, default=300_000, help="generated training pairs")
    parser.add_argument("--vocab", type=int, default=32_000, help="sentencepiece vocabulary of the generated corpus")
    parser.add_argument("--train-time", default="3m", help="--max-time of each `nmt train` run")
    parser.add_argument("--train-variants", help="comma-separated, of eager, compile, gpus (default: all)")
    args = parser.parse_args()
    args.device = "cpu" if args.smoke else "cuda"
    args.train_variants = args.train_variants.split(",") if args.train_variants else None
    args.out.mkdir(parents=True, exist_ok=True)
    summary_path = args.out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    for name in args.stages.split(","):
        started = time.perf_counter()
        print(f"gpu_check: {name} ...", file=sys.stderr, flush=True)
        try:
            result = STAGES[name](args)
            # A stage run in parts (train's variants) adds to what an earlier call measured.
            summary[name] = {**summary[name], **result} if isinstance(summary.get(name), dict) and name == "train" else result
        except Exception as e:  # noqa: BLE001 - one failing stage must not hide the others' numbers
            summary[name] = {"error": f"{type(e).__name__}: {e}"}
        print(f"gpu_check: {name} done in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    print("\n".join(table(summary)))


if __name__ == "__main__":
    main()
