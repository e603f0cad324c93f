"""Decoding speed of `nmt` against Hugging Face `generate` and CTranslate2, on one Transformer-base model.

One random Marian model (OPUS-MT's shape: d_model 512, 6+6 layers, 8 heads, FFN 2048, swish, tied
embeddings) is built with transformers, converted with CTranslate2's own converter, and imported
into nmt. All three decode the same source ids with beam 4, on the same CPU threads or the same GPU;
sentences are sorted by length and cut into the same batches for every engine; runs alternate
between engines and the table reports medians.

Each engine runs in a process of its own (a worker that loads its model once and times the runs
it is sent), so no engine runs beside another's threads, allocator settings or OpenMP runtime:
in one process CTranslate2's OpenMP threads and PyTorch's slowed each other by up to 30%.

Settings:
- fixed: every engine makes exactly --length decoder steps per sentence (EOS banned before, forced
  or cut off after): per-token cost compared fairly. nmt emits --length - 1 tokens and EOS, Hugging
  Face the same (its forced EOS), CTranslate2 --length tokens (it stops at its limit without an EOS
  step); each counts as --length tokens.
- natural: the engines decode until EOS or the length limit, as a user runs them.
- process: whole processes from text to text, start-up included: `nmt translate` against scripts
  that do what a Hugging Face user writes (MarianTokenizer, generate, batch_decode) and what a
  CTranslate2 user writes (sentencepiece, translate_batch).
- prefix: the cost of target prefixes (`nmt translate --prefix-file`; CTranslate2's target_prefix):
  each engine decodes naturally with the first --prefix-tokens tokens of its own plain output forced,
  against the plain search on the same batches in the same rounds ("prefix-plain" rows); the last
  table gives the time ratio forced/plain of each round (median, range). Not in the default --settings.
- sampling (not in the default --settings): nmt's sampling (`--sampling`, each of --sampling-specs, one
  sample per line) against nmt's beam 4 on the same batches in the same worker, lines/s, with fixed and
  with natural lengths (sampling must reach at least beam 4's lines/s). On the benchmark's random model
  beam and samples alike run to the length limit; a trained model's samples end where they end.
- forced: nmt alone, in this process: beam 4 as in the fixed setting, the same search plus the
  teacher-forced pass over its best hypotheses that `--alignment` adds (inference/forced.py), and
  `--forced-decoding`'s forced pass over targets of --length tokens (no search); rounds alternate, the table
  gives medians and each one's speed relative to beam 4.

--background-load N runs N CPU-bound processes beside the engines (background_load.py): a busy
machine. The process setting then runs every command both quiet and loaded and compares the loaded
time with the engine's fair share of the CPU; with --threads 0 each engine picks its own threads
(and nmt its wait policy: docs/speed.md), as a user who sets nothing gets them. Loaded, nmt's default also
runs against `nmt --threads 1`, and a last line says whether the default stays within issue 26's bar (1.15x
of one thread's time beside the same load: BUSY_DEFAULT_BAR).

Every engine runs in each of --dtypes it has at each of --batches, and the table marks each one's
best batch. On a GPU the default dtypes are fp32 and bf16, and nmt replays its steps as CUDA graphs
unless --no-graphs; on a CPU fp32, and --dtypes fp32,int8 adds int8 (nmt --precision int8, CTranslate2's
int8, and transformers' MarianMTModel after torch's quantize_dynamic, what its users do for int8).

Usage:
  python benchmarks/translate_speed.py [--sentences 200] [--threads 2] [--runs 3]      # the CPU figures
  python benchmarks/translate_speed.py --device cuda                                    # one GPU, 3,003 sentences
  python benchmarks/translate_speed.py --dtypes fp32,int8                             # the CPU figures with int8
  python benchmarks/translate_speed.py --settings process --threads 0 --background-load 2   # a busy machine
  python benchmarks/translate_speed.py --settings prefix --engines nmt,ct2            # prefix cost vs plain beam
  python benchmarks/translate_speed.py --device cpu --dtypes fp32,int8 --sentences 8 --runs 1 --length 4  # smoke
  python benchmarks/translate_speed.py --settings sampling --engines nmt --sentences 64 --runs 3        # sampling vs beam 4
  python benchmarks/translate_speed.py --settings forced --runs 5                      # alignment and score-only vs beam 4
Needs the `bench` extra: pip install -e ".[bench]" (transformers, ctranslate2).
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
from dataclasses import dataclass
from pathlib import Path

import torch
from background_load import BackgroundLoad, cpus, fair_seconds, load_average

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CT2_TYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "int8": "int8"}


def build_marian(directory: Path, vocab_size: int, seed: int) -> None:
    """A random MarianMTModel of OPUS-MT's shape, saved with tokenizer files so converters accept it.

    The vocabulary holds the sentencepiece pieces (so that text tokenizes into real ids) followed
    by filler entries up to `vocab_size`."""
    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=vocab_size, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish",
        max_position_embeddings=512, pad_token_id=vocab_size - 1, eos_token_id=0,
        decoder_start_token_id=vocab_size - 1, scale_embedding=True, share_encoder_decoder_embeddings=True,
    )
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # a random model's logits are nearly flat; sharpen them so beams differ
        model.model.shared.weight.mul_(4)
    model.save_pretrained(directory)
    text = directory / "spm.txt"
    text.write_text("".join(f"word{i} token{i % 97} piece{i % 13}\n" for i in range(2000)))
    pieces: list[str] = []
    for name in ("source", "target"):
        spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(directory / name), vocab_size=150, minloglevel=2)
        (directory / f"{name}.model").rename(directory / f"{name}.spm")
        processor = spm.SentencePieceProcessor(model_file=str(directory / f"{name}.spm"))
        pieces += [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
    words = ["</s>", "<unk>", *dict.fromkeys(pieces)]
    words += [f"tok{i}" for i in range(len(words), vocab_size - 1)]
    (directory / "vocab.json").write_text(json.dumps({**{w: i for i, w in enumerate(words)}, "<pad>": vocab_size - 1}))
    (directory / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}))


def import_nmt(marian_dir: Path) -> Path:
    """nmt's model dir with the Marian weights."""
    from nmtcli.interop.marian import import_marian

    out = marian_dir.parent / "nmt"
    import_marian(str(marian_dir), out)
    return out


@dataclass(frozen=True)
class Run:
    engine: str
    dtype: str
    batch: int
    search: str = "beam 4"  # or a --sampling spec (nmt only; the sampling setting)

    def __str__(self) -> str:
        return f"{self.engine} {self.dtype} batch {self.batch}" + (f" {self.search}" if self.search != "beam 4" else "")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--sentences", type=int, help="default: 200 on a CPU, 3,003 (newstest2014) on a GPU")
    parser.add_argument("--source-length", type=int, default=27, help="average source tokens (newstest2014: ~27)")
    parser.add_argument("--length", type=int, default=30, help="output tokens in the fixed setting")
    parser.add_argument("--batches", help="sentences per batch, comma-separated; each engine's best is marked (default: 32 on a CPU, 128,512,1024,3003 on a GPU)")
    parser.add_argument("--dtypes", help="comma-separated: fp32, bf16, fp16, int8 (a CPU's; default: fp32 on a CPU, fp32,bf16 on a GPU)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of every engine; 0: each engine's own default (nmt's: nmtcli/threads.py)")
    parser.add_argument("--background-load", type=int, default=0, metavar="N",
                        help="N CPU-bound processes beside the engines (all settings); the process setting then runs each command quiet and loaded")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=58101, help="OPUS-MT en-de has 58,101")
    parser.add_argument("--settings", default="fixed,natural,process", help="fixed, natural, process, prefix, sampling, forced (comma-separated)")
    parser.add_argument("--prefix-tokens", type=int, default=3, help="prefix setting: tokens of the plain output forced")
    parser.add_argument("--engines", default="nmt,hf,ct2")
    parser.add_argument("--sampling-specs", default="full,topk:10,topp:0.9", help="the sampling setting's --sampling specs, comma-separated")
    parser.add_argument("--no-pack", action="store_true", help="leave nmt's linear layers unpacked (CPU)")
    parser.add_argument("--no-graphs", action="store_true", help="no CUDA graphs for nmt (GPU)")
    parser.add_argument("--json", help="also write the decoding table's rows to this file")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: serve one engine's runs (see Worker)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    gpu = args.device.startswith("cuda")
    args.sentences = args.sentences or (3003 if gpu else 200)
    args.batches = [int(b) for b in (args.batches or ("128,512,1024,3003" if gpu else "32")).split(",")]
    args.dtypes = (args.dtypes or ("fp32,bf16" if gpu else "fp32")).split(",")
    if args.threads == 0 and args.settings != "process":
        parser.error("--threads 0 (each engine's default) is for --settings process alone")
    return args


def make_sources(args) -> list[list[int]]:
    """The benchmark's source sentences (random ids ending in EOS), sorted by length: the same in every process."""
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(args.source_length - 8, args.source_length + 9, (args.sentences,), generator=g)
    return sorted((torch.randint(2, args.vocab_size - 1, (int(n),), generator=g).tolist() + [0] for n in lengths), key=len)


def main() -> None:
    args = parse_args()
    if args.worker:
        serve_worker(args)
        return
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    work = Path(tempfile.mkdtemp(prefix="nmt-bench-"))
    build_marian(work / "marian", args.vocab_size, seed=0)
    nmt_dir = import_nmt(work / "marian")
    if "ct2" in args.engines.split(","):  # converted here, so that the worker holds only CTranslate2's model
        import ctranslate2

        ctranslate2.converters.TransformersConverter(str(work / "marian")).convert(str(work / "ct2"), force=True)
    workers = {name: Worker(name, work) for name in args.engines.split(",") if name in ENGINES}
    described = "; ".join(f"{name}: {worker.describe}" for name, worker in workers.items())
    where = torch.cuda.get_device_name(device) if gpu else f"{args.threads} CPU threads" if args.threads else "each engine's default CPU threads"
    print(f"# {args.sentences} sentences, ~{args.source_length} source tokens, beam 4, {where}, {args.runs} runs, "
          f"each engine in its own process; {described}; {load_average()}"
          + (f"; {args.background_load} CPU-bound process(es) beside" if args.background_load else ""), file=sys.stderr)

    rows: list[tuple[str, Run, int, float, float | None, dict | None]] = []
    sampling_rows: list[tuple[str, Run, int, float]] = []
    try:
        for setting in args.settings.split(","):
            if setting == "process":  # it runs each command quiet and loaded itself
                rows += measure_processes(args, device, work, nmt_dir, args.sentences, max(args.batches))
                continue
            if setting == "forced":
                measure_forced(args, device, nmt_dir)
                continue
            if setting == "sampling":
                sampling_rows += measure_sampling(args, workers["nmt"])
                continue
            with BackgroundLoad(args.background_load):  # nothing for 0
                runs = [Run(name, dtype, b) for name, worker in workers.items() for dtype in worker.dtypes for b in args.batches]
                if setting == "prefix":  # each engine with prefixes, and plain in the same rounds
                    runs = [Run(f"{run.engine}{kind}", run.dtype, run.batch) for run in runs if run.engine in PREFIX_ENGINES for kind in ("", "-plain")]
                times: dict[Run, list[float]] = {r: [] for r in runs}
                tokens: dict[Run, int] = {}
                peak: dict[Run, float | None] = {}
                graphs: dict[Run, dict | None] = {}
                def engine_setting(run: Run) -> tuple[Worker, Run, str]:
                    name, plain = run.engine.removesuffix("-plain"), run.engine.endswith("-plain")
                    return workers[name], Run(name, run.dtype, run.batch), "natural" if plain else setting

                for run in runs:  # warm-up: kernels, graphs, caches
                    worker, engine_run, engine_setting_name = engine_setting(run)
                    worker.decode(engine_run, engine_setting_name, warm_up=True)
                for i in range(args.runs):
                    for run in runs:  # alternate engines within each round
                        worker, engine_run, engine_setting_name = engine_setting(run)
                        result = worker.decode(engine_run, engine_setting_name)
                        tokens[run], peak[run] = result["tokens"], result["peak_mib"]
                        graphs[run] = summed_graphs(graphs.get(run), result.get("graphs"))
                        times[run].append(result["seconds"])
                        print(f"  {setting} round {i} {run}: {tokens[run] / times[run][-1]:.0f} tok/s", file=sys.stderr, flush=True)
            rows += [(setting, run, tokens[run], statistics.median(times[run]), peak[run], graphs.get(run)) for run in runs]
            if setting == "prefix":
                paired = {run: [t / p for t, p in zip(times[run], times[Run(f"{run.engine}-plain", run.dtype, run.batch)])]
                          for run in runs if not run.engine.endswith("-plain")}
    finally:
        for worker in workers.values():
            worker.close()
    if rows:
        print_table(rows, args.sentences)
        if args.json:
            Path(args.json).write_text(json.dumps([
                {"setting": setting, "engine": run.engine, "dtype": run.dtype, "batch": run.batch, "tokens": n_tokens, "median_s": seconds,
                 "peak_mib": peak, "graphs": graph_state} for setting, run, n_tokens, seconds, peak, graph_state in rows], indent=1) + "\n")
    if "prefix" in args.settings.split(","):
        print_prefix_ratios(paired)
    if sampling_rows:
        print_sampling_table(sampling_rows, args.sentences)


def measure_sampling(args, worker: Worker) -> list[tuple[str, Run, int, float]]:
    """nmt's beam 4 and its sampling with each of --sampling-specs, on the same batches, alternating within each
    round, with fixed and with natural lengths: (lengths, run, output tokens, median seconds) for each."""
    rows = []
    for lengths in ("fixed", "natural"):
        runs = [Run("nmt", dtype, b, search) for dtype in worker.dtypes for b in args.batches
                for search in ("beam 4", *args.sampling_specs.split(","))]
        times: dict[Run, list[float]] = {r: [] for r in runs}
        tokens: dict[Run, int] = {}
        for run in runs:
            worker.decode(run, lengths, warm_up=True)
        for i in range(args.runs):
            for run in runs:
                result = worker.decode(run, lengths)
                tokens[run] = result["tokens"]
                times[run].append(result["seconds"])
                print(f"  sampling ({lengths}) round {i} {run}: {args.sentences / times[run][-1]:.1f} lines/s", file=sys.stderr, flush=True)
        rows += [(lengths, run, tokens[run], statistics.median(times[run])) for run in runs]
    return rows


def print_sampling_table(rows, n_sentences: int) -> None:
    """Lines/s of sampling against beam 4 with the same lengths, dtype and batch (medians)."""
    beam = {(lengths, run.dtype, run.batch): seconds for lengths, run, _, seconds in rows if run.search == "beam 4"}
    print("| lengths | search | dtype | batch | output tokens | median s | lines/s | target tok/s | lines/s vs beam 4 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for lengths, run, n_tokens, seconds in rows:
        cells = [lengths, run.search if run.search == "beam 4" else f"sampling {run.search}", run.dtype, f"{run.batch}", f"{n_tokens}",
                 f"{seconds:.2f}", f"{n_sentences / seconds:.1f}", f"{n_tokens / seconds:.0f}",
                 f"{beam[lengths, run.dtype, run.batch] / seconds:.2f}x"]
        print("| " + " | ".join(cells) + " |")


class Worker:
    """One engine in a process of its own: it loads its model once, then times the runs it is sent
    (one JSON request per line on its stdin, one JSON answer per line on its stdout)."""

    def __init__(self, engine: str, work: Path):
        self.process = subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--worker", engine, "--work", str(work)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = self._read()
        self.describe, self.dtypes = hello["describe"], hello["dtypes"]

    def decode(self, run: Run, setting: str, warm_up: bool = False) -> dict:
        self.process.stdin.write(json.dumps({"dtype": run.dtype, "batch": run.batch, "search": run.search, "setting": setting,
                                             "warm_up": warm_up}) + "\n")
        self.process.stdin.flush()
        return self._read()

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"a benchmark worker exited (code {self.process.wait()}); its error is above")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def serve_worker(args) -> None:
    """The worker's side: build the engine, then answer each run request with its tokens, seconds and peak memory."""
    device = torch.device(args.device)
    gpu = device.type == "cuda"
    if args.worker != "ct2":  # CTranslate2 has its own OpenMP runtime and sets its own threads
        torch.set_num_threads(args.threads or torch.get_num_threads())
    work = Path(args.work)
    sources = make_sources(args)
    pad = args.vocab_size - 1

    def padded(batch: list[list[int]]) -> torch.Tensor:
        ids = torch.full((len(batch), max(len(s) for s in batch)), pad)
        for i, s in enumerate(batch):
            ids[i, : len(s)] = torch.tensor(s)
        return ids.to(device)

    out = sys.stdout
    sys.stdout = sys.stderr  # libraries' prints must not mix with the answers
    engine = ENGINES[args.worker](args, device, work, work / "nmt", args.dtypes)
    print(json.dumps({"describe": engine.describe, "dtypes": engine.dtypes}), file=out, flush=True)
    prefixes: dict[tuple, list[list[list[int]]]] = {}  # (dtype, batch, warm-up): each batch's prefixes, made once, untimed
    for line in sys.stdin:
        request = json.loads(line)
        run = Run(args.worker, request["dtype"], request["batch"], request["search"])
        batches = [sources[: run.batch]] if request["warm_up"] else [sources[j : j + run.batch] for j in range(0, len(sources), run.batch)]
        forced = None
        if request["setting"] == "prefix":
            key = (run.dtype, run.batch, request["warm_up"])
            if key not in prefixes:
                prefixes[key] = [[tokens[: args.prefix_tokens] for tokens in engine.best_tokens(run, batch, padded)] for batch in batches]
            forced = prefixes[key]
        if gpu:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        before = engine.graph_state(run) if hasattr(engine, "graph_state") else None
        start = time.perf_counter()
        if forced is not None:
            tokens = engine.decode(run, batches, padded, False, args.length, prefixes=forced)
        else:
            tokens = engine.decode(run, batches, padded, request["setting"] == "fixed", args.length)
        if gpu:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated() / 2**20 if gpu and run.engine != "ct2" else None
        if gpu and run.engine == "hf":  # what generate kept cached goes back: nmt's worker shares the GPU
            torch.cuda.empty_cache()
        graphs = graph_run(before, engine.graph_state(run)) if before is not None else None
        print(json.dumps({"tokens": tokens, "seconds": seconds, "peak_mib": peak, "graphs": graphs}), file=out, flush=True)


def graph_run(before: dict, after: dict) -> dict:
    """What nmt's CUDA graphs did during one timed run: on or off at its end (and why), and the graphs captured,
    dropped (the Arena grew) and replayed in it. A benchmark must never time a fallback without saying so."""
    counts = {k: after[k] - before[k] for k in ("captured", "dropped", "replayed") if after.get(k) is not None}
    return {"enabled": after["enabled"], "off_reason": after.get("off_reason"), **counts}


def graphs_cell(state: dict | None) -> str:
    """A row's graph state for the table: captured / dropped / replayed in the timed runs, or OFF."""
    if state is None:
        return "-"
    if not state["enabled"]:
        return "OFF !"
    return "on " + "/".join(f"{state.get(k, '?'):,}" if isinstance(state.get(k), int) else "?" for k in ("captured", "dropped", "replayed"))


def summed_graphs(total: dict | None, one: dict | None) -> dict | None:
    """The graph state over a row's timed runs: counters added, off if it was off after any run."""
    if one is None:
        return total
    if total is None:
        return dict(one)
    added = {k: total[k] + one[k] for k in ("captured", "dropped", "replayed") if k in total and k in one}
    return {**total, **added, "enabled": total["enabled"] and one["enabled"], "off_reason": total.get("off_reason") or one.get("off_reason")}


def print_table(rows, n_sentences: int) -> None:
    """Tokens/s for the decoding settings (each engine and dtype's best batch marked), seconds for processes.
    The last columns compare with Hugging Face in the same dtype, the fastest Hugging Face row of the
    setting, and CTranslate2 fp32 (each at its best batch)."""
    speed = {(setting, run): (n_tokens or n_sentences) / seconds for setting, run, n_tokens, seconds, *_ in rows}
    best: dict[tuple[str, str, str], float] = {}
    for (setting, run), v in speed.items():
        best[setting, run.engine, run.dtype] = max(best.get((setting, run.engine, run.dtype), 0.0), v)
    best_hf = {setting: v for (setting, engine, _), v in sorted(best.items(), key=lambda item: item[1]) if engine == "hf"}

    def ratio(v: float, peer: float | None) -> str:
        return f"{v / peer:.2f}x" if peer else "-"

    print("| setting | engine | dtype | batch | output tokens | median s | target tok/s | sentences/s | peak GPU MiB "
          "| vs HF same dtype | vs best HF | vs CT2 fp32 | CUDA graphs captured/dropped/replayed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    off = []
    for setting, run, n_tokens, seconds, peak, graph_state in rows:
        v = speed[setting, run]
        several = sum(1 for s, r, *_ in rows if s == setting and (r.engine, r.dtype) == (run.engine, run.dtype)) > 1
        batch = (f"{run.batch}" if run.batch else "default") + (" (best)" if several and v == best[setting, run.engine, run.dtype] else "")
        cells = [setting, run.engine, run.dtype, batch, f"{n_tokens}" if n_tokens else "-", f"{seconds:.2f}",
                 f"{n_tokens / seconds:.0f}" if n_tokens else "-", f"{n_sentences / seconds:.1f}",
                 f"{peak:,.0f}" if peak is not None else "-", ratio(v, best.get((setting, "hf", run.dtype))),
                 ratio(v, best_hf.get(setting)), ratio(v, best.get((setting, "ct2", "fp32"))), graphs_cell(graph_state)]
        print("| " + " | ".join(cells) + " |")
        if graph_state is not None and not graph_state["enabled"]:
            off.append(f"{setting} {run}: {graph_state.get('off_reason') or 'graphs turned off'}")
    for line in off:  # a row timed with graphs fallen off is not the speed of graphs
        print(f"\n! CUDA graphs were OFF in {line}")


def print_prefix_ratios(paired: dict[Run, list[float]]) -> None:
    """Forced prefixes against the plain search of the same engine, dtype and batch: the time ratio of each
    round (the two ran one after the other), their median and range; steadier on a loaded machine than a
    ratio of medians."""
    print("\n| engine | dtype | batch | prefix / plain time, median of rounds | min | max | rounds |")
    print("|---|---|---|---|---|---|---|")
    for run, ratios in paired.items():
        print(f"| {run.engine} | {run.dtype} | {run.batch} | {statistics.median(ratios):.3f} | {min(ratios):.3f} | {max(ratios):.3f} | {len(ratios)} |")


# --- the engines ------------------------------------------------------------------------------------

PREFIX_ENGINES = ("nmt", "ct2")  # the engines with target prefixes


class Nmt:
    def __init__(self, args, device: torch.device, work: Path, nmt_dir: Path, dtypes: list[str]):
        from nmtcli.inference.cpu import pack_for_cpu
        from nmtcli.inference.graphs import StepGraphs
        from nmtcli.inference.precision import to_half
        from nmtcli.model.checkpoint import load_model

        self.device, self.models, self.graphs = device, {}, {}
        self.dtypes = [d for d in dtypes if d != "int8" or device.type == "cpu"]  # int8 is a CPU's (--precision int8)
        notes = []
        for dtype in self.dtypes:
            model = load_model(nmt_dir, device)[0]
            if dtype == "int8":
                notes.append("int8" if pack_for_cpu(model, "int8") else "int8 unavailable")
            elif dtype != "fp32":
                to_half(model, dtype)
            elif device.type == "cpu" and not args.no_pack:
                notes.append("packed" if pack_for_cpu(model) else "packing unavailable")
            self.models[dtype] = model
            self.graphs[dtype] = StepGraphs(warn=lambda m: print(f"  nmt: {m}", file=sys.stderr)) if device.type == "cuda" and not args.no_graphs else None
        if device.type == "cpu" and not args.no_pack:
            from nmtcli.inference.cpu import keep_freed_memory

            notes.append("malloc keeps freed memory" if keep_freed_memory() else "malloc as it is")
        self.describe = ", ".join(["same weights (imported)", *notes, *(["CUDA graphs"] if self.graphs[self.dtypes[0]] else [])])

    def graph_state(self, run: Run) -> dict | None:
        """The CUDA graphs' counters of `run`'s dtype (inference/graphs.py: StepGraphs.summary), None without graphs."""
        graphs = self.graphs.get(run.dtype)
        if graphs is None:
            return None
        return graphs.summary() if hasattr(graphs, "summary") else {
            "enabled": graphs.enabled, "captured": graphs.captured, "dropped": graphs.dropped, "replayed": getattr(graphs, "replayed", None)}

    def graphs_for(self, dtype: str):
        """The step graphs of `dtype`'s model; the other dtypes' let go (fp32 and bf16 runs alternate, and each
        StepGraphs' Arena would otherwise stay on the GPU beside the running one's)."""
        released = False
        for other, graphs in self.graphs.items():
            if other != dtype and graphs is not None and graphs.arena.nbytes:
                graphs.release()
                released = True
        if released:  # back to the driver: the peer's worker shares the GPU (it ran out beside 89 GB kept here)
            torch.cuda.empty_cache()
        return self.graphs[dtype]

    def best_tokens(self, run: Run, batch, padded) -> list[list[int]]:
        """The plain natural search's best output of each sentence of `batch` (for the prefix setting)."""
        from nmtcli.device import on_device
        from nmtcli.inference.beam import beam_search
        from nmtcli.inference.precision import autocast

        with on_device(self.device), autocast(self.device, run.dtype):
            hyps = beam_search(self.models[run.dtype], padded(batch), beam=4, alpha=1.0, length_penalty="power", graphs=self.graphs_for(run.dtype))
        return [h[0].tokens for h in hyps]

    def decode(self, run: Run, batches, padded, fixed: bool, length: int, prefixes=None) -> int:
        from nmtcli.device import is_out_of_memory, on_device
        from nmtcli.inference.beam import beam_search
        from nmtcli.inference.precision import autocast
        from nmtcli.inference.sampling import parse_sampling, sample

        # Fixed: length - 1 tokens, then the EOS step (nmt's search always ends with one).
        limits = {"max_len_a": 0.0, "max_len_b": length - 1, "min_len": length - 1} if fixed else {"max_len_a": 1.0, "max_len_b": 50}
        tokens = 0
        graphs = self.graphs_for(run.dtype)

        def search(batch, forced):
            """The batch's hypotheses; out of memory (fp32 at 3,003 sentences wants ~51 GB of keys/values on
            a GPU), its halves', as `nmt translate` does (inference/batches.py)."""
            try:
                if run.search != "beam 4":  # one sample per line; its lines keyed by their place in the batch
                    return sample(self.models[run.dtype], padded(batch), parse_sampling(run.search), **limits)
                return beam_search(self.models[run.dtype], padded(batch), beam=4, alpha=1.0, length_penalty="power", graphs=graphs,
                                   prefixes=forced, **limits)
            except (RuntimeError, MemoryError) as e:
                if not is_out_of_memory(e) or len(batch) == 1:
                    raise
            if graphs is not None:
                graphs.release()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            print(f"  nmt {run.dtype}: out of memory at {len(batch)} sentences, searching halves", file=sys.stderr, flush=True)
            half = len(batch) // 2
            return (search(batch[:half], forced and forced[:half])
                    + search(batch[half:], forced and forced[half:]))

        with on_device(self.device), autocast(self.device, run.dtype):
            for i, batch in enumerate(batches):
                hyps = search(batch, prefixes[i] if prefixes is not None else None)
                tokens += sum(len(h[0].tokens) + fixed for h in hyps)  # fixed: the EOS step counts
        return tokens


class HuggingFace:
    def __init__(self, args, device: torch.device, work: Path, nmt_dir: Path, dtypes: list[str]):
        from transformers import MarianMTModel

        self.pad = args.vocab_size - 1
        self.dtypes = [d for d in dtypes if d != "int8" or device.type == "cpu"]
        self.models = {}
        for d in self.dtypes:
            model = MarianMTModel.from_pretrained(work / "marian", torch_dtype=DTYPES.get(d, torch.float32)).eval().to(device)
            if d == "int8":  # what the PyTorch docs tell a CPU user to do for int8
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
            self.models[d] = model
        self.describe = "MarianMTModel.generate" + (" (int8: torch quantize_dynamic)" if "int8" in self.dtypes else "")

    def decode(self, run: Run, batches, padded, fixed: bool, length: int, prefixes=None) -> int:
        tokens = 0
        with torch.inference_mode():
            for batch in batches:
                ids = padded(batch)
                limits = {"min_new_tokens": length, "max_new_tokens": length} if fixed else {"max_new_tokens": ids.size(1) + 50}
                out = self.models[run.dtype].generate(input_ids=ids, attention_mask=ids != self.pad, num_beams=4, length_penalty=1.0, **limits)
                # fixed: every generated position (the last one its forced EOS); natural: the tokens before EOS
                tokens += out[:, 1:].numel() if fixed else int(((out != self.pad) & (out != 0)).sum())
        return tokens


class CTranslate2:
    def __init__(self, args, device: torch.device, work: Path, nmt_dir: Path, dtypes: list[str]):
        import ctranslate2

        self.vocab = {i: t for t, i in json.loads((work / "marian" / "vocab.json").read_text()).items()}
        self.translators, skipped = {}, []
        for dtype in dtypes:
            try:
                self.translators[dtype] = ctranslate2.Translator(str(work / "ct2"), device=device.type, compute_type=CT2_TYPES[dtype],
                                                                 intra_threads=args.threads, inter_threads=1)
            except (RuntimeError, ValueError) as e:  # a CPU-only wheel on a GPU machine, a type the device lacks
                skipped.append(f"{dtype} unavailable ({e})")
        self.dtypes = list(self.translators)
        self.describe = "; ".join([f"ctranslate2 {ctranslate2.__version__}", *skipped])

    def best_tokens(self, run: Run, batch, padded) -> list[list[int]]:
        """The plain natural search's best output of each sentence of `batch` (for the prefix setting)."""
        ids = {t: i for i, t in self.vocab.items()}
        results = self.translators[run.dtype].translate_batch([[self.vocab[t] for t in s] for s in batch], beam_size=4, length_penalty=1.0,
                                                              max_batch_size=run.batch, max_decoding_length=max(len(s) for s in batch) + 50)
        return [[ids[t] for t in r.hypotheses[0]] for r in results]

    def decode(self, run: Run, batches, padded, fixed: bool, length: int, prefixes=None) -> int:
        tokens = 0
        for i, batch in enumerate(batches):
            source = [[self.vocab[t] for t in s] for s in batch]
            limits = {"min_decoding_length": length, "max_decoding_length": length} if fixed else {"max_decoding_length": max(len(s) for s in batch) + 50}
            if prefixes is not None:
                limits["target_prefix"] = [[self.vocab[t] for t in p] for p in prefixes[i]]
            results = self.translators[run.dtype].translate_batch(source, beam_size=4, length_penalty=1.0, max_batch_size=run.batch, **limits)
            tokens += sum(len(r.hypotheses[0]) for r in results)
        return tokens


ENGINES = {"nmt": Nmt, "hf": HuggingFace, "ct2": CTranslate2}


# --- forced decoding: --alignment and --forced-decoding ---------------------------------------------------


def measure_forced(args, device: torch.device, nmt_dir: Path) -> None:
    """Beam 4 (fixed: --length steps), beam 4 with the alignment pass, and score-only over targets of
    --length tokens, on nmt's model in this process, alternating; prints its own table of medians."""
    from nmtcli.inference.alignment import DEFAULT_HEADS, piece_links
    from nmtcli.inference.beam import beam_search
    from nmtcli.inference.cpu import pack_for_cpu
    from nmtcli.inference.forced import force_ids
    from nmtcli.model.checkpoint import load_model

    torch.set_num_threads(args.threads)
    model = load_model(nmt_dir, device)[0]
    if device.type == "cpu" and not args.no_pack:
        pack_for_cpu(model)
    pad = args.vocab_size - 1
    sources = [s[:-1] for s in make_sources(args)]  # without EOS, as the translator holds them
    g = torch.Generator().manual_seed(3)
    targets = [torch.randint(2, pad, (args.length - 1,), generator=g).tolist() for _ in sources]  # + EOS: --length tokens
    batch = max(args.batches)
    batches = [range(j, min(j + batch, len(sources))) for j in range(0, len(sources), batch)]

    def beam() -> tuple[float, float]:
        """Seconds of beam 4 over every batch, and of the alignment pass --alignment adds to it."""
        searching = aligning = 0.0
        for b in batches:
            src = torch.full((len(b), max(len(sources[i]) for i in b) + 1), pad)
            for row, i in enumerate(b):
                src[row, : len(sources[i]) + 1] = torch.tensor(sources[i] + [0])
            start = time.perf_counter()
            hyps = beam_search(model, src.to(device), beam=4, alpha=1.0, length_penalty="power", max_len_a=0.0, max_len_b=args.length - 1,
                               min_len=args.length - 1)
            middle = time.perf_counter()
            forced = force_ids(model, [sources[i] for i in b], [h[0].tokens for h in hyps], 10**9, device, heads=DEFAULT_HEADS,
                               log_probs=False)  # what Translator._align runs
            [piece_links(f.attention) for f in forced]
            searching += middle - start
            aligning += time.perf_counter() - middle
        return searching, aligning

    def score() -> float:
        start = time.perf_counter()
        force_ids(model, sources, targets, batch * (args.source_length + 9), device)
        return time.perf_counter() - start

    beam(), score()  # warm-up
    rounds = []
    for i in range(args.runs):  # alternating, and compared within each round: the load of a shared machine varies
        searching, aligning = beam()
        scoring = score()
        rounds.append((searching, aligning, scoring))
        print(f"  forced round {i}: beam 4 {searching:.1f} s, its alignment pass {aligning:.1f} s, score-only {scoring:.1f} s",
              file=sys.stderr, flush=True)
    n = len(sources)
    print(f"| forced setting ({n} lines, {args.length} target tokens, batch {batch}, {args.runs} rounds) | median s | lines/s "
          "| time / beam 4's in the same round (median) |")
    print("|---|---|---|---|")
    for k, name in enumerate(["beam 4", "alignment pass added by --alignment", "--forced-decoding"]):
        m = statistics.median(r[k] for r in rounds)
        print(f"| {name} | {m:.2f} | {n / m:.1f} | {statistics.median(r[k] / r[0] for r in rounds):.2f} |")


# --- whole processes ----------------------------------------------------------------------------

HF_SCRIPT = r"""
import sys, torch
from transformers import MarianMTModel, MarianTokenizer
directory, device, threads, batch, dtype = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
if threads:
    torch.set_num_threads(threads)
tokenizer = MarianTokenizer.from_pretrained(directory)
model = MarianMTModel.from_pretrained(directory).eval().to(device)
if dtype == "int8":
    model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
lines = sys.stdin.read().splitlines()
with torch.inference_mode():
    for i in range(0, len(lines), batch):
        inputs = tokenizer(lines[i : i + batch], return_tensors="pt", padding=True).to(device)
        out = model.generate(**inputs, num_beams=4, max_new_tokens=inputs["input_ids"].size(1) + 50)
        print("\n".join(tokenizer.batch_decode(out, skip_special_tokens=True)))
"""

# What a CTranslate2 user writes for the converted Marian model: its sentencepiece model, translate_batch.
CT2_SCRIPT = r"""
import sys, ctranslate2, sentencepiece
directory, marian, device, threads, batch, compute_type = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
source, target = (sentencepiece.SentencePieceProcessor(model_file=f"{marian}/{side}.spm") for side in ("source", "target"))
translator = ctranslate2.Translator(directory, device=device, compute_type=compute_type, intra_threads=threads)
lines = sys.stdin.read().splitlines()
for i in range(0, len(lines), batch):
    pieces = [p + ["</s>"] for p in source.encode(lines[i : i + batch], out_type=str)]
    results = translator.translate_batch(pieces, beam_size=4, max_batch_size=batch, max_decoding_length=max(map(len, pieces)) + 50)
    print("\n".join(target.decode_pieces(r.hypotheses[0]) for r in results))
"""


def measure_processes(args, device: torch.device, work: Path, nmt_dir: Path, n_sentences: int, batch: int):
    """Text in, text out, each engine as its own process; the time includes Python, torch and the model loading.
    nmt runs with its defaults (and --precision); the Hugging Face and CTranslate2 scripts with the largest --batches up to 256.
    Each of --dtypes that a CPU runs in both (fp32, int8) or a GPU runs in both (fp32, bf16, fp16).
    --threads 0 leaves each engine its own thread count (and nmt its own wait policy); with --background-load N
    every command also runs beside N CPU-bound processes, and a second table compares its time with its fair share."""
    peer_batch = min(batch, 256)
    g = torch.Generator().manual_seed(2)
    lines = [" ".join(f"word{int(w)}" for w in torch.randint(0, 2000, (int(n) // 3,), generator=g))
             for n in torch.randint(args.source_length - 8, args.source_length + 9, (n_sentences,), generator=g)]
    text = "\n".join(lines) + "\n"
    dtypes = [d for d in args.dtypes if d in (("fp32", "int8") if device.type == "cpu" else ("fp32", "bf16", "fp16"))]
    engines = args.engines.split(",")
    threads = [] if args.threads == 0 else ["--threads", str(args.threads)]
    commands: dict[Run, list[str]] = {}
    for dtype in dtypes:
        nmt = [sys.executable, "-m", "nmtcli", "translate", "-m", str(nmt_dir), "--device", device.type, "--precision", dtype]
        if "nmt" in engines:
            commands[Run("nmt", dtype, 0)] = nmt + threads
            if args.background_load and args.threads != 1:  # the reference a busy machine's default must reach
                commands[Run("nmt --threads 1", dtype, 0)] = nmt + ["--threads", "1"]
        if "hf" in engines:
            commands[Run("hf", dtype, peer_batch)] = [sys.executable, "-c", HF_SCRIPT, str(work / "marian"), device.type,
                                                      str(args.threads), str(peer_batch), dtype]
        if "ct2" in engines:
            commands[Run("ct2", dtype, peer_batch)] = [sys.executable, "-c", CT2_SCRIPT, str(work / "ct2"), str(work / "marian"),
                                                       device.type, str(args.threads), str(peer_batch), CT2_TYPES[dtype]]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)} if args.threads else os.environ
    loads = [0, args.background_load] if args.background_load else [0]
    times: dict[tuple[Run, int], list[float]] = {(run, load): [] for run in commands for load in loads}
    for i in range(args.runs):
        for run, command in commands.items():
            for load in loads:  # quiet and loaded alternate, so that a drift of the machine touches both
                with BackgroundLoad(load):
                    start = time.perf_counter()
                    out = subprocess.run(command, input=text, capture_output=True, text=True, env=env)
                    times[run, load].append(time.perf_counter() - start)
                if out.returncode:
                    raise SystemExit(f"{run} failed: {out.stderr[-2000:]}")
                assert len(out.stdout.splitlines()) == n_sentences, f"{run}: {len(out.stdout.splitlines())} lines out for {n_sentences} in"
                print(f"  process round {i} {run}, background load {load}: {times[run, load][-1]:.1f} s", file=sys.stderr, flush=True)
    if args.background_load:
        print_load_table(times, args.background_load, args.threads)
    # Processes write text, not tokens: the table shows their seconds and sentences/s.
    return [("process", run, None, statistics.median(times[run, 0]), None, None) for run in commands]


def print_load_table(times: dict, load: int, threads: int) -> None:
    """Each process command's median time quiet and beside `load` CPU-bound processes, against its fair share
    (`threads`: --threads; 0, each engine's own, counted as every CPU)."""
    print(f"\nWhole processes beside {load} CPU-bound process(es), {cpus()} CPUs (background_load.py defines the fair share):\n")
    print("| engine | dtype | quiet s | loaded s | slowdown | fair share s | loaded / fair |")
    print("|---|---|---|---|---|---|---|")
    for run in dict.fromkeys(run for run, _ in times):
        quiet, loaded = statistics.median(times[run, 0]), statistics.median(times[run, load])
        fair = fair_seconds(quiet, load, 1 if run.engine.endswith("--threads 1") else threads or cpus())
        print(f"| {run.engine} | {run.dtype} | {quiet:.1f} | {loaded:.1f} | {loaded / quiet:.1f}x | {fair:.1f} | {loaded / fair:.2f} |")
    print()
    for run in dict.fromkeys(run for run, _ in times):
        one = next((r for r, _ in times if r.engine == "nmt --threads 1" and r.dtype == run.dtype), None)
        if run.engine == "nmt" and one is not None:
            print(threads_verdict(statistics.median(times[run, load]), statistics.median(times[one, load]), run.dtype, load, threads))


# Issue 26's bar: on a busy machine nmt's default threads must not lose more than this to `--threads 1`.
BUSY_DEFAULT_BAR = 1.15


def threads_verdict(default: float, one_thread: float, dtype: str, load: int, threads: int = 0) -> str:
    """The line that guards issue 26 (and 51's item 7): nmt's default threads (`threads` 0; else the --threads given,
    which is then what the line compares) against `--threads 1` beside `load` CPU-bound processes, and whether it
    stays within BUSY_DEFAULT_BAR."""
    ratio = default / one_thread
    verdict = "within" if ratio <= BUSY_DEFAULT_BAR else "OVER"
    mine = "default threads" if threads == 0 else f"--threads {threads} (not the default: --threads 0 checks that)"
    return (f"nmt {dtype} beside {load} CPU-bound process(es): {mine} {default:.1f} s, --threads 1 {one_thread:.1f} s:"
            f" {ratio:.2f}x, {verdict} the {BUSY_DEFAULT_BAR}x bar (issue 26: the default must not lose to one thread on a busy machine)")


if __name__ == "__main__":
    main()
