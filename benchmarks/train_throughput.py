"""Target tokens/s of one full training step: nmt's Transformer against Hugging Face's MarianMTModel.

Both models have the paper's shape (base: d_model 512, 6+6 layers, 8 heads, d_ff 2048; big: 1024,
16 heads, 4096; ReLU, post-norm, one tied 37k embedding matrix) and train on the same batch in the
same process. A step is what `nmt train` runs (nmtcli/training/trainer.py: Trainer.train_step): forward
to the decoder's hidden states, the label-smoothed loss with the output projection done in chunks
(training/loss.py), backward, Adam (0.9, 0.98, 1e-9) with the same optimizer settings for both. The
peer uses its own loss (cross entropy, what `labels=` computes). Runs alternate between the systems
(and which goes first) so that a machine shared with other work slows all alike; the table reports
medians, and on a GPU the peak memory a step allocated (torch.cuda.max_memory_allocated).

    pip install -e ".[bench]"
    python benchmarks/train_throughput.py                       # CPU, fp32, base, 80 x 25 + 80 x 25 tokens
    python benchmarks/train_throughput.py --device cuda --precision bf16 --preset both
                                                                # paper-size steps: 1000 x 25 + 1000 x 25 tokens
    python benchmarks/train_throughput.py --device cuda --precision bf16 --compile --full-logits --profile 5

--full-logits adds nmt with the loss of before (all logits, then the loss over them) as a third
system; --compile adds nmt with --compile's compiled layers (on this one shape); --profile N prints
torch.profiler's top operations over N steps of nmt. With --device cuda it also reports model-FLOPs
utilization (training/flops.py says how FLOPs are counted); --json FILE writes the numbers.

On a CPU both systems run with the threads and OpenMP wait policy that `nmt train` sets (nmtcli/threads.py;
the environment overrides them: OMP_NUM_THREADS, OMP_WAIT_POLICY), and --background-load N times the steps
beside N CPU-bound processes (background_load.py): a busy machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from background_load import BackgroundLoad, load_average

from nmtcli import threads

threads.configure()  # as `nmt train` does, before torch starts its thread pool: nmt's CPU threads and wait policy

import torch

from nmtcli.model.config import PRESETS
from nmtcli.model.transformer import Transformer
from nmtcli.training.flops import LengthStats, device_peak_flops, training_flops
from nmtcli.training.loss import output_loss

PEER = "transformers MarianMTModel"
TESTS = Path(__file__).resolve().parent.parent / "tests"  # the loss over full logits (--full-logits) lives with the tests


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def adam(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)


# --variants: nmt with one or more of its switches set, timed as systems of their own beside today's nmt.
# attention: how attention over the padded source runs (model/packed_attention.py SOURCE_ATTENTION: varlen,
# sdpa, efficient, cudnn, math); compile: layers (--compile's regional compile with dynamic sizes) or static (the
# same with a graph per shape: what batches in shape classes would get); loss: fused (training/loss.py FUSED
# "auto": compiled on a GPU) or off (eager, the kernels of before); weights: bf16-master (a bf16 copy of the
# model trains without autocast, fp32 masters in the optimizer: training/precision.py MasterWeights); graphs: step
# (the step replayed from CUDA graphs, `nmt train --cuda-graphs`: training/graphs.py TrainingGraphs; its first step
# is the warm-up, its second the capture, so --warmup 2 leaves only replays to time; the loss keeps every row, and
# this batch has no padding rows to cost it anything).
VARIANT_KEYS = {"attention": ("varlen", "sdpa", "efficient", "cudnn", "math"), "compile": ("layers", "static"),
                "loss": ("fused", "off"), "weights": ("bf16-master",), "graphs": ("step",)}


def parse_variants(text: str | None) -> dict[str, dict[str, str]]:
    """"attention=sdpa;attention=math,compile=layers" -> {"nmt attention=sdpa": {...}, ...}."""
    variants = {}
    for spec in filter(None, (text or "").split(";")):
        settings = dict(item.split("=", 1) for item in spec.split(","))
        for key, value in settings.items():
            if key not in VARIANT_KEYS or value not in VARIANT_KEYS[key]:
                raise SystemExit(f"unknown variant {key}={value}: choose from {VARIANT_KEYS}")
        variants[f"nmt {spec}"] = settings
    return variants


@contextlib.contextmanager
def variant_switches(variant: dict[str, str], dtype: torch.dtype | None):
    """The module-level switches a variant sets, for the duration of one of its steps (systems alternate)."""
    from nmtcli.model import packed_attention
    from nmtcli.training import loss

    saved, fused = dict(packed_attention.SOURCE_ATTENTION), loss.FUSED
    if "attention" in variant and dtype is not None:
        packed_attention.SOURCE_ATTENTION[dtype] = variant["attention"]
    if "loss" in variant:
        loss.FUSED = "auto" if variant["loss"] == "fused" else "off"
    try:
        yield
    finally:
        packed_attention.SOURCE_ATTENTION.clear()
        packed_attention.SOURCE_ATTENTION.update(saved)
        loss.FUSED = fused


def ours(config, device, autocast, full_logits: bool = False, compiled: bool = False, variant: dict[str, str] | None = None,
         dtype: torch.dtype | None = None):
    if full_logits:
        sys.path.insert(0, str(TESTS))
        from reference_loss import label_smoothed_loss
    variant = variant or {}
    torch.manual_seed(0)
    model = Transformer(config).to(device).train()
    masters = None
    if variant.get("weights") == "bf16-master":
        from nmtcli.training.precision import MasterWeights

        masters = MasterWeights(model)
        autocast = contextlib.nullcontext  # the bf16 copy computes in bf16 as it is
    trained = masters.working.train() if masters is not None else model
    if compiled or "compile" in variant:
        from nmtcli.training import compiling

        compiling.check_compile_works(device)
        compiling.compile_layers(trained, dynamic=variant.get("compile") != "static")
    optimizer = adam(model)
    if variant.get("graphs") == "step":
        return model, graphed_step(config, trained, optimizer, masters, autocast, variant, dtype)

    def step(src, tgt_in, tgt_out, tokens):
        with variant_switches(variant, dtype):
            one_step(src, tgt_in, tgt_out, tokens)

    def one_step(src, tgt_in, tgt_out, tokens):
        optimizer.zero_grad(set_to_none=masters is None)  # the masters keep their gradient buffers
        with autocast():
            if full_logits:  # the loss before issue 11: every logit, then the loss over them
                logits = trained(src, tgt_in)
            else:
                hidden = trained(src, tgt_in, hidden=True)
                loss, _ = output_loss(hidden, trained.embedding.tokens.weight, trained.final_logits_bias, tgt_out, 0.1,
                                      config.pad_id, tokens)
        if full_logits:
            loss, _ = label_smoothed_loss(logits, tgt_out, 0.1, config.pad_id)
        (loss / tokens).backward()
        if masters is not None:
            masters.gradients_to_masters(first=True)
        optimizer.step()
        if masters is not None:
            masters.masters_to_working()

    return model, step


def graphed_step(config, trained, optimizer, masters, autocast, variant: dict[str, str], dtype: torch.dtype | None):
    """nmt's step through TrainingGraphs, as `nmt train --cuda-graphs` runs it; the graphs' state is in `step.graphs`."""
    from nmtcli.data.batching import Batch
    from nmtcli.training.graphs import TrainingGraphs

    if not trained.embedding.tokens.weight.is_cuda:
        raise SystemExit("the variant graphs=step needs --device cuda")

    def losses(src, tgt_in, tgt_out):
        with autocast():
            hidden = trained(src, tgt_in, hidden=True)
            return output_loss(hidden, trained.embedding.tokens.weight, trained.final_logits_bias, tgt_out, 0.1,
                               config.pad_id, every_row=True)

    warnings: list[str] = []
    graphs = TrainingGraphs(losses, trained, optimizer, masters, warn=warnings.append)

    def step(src, tgt_in, tgt_out, tokens):
        with variant_switches(variant, dtype):
            graphs.step([Batch(src, tgt_in, tgt_out, tokens)], 1.0 / tokens, 1e-4, [0])

    step.graphs = graphs
    return step


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
    optimizer = adam(model)

    def step(src, tgt_in, tgt_out, tokens):
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            out = model(input_ids=src, attention_mask=src != config.pad_id, decoder_input_ids=tgt_in, labels=tgt_out)
        out.loss.backward()
        optimizer.step()

    return model, step


def profile(step, batch, device: torch.device, steps: int, out: Path | None) -> None:
    """torch.profiler over `steps` steps: the operations that take the most time, on the device where there is one."""
    from torch.profiler import ProfilerActivity

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(steps):
            step(*batch)
        sync(device)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"\ntorch.profiler, {steps} steps, by {key}:\n")
    print(prof.key_averages().table(sort_by=key, row_limit=30))
    if out is not None:
        prof.export_chrome_trace(str(out))
        print(f"trace: {out} (chrome://tracing or https://ui.perfetto.dev)")


def timed_rounds(args: argparse.Namespace, systems: dict, batch: tuple, device: torch.device) -> tuple[dict, dict]:
    """Warm-up steps, then --rounds timed steps of each system, alternating who goes first: (seconds, peak bytes) by system."""
    for _, step in systems.values():
        for _ in range(args.warmup):
            step(*batch)
    sync(device)
    times: dict[str, list[float]] = {name: [] for name in systems}
    peak_memory: dict[str, int] = {name: 0 for name in systems}
    names = list(systems)
    for r in range(args.rounds):
        for name in names if r % 2 == 0 else reversed(names):  # alternate who goes first
            _, step = systems[name]
            sync(device)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            step(*batch)
            sync(device)
            times[name].append(time.perf_counter() - t0)
            if device.type == "cuda":
                peak_memory[name] = max(peak_memory[name], torch.cuda.max_memory_allocated(device))
    return times, peak_memory


def run(args: argparse.Namespace, preset: str) -> dict:
    device = torch.device(args.device)
    config = PRESETS[preset].replace(vocab_size=args.vocab)
    dtype = torch.bfloat16 if args.precision == "bf16" else None

    def autocast():
        return torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()

    n = args.sentences or (1000 if device.type == "cuda" else 80)  # 1000 x 25: the paper's ~25,000 tokens a step
    length = args.length
    g = torch.Generator().manual_seed(0)
    src = torch.randint(4, args.vocab, (n, length), generator=g)
    src[:, -1] = config.eos_id
    tgt = torch.randint(4, args.vocab, (n, length), generator=g)
    tgt_in = torch.cat([torch.full((n, 1), config.bos_id), tgt[:, :-1]], 1)
    tgt_out = tgt.clone()
    tgt_out[:, -1] = config.eos_id
    src, tgt_in, tgt_out = src.to(device), tgt_in.to(device), tgt_out.to(device)
    tokens = n * length
    batch = (src, tgt_in, tgt_out, tokens)
    flops_per_step = training_flops(config, LengthStats.of(torch.full((n,), length - 1).numpy(), torch.full((n,), length - 1).numpy()))

    systems = {"nmt": ours(config, device, autocast)}
    if args.full_logits:
        systems["nmt, full-logits loss"] = ours(config, device, autocast, full_logits=True)
    if args.compile:
        systems["nmt --compile"] = ours(config, device, autocast, compiled=True)
    for name, variant in parse_variants(args.variants).items():
        systems[name] = ours(config, device, autocast, variant=variant, dtype=dtype)
    if not args.no_peer:
        systems[PEER] = marian(config, device, autocast)
    for name, (model, _) in systems.items():
        print(f"{preset}: {name}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters")
    with BackgroundLoad(args.background_load):  # nothing for 0
        times, peak_memory = timed_rounds(args, systems, batch, device)
    names = list(systems)

    peak = device_peak_flops(device, args.precision, None)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{platform.processor() or 'CPU'}, {torch.get_num_threads()} threads"
    print(f"\n{preset}, {args.precision}, {where}, torch {torch.__version__}; "
          f"{n} x {length} source + {n} x {length} target tokens per step, {args.rounds} alternating rounds; "
          f"{load_average()}, {args.background_load} CPU-bound process(es) beside\n")
    reference = PEER if PEER in times else names[-1]
    header = f"{'system':<28} {'median s/step':>14} {'target tok/s':>13} {'vs ' + ('peer' if reference == PEER else reference):>8}"
    header += f" {'MFU':>6}" if peak else ""
    header += f" {'peak GiB':>9}" if device.type == "cuda" else ""
    print(header)
    base = statistics.median(times[reference])
    result = {"preset": preset, "precision": args.precision, "device": where, "torch": torch.__version__,
              "sentences": n, "length": length, "rounds": args.rounds, "systems": {}}
    for name in names:
        med = statistics.median(times[name])
        line = f"{name:<28} {med:>14.3f} {tokens / med:>13,.0f} {base / med:>7.2f}x"
        entry = {"median_s": med, "target_tokens_per_s": tokens / med, "times_s": times[name]}
        if peak:
            line += f" {flops_per_step / med / peak:>6.1%}"
            entry["mfu"] = flops_per_step / med / peak
        if device.type == "cuda":
            line += f" {peak_memory[name] / 2**30:>9.2f}"
            entry["peak_memory_bytes"] = peak_memory[name]
        result["systems"][name] = entry
        print(line)
    for name, (_, step) in systems.items():
        if hasattr(step, "graphs"):
            state = step.graphs.summary()
            result["systems"][name]["cuda_graphs"] = state
            print(f"{name}: CUDA graphs {state}")
    if args.profile:
        trace = Path(args.json).with_suffix(f".{preset}.trace.json") if args.json else None
        profile(systems[args.profile_system][1], batch, device, args.profile, trace)
    for model, _ in systems.values():
        model.cpu()
    del systems
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base", choices=[*PRESETS, "both"], help="both: base and big")
    parser.add_argument("--vocab", type=int, default=37000)
    parser.add_argument("--sentences", type=int, help="sentences per step (default: 1000 on a GPU, 80 on a CPU)")
    parser.add_argument("--length", type=int, default=25, help="tokens per sentence, each side (EOS/BOS included)")
    parser.add_argument("--rounds", type=int, default=7, help="timed steps per system")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per system first")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    parser.add_argument("--no-peer", action="store_true", help="time nmt alone (e.g. for MFU on a GPU)")
    parser.add_argument("--full-logits", action="store_true", help="also time nmt with the full-logits loss of before")
    parser.add_argument("--compile", action="store_true", help="also time nmt with compiled layers (as --compile)")
    parser.add_argument("--variants", help="also time nmt with these switches, each a system: e.g. "
                        "'attention=sdpa;attention=math;compile=layers,attention=efficient' (VARIANT_KEYS)")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print torch.profiler's top operations over N steps of nmt")
    parser.add_argument("--profile-system", default="nmt", help="the system --profile profiles (a name in the table)")
    parser.add_argument("--json", help="write the numbers to this file")
    parser.add_argument("--background-load", type=int, default=0, metavar="N",
                        help="N CPU-bound processes beside the timed steps (background_load.py): a busy machine")
    args = parser.parse_args()
    results = [run(args, preset) for preset in (["base", "big"] if args.preset == "both" else [args.preset])]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
