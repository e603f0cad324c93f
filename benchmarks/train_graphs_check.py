#!/usr/bin/env python3
"""The training step's CUDA graphs on a GPU (`nmt train --cuda-graphs`, training/graphs.py): what the CPU tests cannot show.

    python benchmarks/train_graphs_check.py            # one CUDA GPU, under a minute
    python benchmarks/train_graphs_check.py --device cpu --precisions fp32   # the script itself, nothing recorded

For fp32, bf16 autocast and bf16-master, one and two batches a step over two shape classes taking turns, dropout
0.1: the weights after steps replayed from real CUDA graphs against the same step's functions run eagerly from the
same start (TrainingGraphs with a backend that records nothing), beside how far eager runs of the same steps
differ from each other (atomic adds make a GPU's sums differ run to run) and how far the steps moved the
weights. Then the dropout of a replay, from fixed weights (learning rate 0): two replays after the same seed give
the same loss, after another seed another one, and a replay's loss is the eager batch's after the same seed (the
same masks). Prints a table; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import torch

from nmtcli.data.batching import Batch
from nmtcli.model.config import PRESETS
from nmtcli.model.transformer import Transformer
from nmtcli.training.graphs import TrainingGraphs, Unrecorded
from nmtcli.training.loss import output_loss
from nmtcli.training.precision import MasterWeights


def trainer(precision: str, device: torch.device, backend=None):
    """(fp32 model, TrainingGraphs) of a seeded 2-layer d_model 256 model, dropout 0.1, Adam eps 1e-6 (eps 1e-9 makes
    whole steps of the rounding noise in the key biases' gradient, which is zero in exact arithmetic)."""
    if backend is None and device.type == "cpu":  # --device cpu: the script checked, not the graphs
        backend = Unrecorded()
    torch.manual_seed(0)
    config = PRESETS["tiny"].replace(vocab_size=4000, d_model=256, d_ff=1024, heads=4, layers=2, dropout=0.1)
    model = Transformer(config).to(device).train()
    masters = MasterWeights(model) if precision == "bf16-master" else None
    trained = masters.working.train() if masters is not None else model
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-6, fused=True)

    def losses(src, tgt_in, tgt_out):
        autocast = torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
        with autocast:
            hidden = trained(src, tgt_in, hidden=True)
            return output_loss(hidden, trained.embedding.tokens.weight, trained.final_logits_bias, tgt_out, 0.1,
                               config.pad_id, every_row=True)

    return model, TrainingGraphs(losses, trained, optimizer, masters, backend=backend)


def batches(device: torch.device) -> dict[str, list[Batch]]:
    """Three batches of each of two shape classes (64 x 24 and 32 x 48), sentences of random lengths, padding after."""
    g = torch.Generator().manual_seed(1)
    out = {}
    for name, (rows, length) in {"A": (64, 24), "B": (32, 48)}.items():
        out[name] = []
        for _ in range(3):
            lengths = torch.randint(length // 3, length, (rows,), generator=g)
            real = torch.arange(length)[None, :] < lengths[:, None]
            src = torch.where(real, torch.randint(4, 4000, (rows, length), generator=g), 0)
            tgt = torch.where(real, torch.randint(4, 4000, (rows, length), generator=g), 0)
            tgt_in = torch.cat([torch.full((rows, 1), 2), tgt[:, :-1]], 1) * torch.cat([torch.ones(rows, 1, dtype=torch.long), real[:, :-1]], 1)
            out[name].append(Batch(src.to(device), tgt_in.to(device), tgt.to(device), int(real.sum())))
    return out


def steps(data: dict[str, list[Batch]], update_freq: int) -> list[list[Batch]]:
    """A B A B A B (one a step) or A B, B A, A B (two a step)."""
    order = ["A", "B"] * 3 if update_freq == 1 else ["A", "B", "B", "A", "A", "B"]
    taken = {"A": iter(data["A"]), "B": iter(data["B"])}
    flat = [next(taken[c]) for c in order]
    return [flat[i : i + update_freq] for i in range(0, len(flat), update_freq)]


def train(precision: str, update_freq: int, backend, data, device) -> tuple[torch.nn.Module, TrainingGraphs]:
    model, graphs = trainer(precision, device, backend)
    for k, step in enumerate(steps(data, update_freq)):
        tokens = sum(b.target_tokens for b in step)
        graphs.step(step, 1.0 / tokens, 1e-3 * (k + 1), [1000 * k + i for i in range(len(step))])
    if device.type == "cuda":
        torch.cuda.synchronize()
    return model, graphs


@torch.no_grad()
def largest_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(float((p - q).abs().max()) for p, q in zip(a.parameters(), b.parameters()))


def dropout_check(precision: str, data, device) -> dict[str, float]:
    """Losses of one class-A batch from fixed weights (lr 0): replayed after seed 7, again after 7, after 8, and eager after 7."""
    _, graphs = trainer(precision, device)
    batch = data["A"][0]
    scale = 1.0 / batch.target_tokens
    for seed in (1, 2):  # warm-up, then capture and replay
        graphs.step([batch], scale, 0.0, [seed])
    assert graphs.captured == 2 and graphs.enabled, graphs.summary()
    replayed = [float(graphs.step([batch], scale, 0.0, [seed])[0]) for seed in (7, 7, 8)]
    graphs.enabled = False  # the same functions, eagerly
    eager = float(graphs.step([batch], scale, 0.0, [7])[0])
    return {"replay 7": replayed[0], "replay 7 again": replayed[1], "replay 8": replayed[2], "eager 7": eager}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--precisions", default="fp32,bf16,bf16-master")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    data = batches(device)
    failed = False
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU (nothing recorded: the script alone)"
    print(f"{where}, torch {torch.__version__}\n")
    print(f"{'precision':<12} {'batches/step':>12} {'moved':>9} {'graphs vs eager':>16} {'eager vs eager':>15} {'captured':>8} {'replays':>7}  ok")
    for precision in args.precisions.split(","):
        for update_freq in (1, 2):
            start, _ = trainer(precision, device, Unrecorded())
            graphed, graphs = train(precision, update_freq, None, data, device)
            eager, _ = train(precision, update_freq, Unrecorded(), data, device)
            again, _ = train(precision, update_freq, Unrecorded(), data, device)
            moved = largest_difference(eager, start)
            apart, noise = largest_difference(graphed, eager), largest_difference(again, eager)
            ok = graphs.enabled and graphs.captured == 3 and apart <= max(4 * noise, 1e-3 * moved)
            failed |= not ok
            print(f"{precision:<12} {update_freq:>12} {moved:>9.2e} {apart:>16.2e} {noise:>15.2e} {graphs.captured:>8} "
                  f"{graphs.replayed:>7}  {'yes' if ok else 'NO ' + str(graphs.off_reason)}")
    print()
    for precision in args.precisions.split(","):
        losses = dropout_check(precision, data, device)
        same = losses["replay 7"] == losses["replay 7 again"]
        fresh = losses["replay 8"] != losses["replay 7"]
        # The same masks: far closer than other masks are (what seed 8's replay is to seed 7's).
        eager_masks = abs(losses["eager 7"] - losses["replay 7"]) <= 0.01 * abs(losses["replay 8"] - losses["replay 7"])
        ok = same and fresh and eager_masks
        failed |= not ok
        print(f"dropout {precision:<12} " + "  ".join(f"{k} {v:.6f}" for k, v in losses.items()) + f"  {'ok' if ok else 'NO'}")
    if device.type == "cuda":
        print(f"\npeak memory allocated {torch.cuda.max_memory_allocated(device) / 2**20:,.0f} MiB")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
