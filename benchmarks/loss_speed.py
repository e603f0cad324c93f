"""The training loss alone: `output_loss` (training/loss.py) against the loss over full logits, and
against another version of training/loss.py (--baseline), forward and backward, in the same run.

    python benchmarks/loss_speed.py                                   # CPU, base-model shapes
    python benchmarks/loss_speed.py --baseline /path/to/old/loss.py   # e.g. main's, before a change
    python benchmarks/loss_speed.py --device cuda --precision bf16 --rows 25000 --vocab 37000

Runs alternate between the contenders (so a machine's load falls on all of them alike); the table
shows each one's median milliseconds per call over --runs and its ratio to this tree's loss.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from nmtcli.training.loss import output_loss

TESTS = Path(__file__).resolve().parent.parent / "tests"


def load_output_loss(path: Path):
    spec = importlib.util.spec_from_file_location("baseline_loss", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.output_loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--rows", type=int, default=4096, help="target tokens in the batch (default: 4096)")
    parser.add_argument("--vocab", type=int, default=37000, help="vocabulary size (default: 37000, the paper's)")
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--runs", type=int, default=7, help="timed calls of each contender (default: 7)")
    parser.add_argument("--baseline", type=Path, help="another training/loss.py to time against (e.g. main's)")
    parser.add_argument("--threads", type=int, help="torch threads on a CPU")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    sys.path.insert(0, str(TESTS))
    from reference_loss import label_smoothed_loss

    device = torch.device(args.device)
    torch.manual_seed(0)
    hidden = torch.randn(args.rows, args.d_model, device=device, requires_grad=True)
    weight = (torch.randn(args.vocab, args.d_model, device=device) * args.d_model**-0.5).requires_grad_()
    target = torch.randint(4, args.vocab, (args.rows,), device=device)
    target[-args.rows // 10 :] = 0  # a tenth padding
    tokens = int((target != 0).sum())
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if args.precision == "bf16" else contextlib.nullcontext

    contenders = {"output_loss (this tree)": lambda: output_loss(hidden, weight, None, target, 0.1, 0, tokens)[0]}
    if args.baseline:
        baseline = load_output_loss(args.baseline)
        contenders[f"output_loss ({args.baseline})"] = lambda: baseline(hidden, weight, None, target, 0.1, 0, tokens)[0]
    contenders["full logits + reference loss"] = lambda: label_smoothed_loss(F.linear(hidden, weight), target, 0.1, 0)[0]

    def timed(loss_of) -> float:
        hidden.grad = weight.grad = None
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with autocast():
            loss = loss_of()
        loss.backward()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    times: dict[str, list[float]] = {name: [] for name in contenders}
    for name, loss_of in contenders.items():  # warm-up
        timed(loss_of)
    for _ in range(args.runs):
        for name, loss_of in contenders.items():
            times[name].append(timed(loss_of))
    ours = statistics.median(times["output_loss (this tree)"])
    print(f"{args.rows} tokens x {args.vocab} vocabulary, d_model {args.d_model}, {args.precision} on {device}, "
          f"median of {args.runs} (forward + backward)")
    print("| loss | ms | / this tree |")
    print("|---|---|---|")
    for name, t in times.items():
        print(f"| {name} | {statistics.median(t) * 1e3:.1f} | {statistics.median(t) / ours:.2f} |")


if __name__ == "__main__":
    main()
