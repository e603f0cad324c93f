#!/usr/bin/env python3
"""Everything the GPU issues measure (11: training speed; 33: translation; 34: training at 2x Hugging Face), in one command.

    python benchmarks/gpu_check.py --out OUT --data gpu/data --test gpu/test      # one GPU, issues 33 and 34: ~8 minutes
    python benchmarks/gpu_check.py --smoke --out /tmp/gpu_check --data gpu/data --test gpu/test   # the same on a CPU, tiny sizes

Prepare the corpus on a CPU first and carry it (`--stages corpus --out gpu/check`, then move gpu/check/data and
gpu/check/corpus/test.* to gpu/): `nmt prepare` of 300,000 pairs takes minutes of CPU a GPU lease should not pay.

Stages, in order (--stages picks some; --deadline bounds the whole: a stage that cannot finish in what is left
is skipped, and every step of a stage has its own timeout):
  env      PyTorch, CUDA, the GPU
  beam_attention    a beam step's self-attention: through slots (the Triton kernel, by block and warps) vs reorder + efficient
  decode_attention  a decoding step's attention (one query a row against a fixed span, and `beam` a sentence
           against the source) by kernel (PyTorch's choice, memory-efficient, cuDNN, math) in fp32 and bf16: the
           steady time of one shape, and the time of a new shape every call (what eager decoding does)
  translate  benchmarks/translate_speed.py --settings fixed,natural --engines nmt,hf (3,003 sentences, batches
           512 and 3,003, fp32 and bf16), with each nmt row's CUDA graph state
  micro    benchmarks/train_throughput.py --preset both: nmt against Hugging Face MarianMTModel at the paper's
           step (1000 x 25 + 1000 x 25 tokens), with --variants (attention kinds, compiled layers) as systems of
           their own; torch.profiler's top operations over 5 steps of --profile-system (OUT/micro.log)
  train    the real `nmt train --preset base --max-time T` on the carried corpus: target tokens/s in the first
           minute and after it, MFU, steps; eager, with --cuda-graphs, --compile, and as one torchrun rank
  cli      `nmt average` of that run, then `nmt translate` of the carried test set (3,003 lines) as whole
           processes in fp32 and bf16, CUDA graphs on and off: seconds, lines/s, the graph state each printed,
           BLEU (`nmt score`), and where a process's start-up goes (import, CUDA context, model load, first line)
  loss     `nmt train --preset tiny --max-steps N` on the carried corpus on the GPU in bf16: its loss at every log line,
           to hold against the same command on a CPU (the same seed and batches)
  check, batch, corpus: issue 11's (the fused paths against their references; nmt at growing batches; the
           corpus made and prepared)
  distill_corpus  (on the CPU, before the lease; not in the default --stages) a learnable corpus for issue 52's
           measurement: --distill-pairs generated pairs of <= 40 words (prepare_speed.wmt_like_pairs, a lexicon
           of Zipfian words), 500 valid and 500 test lines, prepared with an 8,000-piece vocabulary, in
           --distill-dir (gpu/distill, ignored by git: carry it on the first call, ~9 MB)
  distill_teacher  `nmt train --preset small --max-time --teacher-time --warmup --teacher-warmup` (1,000: minutes
           of training are a few thousand steps) on that corpus, then `nmt average`: the teacher, in
           --distill-dir/teacher (not in the default --stages)
  distill  `nmt distill -m TEACHER` of the corpus into student-tiny (`--max-time --student-time --warmup
           --student-warmup`, on the GPU):
           its report's teacher and student BLEU and chrF on the test split, the gap (issue 52: within 1.5), the
           int8 student's CPU lines/s against the teacher's, each stage's seconds (not in the default --stages).
           Two calls: `--stages env,distill_teacher` (carry gpu/distill) then at once `--stages distill` (carry
           nothing: a warm machine keeps the ignored gpu/ between calls, the teacher with it; $OUT does not keep).
           Untested on a GPU; estimated ~3 + ~7 minutes beside the 15 of a lease, start-up included: judge the
           teacher's steps and BLEU in the first table before quoting the gap
Writes OUT/summary.json and a log per stage, and prints a table last. --smoke runs the same stages on a CPU
with the tiny preset and small sizes.
"""

from __future__ import annotations

import argparse
import contextlib
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


def log_run(command: list[str], log: Path, timeout: float | None = None, stdin: Path | None = None,
            stdout: Path | None = None, env: dict[str, str] | None = None) -> tuple[int, list[tuple[float, str]]]:
    """Run a command (killed after `timeout` seconds: exit 124), keeping each line of its output with the seconds
    since the start when it arrived; `stdin`/`stdout`: files for its standard streams (stderr is logged then);
    `env`: variables set for it."""
    started = time.perf_counter()
    lines: list[tuple[float, str]] = []
    env = {**os.environ, "COLUMNS": "200", "PYTHONUNBUFFERED": "1", **(env or {})}
    if timeout:
        command = ["timeout", "-k", "5", str(int(timeout)), *command]
    with open(log, "a", encoding="utf-8") as out, \
            open(stdin or os.devnull, "rb") as given, open(stdout or os.devnull, "wb") as taken:
        out.write("$ " + " ".join(command) + "\n")
        process = subprocess.Popen(command, stdin=given, stdout=taken if stdout else subprocess.PIPE,
                                   stderr=subprocess.PIPE if stdout else subprocess.STDOUT, text=False, env=env)
        for raw in (process.stderr if stdout else process.stdout):
            line = raw.decode("utf-8", errors="replace")
            at = time.perf_counter() - started
            lines.append((at, line.rstrip("\n")))
            out.write(f"[{at:8.1f}s] {line}")
            out.flush()
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
        # Forced either way: SOURCE_ATTENTION picks the masked kernel for bf16 since the first H200 run, so the
        # real `applies` would never pack here; this compares the packed path's numbers with the masked one's.
        packed_attention.applies = lambda attention, x, packed=packed: packed
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
    out["packed_attention"] = {"varlen_kernel_calls": used, "used_packed_kernel": used == config.layers + config.decoder_layers,
                               "hidden": relative_error(a, b), "grad_qkv_layer0": relative_error(ga, gb)}
    return out


SMOKE_THROUGHPUT = ["--device", "cpu", "--precision", "fp32", "--length", "12", "--vocab", "2000", "--rounds", "2", "--warmup", "1"]
GPU_THROUGHPUT = ["--device", "cuda", "--precision", "bf16"]


def throughput(args, name: str, flags: list[str], timeout: float | None = None) -> dict:
    """benchmarks/train_throughput.py with `flags`, its output in OUT/NAME.log and its numbers in OUT/NAME.json."""
    json_path = args.out / f"{name}.json"
    rc, _ = log_run([sys.executable, str(HERE / "train_throughput.py"), *(SMOKE_THROUGHPUT if args.smoke else GPU_THROUGHPUT),
                     *flags, "--json", str(json_path)], args.out / f"{name}.log", timeout=timeout)
    if rc != 0:
        return {"error": f"exit {rc}, see {args.out / (name + '.log')}"}
    return {"results": json.loads(json_path.read_text())}


def stage_micro(args) -> dict:
    """nmt against Hugging Face at the paper's step, with --variants as systems of their own, and a profile."""
    variants = ["--variants", args.variants] if args.variants else []
    profiled = ["--profile", "1" if args.smoke else "5", "--profile-system", args.profile_system]
    if args.smoke:
        return throughput(args, "micro", ["--preset", "tiny", "--sentences", "8", *variants, *profiled], timeout=args.budget("micro"))
    return throughput(args, "micro", ["--preset", args.micro_preset, *variants, *profiled], timeout=args.budget("micro"))


def stage_decode_attention(args) -> dict:
    """A decoding step's attention calls by kernel: milliseconds per call at one steady shape (CUDA events over
    many calls), and per call when every call has a new shape (what eager decoding gives a kernel that plans per
    shape: the span grows every step, rows leave)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = torch.device(args.device)
    sentences, beam, heads, d_k = (256, 4, 2, 8) if args.smoke else (1024, 4, 8, 64)
    kernels = {"pytorch's choice": None, "efficient": [SDPBackend.EFFICIENT_ATTENTION], "cudnn": [SDPBackend.CUDNN_ATTENTION],
               "math": [SDPBackend.MATH]}
    results = {}

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    for dtype in (torch.float32, torch.bfloat16):
        for kind in ("self", "cross"):
            def call(width: int):
                if kind == "self":  # rows x 1 query against a span, mask (1, 1, 1, span)
                    q = torch.randn(sentences * beam, heads, 1, d_k, device=device, dtype=dtype)
                    k = torch.randn(sentences * beam, heads, width, d_k, device=device, dtype=dtype)
                    mask = torch.zeros(1, 1, 1, width, device=device, dtype=dtype)
                else:  # a sentence's beam queries against its source, mask (n, 1, 1, S)
                    q = torch.randn(sentences, heads, beam, d_k, device=device, dtype=dtype)
                    k = torch.randn(sentences, heads, width, d_k, device=device, dtype=dtype)
                    mask = torch.zeros(sentences, 1, 1, width, device=device, dtype=dtype)
                return q, k, mask

            for name, backends in kernels.items():
                key = f"{kind} {str(dtype).removeprefix('torch.')} {name}"
                context = sdpa_kernel(backends) if backends else contextlib.nullcontext()
                try:
                    with context:
                        q, k, mask = call(48)
                        for _ in range(3):
                            F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
                        sync()
                        start = time.perf_counter()
                        for _ in range(50):
                            F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
                        sync()
                        steady = (time.perf_counter() - start) / 50
                        shapes = [call(w) for w in range(17, 81)]  # made first: the loop times the calls alone
                        sync()
                        start = time.perf_counter()
                        for q, k, mask in shapes:
                            F.scaled_dot_product_attention(q, k, k, attn_mask=mask)
                        sync()
                        varying = (time.perf_counter() - start) / len(shapes)
                    results[key] = {"steady_ms": round(steady * 1e3, 4), "new_shape_ms": round(varying * 1e3, 4)}
                except RuntimeError as e:
                    results[key] = {"error": str(e).splitlines()[0][:120]}
                finally:
                    q = k = mask = shapes = None
    if device.type == "cuda":  # the shapes took tens of GB: give them back before the stages that start processes
        torch.cuda.empty_cache()
    return results


def stage_beam_attention(args) -> dict:
    """A beam step's self-attention, ms a step for all layers' keys and values of one layer (CUDA events over many
    calls): reading through slots (model/beam_attention.py's kernel, by positions a program and warps) against
    the memory-efficient kernel on a cache that is reordered first (index_select of keys and values, as
    DecoderCache.reorder does). Spans 16 and 48 of a 96-position cache, 8,192 rows x 8 heads x 64, bf16 and fp32."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from nmtcli.model.beam_attention import gathered_attention, kernel_attention, kernel_source_attention

    device = torch.device(args.device)
    rows, beam, heads, capacity, d_k = (64, 4, 2, 32, 16) if args.smoke else (8192, 4, 8, 96, 64)
    results = {}

    def timed(call, repeat: int = 20) -> float:
        for _ in range(2):
            call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(repeat):
            call()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return round((time.perf_counter() - start) / repeat * 1e3, 4)

    for dtype in (torch.bfloat16, torch.float32):
        keys, values = (torch.randn(rows, heads, capacity, d_k, device=device, dtype=dtype) for _ in range(2))
        spare = torch.empty_like(keys)
        q = torch.randn(rows, heads, 1, d_k, device=device, dtype=dtype)
        slots = torch.randint(0, beam, (rows, capacity), device=device, dtype=torch.int32)
        parents = (torch.arange(rows, device=device) // beam * beam + torch.randint(0, beam, (rows,), device=device))
        for span in ((8, 16) if args.smoke else (16, 48)):
            position = torch.tensor([span - 1], device=device)
            name = f"{str(dtype).removeprefix('torch.')} span {span}"
            mask = torch.zeros(1, 1, 1, span, device=device, dtype=dtype)

            def reorder_and_attend():
                for t in (keys, values):  # the reorder of keys and values (into the spare set) ...
                    torch.index_select(t[:, :, :span], 0, parents, out=spare[:, :, :span])
                with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):  # ... and the attention
                    F.scaled_dot_product_attention(q, keys[:, :, :span], values[:, :, :span], attn_mask=mask)

            results[f"{name} reorder + efficient"] = timed(reorder_and_attend) if device.type == "cuda" else None
            if device.type != "cuda":
                results[f"{name} slots twin"] = timed(lambda: gathered_attention(q, keys[:, :, :span], values[:, :, :span], slots, position, beam))
                continue
            reference = gathered_attention(q, keys[:, :, :span], values[:, :, :span], slots, position, beam).float()
            for block in (16, 32, 64):
                for warps in (1, 2, 4):
                    call = lambda: kernel_attention(q, keys, values, slots, position, beam, block, warps)  # noqa: E731
                    try:
                        error = (call().float() - reference).abs().max().item()
                        results[f"{name} slots block {block} warps {warps}"] = {"ms": timed(call), "max_error": round(error, 5)}
                    except Exception as e:  # a config the compiler refuses: say so, go on
                        results[f"{name} slots block {block} warps {warps}"] = {"error": str(e).splitlines()[0][:120]}
        keys = values = spare = None
        # Encoder-decoder attention: a sentence's beam queries against its source of 48 (a third of it padding
        # in every other sentence), the memory-efficient kernel against the one for few queries.
        n, source = rows // beam, 48
        q = torch.randn(n, beam, heads, d_k, device=device, dtype=dtype).transpose(1, 2)
        keys, values = (torch.randn(n, heads, source, d_k, device=device, dtype=dtype) for _ in range(2))
        mask = torch.zeros(n, 1, 1, source, device=device, dtype=dtype)
        mask[::2, ..., 32:] = float("-inf")
        name = f"{str(dtype).removeprefix('torch.')} source {source}"

        def efficient():
            with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
                return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)

        results[f"{name} efficient"] = timed(efficient)
        if device.type == "cuda":
            reference = efficient().float()
            for block in (16, 32, 64):
                for warps in (1, 2, 4):
                    call = lambda: kernel_source_attention(q, keys, values, mask, block, warps)  # noqa: E731
                    try:
                        error = (call().float() - reference).abs().max().item()
                        results[f"{name} few-queries block {block} warps {warps}"] = {"ms": timed(call), "max_error": round(error, 5)}
                    except Exception as e:
                        results[f"{name} few-queries block {block} warps {warps}"] = {"error": str(e).splitlines()[0][:120]}
        q = keys = values = mask = None
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return results


def stage_translate(args) -> dict:
    """benchmarks/translate_speed.py, nmt against Hugging Face, fixed and natural lengths, with graph state."""
    json_path = args.out / "translate.json"
    flags = (["--device", "cpu", "--sentences", "16", "--batches", "8,16", "--runs", "1", "--length", "4", "--vocab-size", "2000"] if args.smoke
             else ["--device", "cuda", "--batches", args.translate_batches, "--runs", "2"])
    settings = "fixed" if args.smoke else "fixed,natural"  # a random model's natural lengths run to the limit: minutes on a CPU
    rc, _ = log_run([sys.executable, str(HERE / "translate_speed.py"), *flags, "--settings", settings, "--engines", "nmt,hf",
                     "--json", str(json_path)], args.out / "translate.log", timeout=args.budget("translate"))
    if rc != 0 or not json_path.is_file():
        return {"error": f"exit {rc}, see {args.out / 'translate.log'}"}
    return {"rows": json.loads(json_path.read_text())}


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


def write_splits(text: Path, splits: dict[str, list[tuple[str, str]]]) -> None:
    """Each split's (en, de) pairs as text/SPLIT.en and text/SPLIT.de, a line a pair."""
    for split, part in splits.items():
        (text / f"{split}.en").write_text("".join(s + "\n" for s, _ in part), encoding="utf-8")
        (text / f"{split}.de").write_text("".join(t + "\n" for _, t in part), encoding="utf-8")


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
    write_splits(text, {"train": rows[: -valid - test], "valid": rows[-valid - test : -test], "test": rows[-test:]})
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
    data = args.data
    if not (data / "manifest.json").is_file():
        return {"error": f"no prepared data in {data}: run the corpus stage first (on a CPU) and carry it"}
    if args.smoke:
        common = ["--preset", "tiny", "--device", "cpu", "--max-time", "20s", "--batch-tokens", "2048", "--log-every", "5"]
    else:
        common = ["--preset", "base", "--device", "cuda", "--max-time", args.train_time, "--log-every", "20"]
    # graphs: the step replayed from CUDA graphs (on a CPU the flag is a warning and the run is eager's).
    variants = {"eager": [], "graphs": ["--cuda-graphs"], "compile": ["--compile"], "gpus 1 (torchrun)": ["--gpus", "1"]}
    common += ["--valid-every", "1000000", "--save-every", "1000000", *args.train_flags.split()]  # one validation and one checkpoint, at the end
    results = {}
    for name, flags in variants.items():
        if args.train_variants and name.split()[0] not in args.train_variants:
            continue
        run_dir = args.out / "runs" / name.split()[0]
        log = args.out / f"train-{name.split()[0]}.log"
        rc, lines = log_run([*NMT, "train", "--data", str(data), "-o", str(run_dir), "--restart", *common, *flags], log,
                            timeout=args.budget("train"))
        results[name] = {"exit": rc, "log": str(log), **train_figures(lines)}
    return results


def stage_cli(args) -> dict:
    """The base run of the train stage averaged, then `nmt translate` of the test set as whole processes."""
    run = args.out / "runs" / "eager"
    model = args.out / "model"
    log = args.out / "cli.log"
    rc, _ = log_run([*NMT, "average", str(run), "-o", str(model)], log, timeout=120)
    if rc != 0:
        return {"error": f"nmt average exit {rc}, see {log}"}
    test = Path(str(args.test) + ".en")
    device = "cpu" if args.smoke else "cuda"
    results = {"lines": sum(1 for _ in open(test, encoding="utf-8"))}
    dtypes = ("fp32",) if args.smoke else ("fp32", "bf16")
    # The default beam cache (read through slots on a GPU) in every setting; the cache that reorders
    # (NMT_BEAM_CACHE=reorder) beside it with graphs, where the two differ most.
    runs = [(dtype, graphs, "auto") for dtype in dtypes for graphs in ("--cuda-graphs", "--no-cuda-graphs")]
    runs += [(dtype, "--cuda-graphs", "reorder") for dtype in dtypes]
    for dtype, graphs, cache in runs:
        if args.smoke and graphs == "--cuda-graphs":
            continue
        name = f"{dtype} {graphs.removeprefix('--')}" + ("" if cache == "auto" else f" {cache}")
        out = args.out / f"translation.{dtype}.{graphs.removeprefix('--')}.{cache}.de"
        started = time.perf_counter()
        rc, lines = log_run([*NMT, "translate", "-m", str(model), "--device", device, "--precision", dtype, graphs], log,
                            timeout=120, stdin=test, stdout=out, env={"NMT_BEAM_CACHE": cache})
        whole = time.perf_counter() - started
        said = next((line for _, line in lines if "translated" in line), "")
        warnings = [line for _, line in lines if "warning" in line]
        entry = {"exit": rc, "whole_process_s": round(whole, 2), "said": said.strip(), "warnings": warnings[:3]}
        if rc == 0:
            rc2, scored = log_run([*NMT, "score", str(out), "--ref", str(args.test) + ".de"], log, timeout=60)
            entry["score"] = next((line.strip() for _, line in scored if "BLEU" in line), None)
        results[name] = entry
    for dtype in dtypes:  # the same translations whichever way the cache follows the beam
        a, b = (args.out / f"translation.{dtype}.cuda-graphs.{cache}.de" for cache in ("auto", "reorder"))
        if a.is_file() and b.is_file():
            pairs = list(zip(a.read_text(encoding="utf-8").splitlines(), b.read_text(encoding="utf-8").splitlines()))
            results[f"{dtype} lines differing, slots vs reorder"] = sum(x != y for x, y in pairs)
    if not args.no_startup:
        results["startup"] = startup_breakdown(args, model, device)
    results["profile"] = translation_profile(args, model, test, device)
    return results


def stage_glossary(args) -> dict:
    """Glossaries on the device: the cli stage's model, its test set's first lines with a glossary taken from their
    references (benchmarks/glossary.py terms: every term present? the whole output's BLEU), and what placing the terms
    costs against the plain search (speed: 1, 5 and 20 terms a line)."""
    model = args.out / "model"
    if not (model / "config.json").is_file():
        return {"error": "no model: run the cli stage first"}
    lines = 40 if args.smoke else 1000
    source, reference = args.out / "glossary.en", args.out / "glossary.de"
    for side, path in (("en", source), ("de", reference)):
        with open(str(args.test) + f".{side}", encoding="utf-8") as f:
            path.write_text("".join(line for _, line in zip(range(lines), f)), encoding="utf-8")
    results = {}
    for part, more in (("terms", []), ("speed", ["--rounds", "1" if args.smoke else "2"])):
        rc, out = log_run([sys.executable, str(HERE / "glossary.py"), part, "--model", str(model), "--device", args.device,
                           "--source", str(source), "--reference", str(reference), *more], args.out / "glossary.log",
                          timeout=args.budget("glossary") / 2)
        results[part] = {"exit": rc, "table": [line for _, line in out if line.strip() and "Warning" not in line][-6:]}
    return results


PROFILE = r"""
import sys, time, torch
from torch.profiler import ProfilerActivity, profile
from nmtcli.inference.settings import SearchSettings
from nmtcli.inference.translator import Translator
model, test, device, dtype, graphs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] == "graphs"
lines = open(test, encoding="utf-8").read().splitlines()[: int(sys.argv[6])]
sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
translator = Translator(model, device, SearchSettings(cuda_graphs=graphs), precision=dtype)
list(translator.translate(lines))  # warm: graphs recorded, kernels loaded
sync()
start = time.perf_counter()
list(translator.translate(lines))
sync()
print(f"second pass, {len(lines)} lines, {dtype}, graphs {graphs}: {time.perf_counter() - start:.2f} s; {translator.graphs.summary() if translator.graphs else ''}")
with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])) as prof:
    list(translator.translate(lines))
    sync()
if device.startswith("cuda"):
    print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=22, max_name_column_width=60))
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))
"""


def translation_profile(args, model: Path, test: Path, device: str) -> dict:
    """A second and third pass over the test set in one process (bf16, with and without graphs): the time of a
    warm pass (graphs recorded) and torch.profiler's top operations of the third (OUT/profile.log)."""
    results = {}
    for graphs, cache in (("graphs", "auto"), ("graphs", "reorder"), ("eager", "auto")):
        rc, lines = log_run([sys.executable, "-c", PROFILE, str(model), str(test), device, "fp32" if args.smoke else "bf16", graphs,
                             "20" if args.smoke else "100000"], args.out / "profile.log", timeout=90, env={"NMT_BEAM_CACHE": cache})
        results[graphs + ("" if cache == "auto" else f" {cache}")] = next((line.strip() for _, line in lines if line.startswith("second pass")),
                                                                          f"exit {rc}")
    return results


STARTUP = r"""
import json, sys, time
t0 = time.perf_counter()
import torch
t1 = time.perf_counter()
device = torch.device(sys.argv[2])
if device.type == "cuda":
    torch.zeros(1, device=device); torch.cuda.synchronize()
t2 = time.perf_counter()
from nmtcli.inference.translator import Translator
t3 = time.perf_counter()
translator = Translator(sys.argv[1], device)
if device.type == "cuda":
    torch.cuda.synchronize()
t4 = time.perf_counter()
list(translator.translate(["A first line to translate."]))
if device.type == "cuda":
    torch.cuda.synchronize()
t5 = time.perf_counter()
print(json.dumps({"import torch": t1 - t0, "CUDA context": t2 - t1, "import nmt": t3 - t2, "model load": t4 - t3, "first line": t5 - t4}))
"""


def startup_breakdown(args, model: Path, device: str) -> dict:
    """Where the seconds before the first translated line go, in a fresh process (median of 3)."""
    runs = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", STARTUP, str(model), device], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE.parent), os.environ.get("PYTHONPATH")]))})
        if out.returncode != 0:
            return {"error": out.stderr[-500:]}
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {key: round(statistics.median(r[key] for r in runs), 3) for key in runs[0]}


def stage_loss(args) -> dict:
    """`nmt train --preset tiny --max-steps N` on the carried corpus: its loss at every log line (the same command
    on a CPU gives the curve to hold it against: same seed, same batches)."""
    if not (args.data / "manifest.json").is_file():
        return {"error": f"no prepared data in {args.data}"}
    device = "cpu" if args.smoke else "cuda"
    results = {}
    for precision in (("fp32",) if args.smoke else args.loss_precisions.split(",")):
        log = args.out / f"loss-{precision}.log"
        run_dir = args.out / "runs" / f"loss-{precision}"
        rc, lines = log_run([*NMT, "train", "--data", str(args.data), "-o", str(run_dir), "--restart", "--preset", "tiny",
                             "--max-steps", str(args.loss_steps), "--log-every", "25", "--valid-every", "1000000",
                             "--save-every", "1000000", "--device", device, "--precision", precision, "--seed", "1"],
                            log, timeout=args.budget("loss"))
        curve = [(int(m.group(1)), float(m.group(2))) for _, line in lines if (m := LOSS_LINE.search(line))]
        results[precision] = {"exit": rc, "loss": curve}
    return results


LOSS_LINE = re.compile(r"step\s+(\d+)\s+loss\s+([\d.]+)")

DISTILL_MAX_WORDS = 40  # the generated corpus's longest sentence: the teacher translates every training line at beam 8


def stage_distill_corpus(args) -> dict:
    """Issue 52's corpus, made and prepared on the CPU: --distill-dir/corpus/{train,valid,test}.{en,de} and
    --distill-dir/data."""
    sys.path.insert(0, str(HERE))
    from prepare_speed import wmt_like_pairs

    text, data = args.distill_dir / "corpus", args.distill_dir / "data"
    pairs, held, vocab = (600, 100, 1000) if args.smoke else (args.distill_pairs, 500, 8000)
    if (data / "manifest.json").is_file():  # made before: reused only where it is the corpus asked for
        manifest = json.loads((data / "manifest.json").read_text())
        made = (manifest["splits"]["train"]["input_pairs"], manifest["vocab_size"])
        if made != (pairs, vocab):
            return {"error": f"{data} holds {made[0]} pairs and {made[1]} pieces, not {pairs} and {vocab}: remove {args.distill_dir} or pass another --distill-dir"}
        return {"data": str(data), "reused": True, "pairs": pairs, "vocab": vocab}
    text.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, str]] = []
    for part in wmt_like_pairs(4 * (pairs + 2 * held), 0, parts=8, learnable=True):
        rows += [row for row in part if row[1] and len(row[0].split()) <= DISTILL_MAX_WORDS]
        if len(rows) >= pairs + 2 * held:
            break
    rows = rows[: pairs + 2 * held]
    if len(rows) < pairs + 2 * held:
        return {"error": f"only {len(rows)} generated pairs of <= {DISTILL_MAX_WORDS} words"}
    write_splits(text, {"train": rows[:pairs], "valid": rows[pairs:pairs + held], "test": rows[pairs + held:]})
    rc, _ = log_run([*NMT, "prepare", "--train", str(text / "train"), "--valid", str(text / "valid"), "--test", str(text / "test"),
                     "-s", "en", "-t", "de", "--vocab-size", str(vocab), "-o", str(data)], args.distill_dir / "corpus.log")
    if rc != 0:
        return {"error": f"nmt prepare exit {rc}, see {args.distill_dir / 'corpus.log'}"}
    return {"data": str(data), "pairs": pairs, "vocab": vocab}


def stage_distill_teacher(args) -> dict:
    """The teacher: `small` trained on the distill corpus for --teacher-time (smoke: tiny, 40 steps), averaged."""
    data, run, teacher = args.distill_dir / "data", args.distill_dir / "teacher-run", args.distill_dir / "teacher"
    if not (data / "manifest.json").is_file():
        return {"error": f"no prepared data in {data}: run the distill_corpus stage first (on a CPU) and carry it"}
    log = args.out / "distill-teacher.log"
    length = (["--preset", "tiny", "--max-steps", "40"] if args.smoke else
              ["--preset", "small", "--max-time", args.teacher_time, "--warmup", str(args.teacher_warmup)])
    started = time.perf_counter()
    rc, lines = log_run([*NMT, "train", "--data", str(data), "-o", str(run), "--restart", *length, "--device", args.device,
                         "--seed", "1"], log, timeout=args.budget("distill_teacher"))
    trained = time.perf_counter() - started
    result = {"train_exit": rc, "train_s": round(trained, 1), **train_figures(lines)}
    result.pop("log_lines", None)
    if rc == 0:
        rc, said = log_run([*NMT, "average", str(run), "-o", str(teacher), "--device", args.device], log,
                           timeout=min(120.0, args.budget("distill_teacher")))
        result["average_exit"] = rc
        result["average_said"] = [line.strip() for _, line in said if "brevity" in line][:1]
    return result


def stage_distill(args) -> dict:
    """`nmt distill` of the teacher into student-tiny on the distill corpus; its report's figures."""
    teacher, work, text = args.distill_dir / "teacher", args.distill_dir / "work", args.distill_dir / "corpus"
    if not (teacher / "config.json").is_file():
        return {"error": f"no teacher in {teacher}: run the distill_teacher stage first"}
    length = ["--max-steps", "20"] if args.smoke else ["--max-time", args.student_time, "--warmup", str(args.student_warmup)]
    log = args.out / "distill.log"
    started = time.perf_counter()
    rc, _ = log_run([*NMT, "distill", "-m", str(teacher), "--train", str(text / "train"), "--valid", str(text / "valid"),
                     "--test", str(text / "test"), "--device", args.device, *length, "-o", str(work)], log,
                    timeout=args.budget("distill"))
    result = {"exit": rc, "seconds": round(time.perf_counter() - started, 1), "log": str(log)}
    report = work / "report.json"
    if report.is_file():
        result["report"] = json.loads(report.read_text())
    return result


def distill_rows(summary: dict) -> list[str]:
    """The distill stages' lines of the table: teacher and student quality, the gap, CPU speed, stage seconds."""
    rows = []
    teacher = summary.get("distill_teacher")
    if isinstance(teacher, dict) and "train_exit" in teacher:
        rows.append(f"\ndistill teacher: train exit {teacher['train_exit']} in {teacher['train_s']} s, {teacher.get('steps', '-')} steps, "
                    f"average exit {teacher.get('average_exit', '-')} {' '.join(teacher.get('average_said', []))[:120]}")
    distill = summary.get("distill")
    if isinstance(distill, dict) and "exit" in distill:
        rows.append(f"nmt distill exit {distill['exit']} in {distill['seconds']} s ({distill['log']})")
        found = distill.get("report") or {}  # nmt distill's report.json
        for model in found.get("models", []):
            rows.append(f"  {model['model']:<8} {model['precision']:<5} {'shortlist' if model.get('shortlist') else '':<9} "
                        f"BLEU {model['bleu']:>6}  chrF {model['chrf']:>6}  CPU lines/s 1 thread {model['lines_per_s_1']:>7}  "
                        f"all {model['lines_per_s_all']:>7}  {model['mb']} MB")
        if "bleu_gap" in found:
            rows.append(f"  BLEU gap teacher - student fp32: {found['bleu_gap']} (issue 52: within 1.5); int8 student (with its "
                        f"shortlist where it has one) vs fp32 teacher, 1 CPU thread: {found.get('int8_student_vs_teacher_1_thread')}x (issue 52: >= 5x)")
        if "stages" in found:
            rows.append(f"  {found.get('lines_translated')} lines distilled, {found.get('lines_kept')} kept, student {found.get('student_steps')} steps; "
                        + ", ".join(f"{name} {v['seconds']:.0f} s" for name, v in found["stages"].items()))
    return rows


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
    attention = summary.get("decode_attention")
    if isinstance(attention, dict) and attention and "error" not in attention:
        rows.append(f"\n{'decoding attention, ms a call':<40} {'steady':>8} {'new shape':>10}")
        for name, r in attention.items():
            rows.append(f"{name:<40} " + (f"{r['steady_ms']:>8.3f} {r['new_shape_ms']:>10.3f}" if "steady_ms" in r else r.get("error", "")))
    beam_attention = summary.get("beam_attention")
    if isinstance(beam_attention, dict) and beam_attention:
        rows.append("\nbeam step self-attention, ms (keys and values of one layer)")
        rows.extend(f"{name:<44} {r}" for name, r in beam_attention.items())
    translate = summary.get("translate")
    if isinstance(translate, dict) and "rows" in translate:
        rows.append(f"\n{'translate_speed':<28} {'batch':>6} {'median s':>9} {'tok/s':>9}  graphs captured/dropped/replayed")
        for r in translate["rows"]:
            g = r.get("graphs")
            state = "-" if g is None else ("OFF " + str(g.get("off_reason"))[:60]) if not g["enabled"] else \
                f"on {g.get('captured')}/{g.get('dropped')}/{g.get('replayed')}"
            name = f"{r['setting']} {r['engine']} {r['dtype']}"
            rows.append(f"{name:<28} {r['batch']:>6} {r['median_s']:>9.2f} {r['tokens'] / r['median_s']:>9,.0f}  {state}")
    elif isinstance(translate, dict):
        rows.append(f"\ntranslate: {translate}")
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
    cli = summary.get("cli")
    if isinstance(cli, dict) and cli:
        rows.append(f"\nnmt translate, {cli.get('lines')} lines (whole process s; what it said; BLEU)")
        for name, r in cli.items():
            if isinstance(r, dict) and "whole_process_s" in r:
                rows.append(f"{name:<24} exit {r['exit']} {r['whole_process_s']:>7.2f} s  {r['said'][:110]}  {r.get('score') or ''}"
                            + (f"  WARNINGS: {r['warnings']}" if r["warnings"] else ""))
        rows += [f"{name}: {value}" for name, value in cli.items() if name.endswith("slots vs reorder")]
        if "startup" in cli:
            rows.append(f"start-up (median of 3): {cli['startup']}")
        for name, said in (cli.get("profile") or {}).items():
            rows.append(f"in-process {name}: {said}")
        if "error" in cli:
            rows.append(f"cli: {cli['error']}")
    loss = summary.get("loss")
    if isinstance(loss, dict) and loss:
        for name, r in loss.items():
            if isinstance(r, dict) and "loss" in r:
                rows.append(f"loss curve {name} (exit {r['exit']}): " + " ".join(f"{step}:{value:.3f}" for step, value in r["loss"]))
    glossary = summary.get("glossary")
    if isinstance(glossary, dict) and "terms" in glossary:
        for part in ("terms", "speed"):
            rows += [f"glossary {part} (exit {glossary[part]['exit']}):", *glossary[part]["table"]]
    rows += distill_rows(summary)
    for name, value in summary.items():
        if isinstance(value, dict) and set(value) == {"error"}:
            rows.append(f"{name}: {value['error']}")
    return rows


STAGES = {"env": stage_env, "check": stage_check, "decode_attention": stage_decode_attention, "beam_attention": stage_beam_attention, "translate": stage_translate,
          "micro": stage_micro, "batch": stage_batch, "corpus": stage_corpus, "train": stage_train, "cli": stage_cli, "loss": stage_loss,
          "glossary": stage_glossary, "distill_corpus": stage_distill_corpus, "distill_teacher": stage_distill_teacher,
          "distill": stage_distill}
# Not run unless named in --stages: the distill corpus is made on the CPU, and the distill stages take a lease of their own.
ON_REQUEST = ("distill_corpus", "distill_teacher", "distill")
# Seconds each stage may take at most (its commands' timeouts); the deadline cuts them further.
BUDGETS = {"translate": 200, "micro": 150, "train": 200, "loss": 90, "glossary": 120, "distill_teacher": 240, "distill": 480}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu_check"), help="where logs, data and summary.json go")
    parser.add_argument("--stages", default=",".join(name for name in STAGES if name not in ON_REQUEST),
                        help=f"comma-separated, of {', '.join(STAGES)} (the default: all but {', '.join(ON_REQUEST)})")
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny preset, small sizes: check that the script works")
    parser.add_argument("--micro-preset", default="both", choices=["base", "big", "both"])
    parser.add_argument("--pairs", type=int, default=300_000, help="generated training pairs")
    parser.add_argument("--vocab", type=int, default=32_000, help="sentencepiece vocabulary of the generated corpus")
    parser.add_argument("--train-time", default="3m", help="--max-time of each `nmt train` run")
    parser.add_argument("--train-variants", help="comma-separated, of eager, graphs, compile, gpus (default: all)")
    parser.add_argument("--data", type=Path, default=Path("gpu/data"), help="the prepared corpus (the corpus stage writes OUT/data)")
    parser.add_argument("--test", type=Path, default=Path("gpu/test"), help="TEST.en / TEST.de: the lines the cli stage translates")
    parser.add_argument("--variants", help="the micro stage's nmt variants (train_throughput.py --variants)")
    parser.add_argument("--profile-system", default="nmt", help="the micro stage's system to profile")
    parser.add_argument("--loss-steps", type=int, default=300, help="the loss stage's steps")
    parser.add_argument("--train-flags", default="", help="more `nmt train` flags for the train stage (e.g. '--precision bf16-master')")
    parser.add_argument("--translate-batches", default="512,3003", help="the translate stage's batch sizes (sentences)")
    parser.add_argument("--no-startup", action="store_true", help="the cli stage leaves out its start-up breakdown")
    parser.add_argument("--loss-precisions", default="bf16", help="the loss stage's --precision values, comma-separated")
    parser.add_argument("--distill-dir", type=Path, default=Path("gpu/distill"), help="the distill stages' corpus, teacher and work dir")
    parser.add_argument("--distill-pairs", type=int, default=20_000, help="the distill corpus's training pairs")
    parser.add_argument("--teacher-time", default="150s", help="the distill teacher's `nmt train --max-time`")
    parser.add_argument("--student-time", default="120s", help="`nmt distill --max-time`: the student's training time")
    # Minutes of training are a few thousand steps: with the presets' 4,000-step warmup the learning rate would peak
    # at the end, if at all.
    parser.add_argument("--teacher-warmup", type=int, default=1000, help="the distill teacher's `nmt train --warmup`")
    parser.add_argument("--student-warmup", type=int, default=1000, help="`nmt distill --warmup`: the student's")
    parser.add_argument("--deadline", type=float, default=0, help="seconds for everything (0: none): stages that cannot fit are skipped")
    args = parser.parse_args()
    began = time.perf_counter()

    def budget(stage: str) -> float:
        """A stage's timeout: its own budget, cut to what the deadline leaves (30 s kept for the summary)."""
        own = BUDGETS.get(stage, 600) * (3 if args.smoke else 1)
        return max(10.0, min(own, args.deadline - (time.perf_counter() - began) - 30)) if args.deadline else own

    args.budget = budget
    args.device = "cpu" if args.smoke else "cuda"
    args.train_variants = args.train_variants.split(",") if args.train_variants else None
    if args.smoke and args.distill_dir == Path("gpu/distill"):  # a smoke corpus must never stand in for the real one
        args.distill_dir = args.out / "distill-smoke"
    args.out.mkdir(parents=True, exist_ok=True)
    summary_path = args.out / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
    for name in args.stages.split(","):
        started = time.perf_counter()
        if args.deadline and args.deadline - (started - began) < 40:
            summary[name] = {"error": f"skipped: {args.deadline - (started - began):.0f} s left of --deadline"}
            continue
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
