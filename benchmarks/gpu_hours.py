"""GPU-hours to train the paper's base and big models, estimated from model FLOPs: not a measurement.

    python benchmarks/gpu_hours.py                          # sentences of 25 tokens (assumed)
    python benchmarks/gpu_hours.py --data data/wmt14-en-de  # the prepared corpus' real sentence lengths
    python benchmarks/gpu_hours.py --mfu 0.31               # with an MFU measured by train_throughput.py
    python benchmarks/gpu_hours.py --measured gpu_check/summary.json   # the MFU benchmarks/gpu_check.py measured

One optimizer step of the paper holds about 25,000 target tokens (and as many source tokens, sec. 5.1);
its model FLOPs are counted exactly as `nmt train` counts them for MFU (nmtcli/training/flops.py:
forward + backward of every matrix multiplication, attention included). Total = FLOPs per step x
steps (base 100k, big 300k). GPU-hours = total / (peak dense bf16 FLOP/s x MFU), where the MFU is an
assumption until `benchmarks/train_throughput.py --device cuda --precision bf16` (or
`benchmarks/gpu_check.py`, whose summary `--measured` reads) measures it on your GPU. Linear scaling
to 8 GPUs is assumed too (no communication cost).

What has been measured, and where: issue 11 reports, for nmt before its changes, one H100 80GB in
bf16 at 1,000 x 25 tokens a step: base 12.0% MFU, big 23.8% (Hugging Face's MarianMTModel: 13.0% and
25.5%), and `nmt train --preset base` at 9-10%. The changes of issue 11 (the chunked loss, packed
attention, no host waits, --compile over length buckets) have not been timed on a GPU: until
gpu_check.py runs on one, every MFU below is assumed.

The peer is the paper itself: 8 P100s, base 12 hours, big 3.5 days (sec. 5.2). Its Table 2 cost
(3.3e18 and 2.3e19 FLOPs) is that GPU time x 9.5 TFLOP/s, the P100's fp32 peak (Table 2's
footnote); our model FLOPs over it give the utilization the paper's runs reached.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path


from nmtcli.model.config import PRESETS
from nmtcli.training.flops import PEAK_FLOPS, LengthStats, training_flops
from nmtcli.training.settings import TRAIN_PRESETS

TOKENS_PER_STEP = 25_000  # target tokens, sec. 5.1
VOCAB = 37_000  # sec. 5.1, the shared BPE vocabulary of WMT14 en-de
# Dense bf16 tensor-core peaks: the data-center parts from flops.py (what `nmt train` divides by for MFU),
# and a consumer card for scale: RTX 4090, 165.2 TFLOP/s bf16 with fp32 accumulation (Ada whitepaper).
GPUS = {"A100": PEAK_FLOPS["A100"]["bf16"], "H100 SXM": PEAK_FLOPS["H100"]["bf16"], "RTX 4090": 165.2e12}
PAPER = {"base": (12.0, 3.3e18), "big": (3.5 * 24, 2.3e19)}  # hours on 8 P100s; Table 2's training cost
P100_FP32 = 9.5e12  # the paper's value for the P100 (Table 2, footnote)


@dataclass(frozen=True)
class Estimate:
    preset: str
    steps: int
    flops_per_step: float
    total_flops: float
    attention_share: float  # of the FLOPs: the S^2, T^2 and S*T terms

    def gpu_hours(self, peak: float, mfu: float) -> float:
        return self.total_flops / (peak * mfu) / 3600


def step_lengths(mean_src: float, mean_tgt: float, mean_src_sq: float, mean_tgt_sq: float, mean_src_tgt: float) -> LengthStats:
    """A step of TOKENS_PER_STEP target tokens made of sentences with these per-sentence means (EOS included)."""
    n = TOKENS_PER_STEP / mean_tgt
    return LengthStats(n * mean_src, n * mean_tgt, n * mean_src_sq, n * mean_tgt_sq, n * mean_src_tgt)


def assumed_lengths(length: float) -> LengthStats:
    """Every sentence `length` tokens on each side: 25,000 source and 25,000 target tokens per step."""
    return step_lengths(length, length, length**2, length**2, length**2)


def corpus_lengths(data_dir: Path) -> tuple[LengthStats, int]:
    """The training split's per-sentence length statistics scaled to one step, and the data's vocabulary size."""
    from nmtcli.data.shards import Shard

    manifest = json.loads((data_dir / "manifest.json").read_text())
    vocab = manifest.get("vocab_size", VOCAB)
    src = Shard(data_dir / f"train.{manifest['source_lang']}", vocab).lengths
    tgt = Shard(data_dir / f"train.{manifest['target_lang']}", vocab).lengths
    total = LengthStats.of(src, tgt)  # + EOS / BOS, as `nmt train` counts
    n = len(src)
    return step_lengths(total.src / n, total.tgt / n, total.src_sq / n, total.tgt_sq / n, total.src_tgt / n), vocab


def estimate(preset: str, lengths: LengthStats, vocab: int = VOCAB) -> Estimate:
    config = PRESETS[preset].replace(vocab_size=vocab)
    steps = TRAIN_PRESETS[preset].max_steps
    per_step = training_flops(config, lengths)
    no_attention = training_flops(config, LengthStats(lengths.src, lengths.tgt))
    return Estimate(preset, steps, per_step, per_step * steps, 1 - no_attention / per_step)


def table(lengths: LengthStats, mfus: list[float], vocab: int = VOCAB) -> list[str]:
    """The markdown table and the paper's lines under it."""
    estimates = [estimate(p, lengths, vocab) for p in ("base", "big")]
    middle = sorted(mfus)[len(mfus) // 2]
    lines = ["| model | steps | model FLOPs | GPU (dense bf16 peak) | " + " | ".join(f"GPU-hours at {m:.0%} MFU" for m in mfus)
             + f" | 8 GPUs at {middle:.0%} |",
             "|---|---|---|---|" + "---|" * len(mfus) + "---|"]
    for e in estimates:
        for gpu, peak in GPUS.items():
            hours = [e.gpu_hours(peak, m) for m in mfus]
            lines.append(f"| {e.preset} | {e.steps:,} | {e.total_flops:.2e} | {gpu} ({peak / 1e12:.0f} TFLOP/s) | "
                         + " | ".join(_number(h) for h in hours) + f" | {_duration(e.gpu_hours(peak, middle) / 8)} |")
    lines.append("")
    for e in estimates:
        hours, cost = PAPER[e.preset]
        lines.append(f"Paper, {e.preset}: 8 P100 x {hours:g} h = {8 * hours:g} GPU-hours; Table 2's cost, {cost:.1e} FLOPs, "
                     f"is that time x 9.5 TFLOP/s; {e.total_flops:.2e} model FLOPs in it is "
                     f"{e.total_flops / (8 * hours * 3600 * P100_FP32):.0%} MFU (fp32).")
    lines.append(f"Attention is {estimates[0].attention_share:.1%} (base) and {estimates[1].attention_share:.1%} (big) of the FLOPs.")
    return lines


def measured_lines(summary_path: Path, lengths: LengthStats, vocab: int) -> list[str]:
    """GPU-hours at the MFU that benchmarks/gpu_check.py measured for nmt (its microbenchmark), on that GPU."""
    from nmtcli.training.flops import peak_flops

    summary = json.loads(Path(summary_path).read_text())
    gpu = summary.get("env", {}).get("gpu", "")
    peak = peak_flops(gpu, "bf16")
    lines = [f"Measured by {summary_path} on {gpu or 'an unknown device'} (microbenchmark, bf16, paper-size steps):"]
    for result in (summary.get("micro") or {}).get("results", []):
        nmt = result.get("systems", {}).get("nmt", {})
        if "mfu" not in nmt or peak is None or result.get("precision") != "bf16":
            lines.append(f"  {result.get('preset')}: no bf16 MFU on a GPU nmt knows in this summary")
            continue
        e = estimate(result["preset"], lengths, vocab)
        lines.append(f"  {e.preset}: MFU {nmt['mfu']:.1%} ({nmt['target_tokens_per_s']:,.0f} target tokens/s) -> "
                     f"{_number(e.gpu_hours(peak, nmt['mfu']))} GPU-hours, {_duration(e.gpu_hours(peak, nmt['mfu']) / 8)} on 8 "
                     "(a microbenchmark's MFU: the real run's log says how close training comes to it)")
    return lines


def _number(hours: float) -> str:
    return f"{hours:.1f}" if hours < 10 else f"{hours:,.0f}"


def _duration(hours: float) -> str:
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length", type=float, default=25.0,
                        help="tokens per sentence, each side, EOS included (assumed; --data measures it)")
    parser.add_argument("--data", type=Path, help="a prepared data dir: use its training split's sentence lengths")
    parser.add_argument("--mfu", type=float, nargs="+", default=[0.15, 0.30, 0.45], help="model-FLOPs utilizations to assume")
    parser.add_argument("--measured", type=Path, help="a benchmarks/gpu_check.py summary.json: also the GPU-hours at its measured MFU")
    args = parser.parse_args()
    if args.data:
        lengths, vocab = corpus_lengths(args.data)
        where = f"the sentence lengths of {args.data}"
    else:
        lengths, vocab = assumed_lengths(args.length), VOCAB
        where = f"sentences of {args.length:g} tokens each side (assumed)"
    print(f"Estimated, not measured: {TOKENS_PER_STEP:,} target and {lengths.src:,.0f} source tokens per step, {where}; "
          f"vocabulary {vocab:,}; MFU assumed; 8 GPUs scale linearly.\n")
    print("\n".join(table(lengths, args.mfu, vocab)))
    if args.measured:
        print("\n" + "\n".join(measured_lines(args.measured, lengths, vocab)))


if __name__ == "__main__":
    main()
