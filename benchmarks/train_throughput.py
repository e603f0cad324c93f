"""Target tokens/s of one full training step: nmt's Transformer against Hugging Face's MarianMTModel.

Both models have the base shape of the paper (d_model 512, 6+6 layers, 8 heads, d_ff 2048, ReLU,
post-norm, one tied 37k embedding matrix) and train on the same batch in the same process. A step is
what `nmt train` runs (nmtcli/training/trainer.py: Trainer.train_step): forward, label-smoothed loss
over the step's target tokens, backward, Adam (0.9, 0.98, 1e-9) with the same optimizer settings for
both. The peer uses its own loss (cross entropy, what `labels=` computes). Runs alternate between the
two models (and which goes first) so that a machine shared with other work slows both alike; the
table reports medians.

    pip install -e ".[bench]"
    python benchmarks/train_throughput.py                      # CPU, fp32, 80 x 25 + 80 x 25 tokens
    python benchmarks/train_throughput.py --device cuda --precision bf16 --sentences 256 --preset big

With --device cuda it also reports model-FLOPs utilization (training/flops.py says how FLOPs are counted).
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import time

import torch

from nmtcli.model.config import PRESETS
from nmtcli.model.transformer import Transformer
from nmtcli.training.flops import LengthStats, device_peak_flops, training_flops
from nmtcli.training.loss import label_smoothed_loss


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ours(config, device, autocast):
    torch.manual_seed(0)
    model = Transformer(config).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)

    def step(src, tgt_in, tgt_out, tokens):
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            logits = model(src, tgt_in)
        loss, _ = label_smoothed_loss(logits, tgt_out, 0.1, config.pad_id)
        (loss / tokens).backward()
        optimizer.step()

    return model, step


def marian(config, device, autocast):
    from transformers import MarianConfig, MarianMTModel

    peer_config = MarianConfig(
        vocab_size=config.vocab_size, decoder_vocab_size=config.vocab_size, d_model=config.d_model,
        encoder_layers=config.layers, decoder_layers=config.layers,
        encoder_attention_heads=config.heads, decoder_attention_heads=config.heads,
        encoder_ffn_dim=config.d_ff, decoder_ffn_dim=config.d_ff, activation_function="relu",
        dropout=config.dropout, attention_dropout=0.0, activation_dropout=0.0,
        max_position_embeddings=config.max_positions, scale_embedding=True,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=config.pad_id, eos_token_id=config.eos_id, decoder_start_token_id=config.bos_id,
    )
    torch.manual_seed(0)
    model = MarianMTModel(peer_config).to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)

    def step(src, tgt_in, tgt_out, tokens):
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            out = model(input_ids=src, attention_mask=src != config.pad_id, decoder_input_ids=tgt_in, labels=tgt_out)
        out.loss.backward()
        optimizer.step()

    return model, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base", choices=["base", "big"])
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--sentences", type=int, default=80)
    parser.add_argument("--length", type=int, default=25, help="tokens per sentence, each side (EOS/BOS included)")
    parser.add_argument("--rounds", type=int, default=7, help="timed steps per model")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per model first")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--no-peer", action="store_true", help="time nmt alone (e.g. for MFU on a GPU)")
    args = parser.parse_args()

    device = torch.device(args.device)
    config = PRESETS[args.preset].replace(vocab_size=args.vocab)
    dtype = torch.bfloat16 if args.precision == "bf16" else None

    def autocast():
        return torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()

    n, length = args.sentences, args.length
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, args.vocab, (n, length), generator=g)
    src[:, -1] = config.eos_id
    tgt = torch.randint(4, args.vocab, (n, length), generator=g)
    tgt_in = torch.cat([torch.full((n, 1), config.bos_id), tgt[:, :-1]], 1)
    tgt_out = tgt.clone()
    tgt_out[:, -1] = config.eos_id
    src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
    tokens = n * length
    flops_per_step = training_flops(config, LengthStats.of(torch.full((n,), length - 1).numpy(), torch.full((n,), length - 1).numpy()))

    systems = {"nmt": ours(config, device, autocast)}
    if not args.no_peer:
        systems["transformers MarianMTModel"] = marian(config, device, autocast)
    for name, (model, _) in systems.items():
        print(f"{name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    for _, step in systems.values():
        for _ in range(args.warmup):
            step(src, tgt_in, tgt_out, tokens)
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else reversed(names):  # alternate who goes first
            _, step = systems[name]
            sync(device)
            t0 = time.perf_counter()
            step(src, tgt_in, tgt_out, tokens)
            sync(device)
            times[name].append(time.perf_counter() - t0)

    peak = device_peak_flops(device, args.precision, None)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{platform.processor() or 'CPU'}, {torch.get_num_threads()} threads"
    print(f"\n{args.preset}, {args.precision}, {where}, torch {torch.__version__}; "
          f"{n} x {length} source + {n} x {length} target tokens per step, {args.rounds} alternating rounds\n")
    print(f"{'system':<28} {'median s/step':>14} {'target tok/s':>13} {'vs peer':>8}" + (f" {'MFU':>6}" if peak else ""))
    base = statistics.median(times[names[-1]])
    for name in names:
        med = statistics.median(times[name])
        line = f"{name:<28} {med:>14.3f} {tokens / med:>13,.0f} {base / med:>7.2f}x"
        if peak:
            line += f" {flops_per_step / med / peak:>6.1%}"
        print(line)


if __name__ == "__main__":
    main()
