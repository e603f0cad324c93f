"""Throughput and latency of `nmt serve` under concurrent clients, with dynamic batching on and off.

One small random model (the `tiny` preset: d_model 128, 2+2 layers; a sentencepiece vocabulary of 200 pieces) is
served twice by the real `nmt serve`: with dynamic batching, and with --no-batching (each request
translated alone, as a server without batching would). For 1, 8 and 64 concurrent clients, each
client sends LibreTranslate requests of one sentence over a kept-alive connection, one after another,
for --seconds; the table gives lines/s over the whole run and the p50/p99 latency of a request.
Both servers get the same sentences, beam 4 and the same CPU threads. A random model's outputs run to
the length limit, so the servers cap them at source length + 10 tokens (--max-len-b 10), about what a
trained model writes.

--background-load N measures every cell also beside N CPU-bound processes (background_load.py), and
--threads 0 leaves the server its own thread count, as a user who sets nothing gets it.

Usage: python benchmarks/serve_throughput.py [--seconds 8] [--clients 1,8,64] [--threads 1]
       python benchmarks/serve_throughput.py --threads 0 --background-load 2 --batching-only
Needs the `serve` extra: pip install -e ".[serve]".
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from background_load import BackgroundLoad, cpus, load_average

WORDS = ("the small dog sees a red ball in the old garden near the river while a young woman reads "
         "a new book about the quiet city and its fast trains that carry happy children to the green mountain").split()


def build_model(directory: Path, seed: int = 0) -> None:
    """A random nmt model dir (en-de) with a sentencepiece vocabulary trained on WORDS."""
    import sentencepiece as spm
    import torch

    from nmtcli.model.checkpoint import write_model_dir
    from nmtcli.model.config import PRESETS
    from nmtcli.model.transformer import Transformer

    rng = random.Random(seed)
    work = directory.with_name(directory.name + ".work")
    work.mkdir(parents=True, exist_ok=True)
    (work / "text.txt").write_text("".join(" ".join(rng.choices(WORDS, k=rng.randint(5, 25))) + "\n" for _ in range(3000)))
    spm.SentencePieceTrainer.train(input=str(work / "text.txt"), model_prefix=str(work / "spm"), vocab_size=200,
                                   model_type="bpe", pad_id=0, unk_id=1, bos_id=2, eos_id=3, minloglevel=2)
    torch.manual_seed(seed)
    config = PRESETS["tiny"].replace(vocab_size=200, max_positions=256)
    values = {"format": "nmt-model", "format_version": 1, "model": config.to_dict(), "languages": {"source": "en", "target": "de"}}
    write_model_dir(directory, Transformer(config).state_dict(), values, {"sentencepiece.model": work / "spm.model"}, "# random en-de\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: Path, batching: bool, threads: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    nmt = str(Path(sys.executable).with_name("nmt"))
    thread_flag = ["--threads", str(threads)] if threads else []  # 0: the server's own default
    process = subprocess.Popen([nmt, "serve", "-m", str(model), "--port", str(port), *thread_flag, "--device", "cpu",
                                "--batching" if batching else "--no-batching", "--queue-lines", "100000", "--max-len-b", "10"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/health")
            if connection.getresponse().status == 200:
                return process, port
        except OSError:
            time.sleep(0.2)
        if process.poll() is not None:
            raise RuntimeError(f"nmt serve exited: {process.stderr.read()}")
    raise RuntimeError("nmt serve did not answer within 120 s")


def load(port: int, clients: int, seconds: float, sentences: list[str]) -> tuple[int, float, list[float]]:
    """(lines, elapsed seconds, request latencies) of `clients` clients sending one sentence a request."""
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds
    errors: list[str] = []

    def client(number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        i = number
        while time.monotonic() < stop_at:
            body = json.dumps({"q": sentences[i % len(sentences)], "source": "en", "target": "de"})
            started = time.perf_counter()
            connection.request("POST", "/translate", body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            response.read()
            if response.status != 200:
                errors.append(f"HTTP {response.status}")
                return
            with lock:
                latencies.append(time.perf_counter() - started)
            i += clients

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"requests failed: {errors[:3]}")
    return len(latencies), time.perf_counter() - started, latencies


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="load per cell, after a warm-up")
    parser.add_argument("--clients", default="1,8,64")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads of the server (1 leaves the other core of a 2-core CPU to the clients; 0: nmt serve's default)")
    parser.add_argument("--background-load", type=int, default=0, metavar="N",
                        help="also measure every cell beside N CPU-bound processes (background_load.py): a busy machine")
    parser.add_argument("--batching-only", action="store_true", help="skip the server without batching")
    args = parser.parse_args()

    rng = random.Random(1)
    sentences = [" ".join(rng.choices(WORDS, k=rng.randint(5, 15))) for _ in range(500)]
    model = Path(tempfile.mkdtemp(prefix="nmt-bench-serve-")) / "model"
    build_model(model)
    counts = [int(c) for c in args.clients.split(",")]
    loads = [0, args.background_load] if args.background_load else [0]
    modes = ["batching"] if args.batching_only else ["batching", "no batching"]
    rows: dict[tuple[str, int, int], tuple[float, float, float]] = {}
    for mode in modes:
        process, port = start_server(model, mode == "batching", args.threads)
        try:
            load(port, 4, 1.0, sentences)  # warm up
            for clients in counts:
                for background in loads:
                    with BackgroundLoad(background):
                        lines, elapsed, latencies = load(port, clients, args.seconds, sentences)
                    rows[mode, clients, background] = (lines / elapsed, percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000)
                    print(f"  {mode}, {clients} clients, background load {background}: {lines / elapsed:.1f} lines/s", file=sys.stderr, flush=True)
        finally:
            process.terminate()
            process.wait(timeout=60)
    threads = f"{args.threads} server threads" if args.threads else "the server's default threads"
    print(f"# random tiny model; beam 4, outputs capped at source + 10 tokens; one sentence of 5-15 words a request; {threads}, "
          f"{cpus()} CPUs; {args.seconds:g} s per cell; {load_average()} after the run")
    header = "| clients | background load | " + " | ".join(f"{mode} lines/s | p50 ms | p99 ms" for mode in modes)
    print(header + (" | speed-up |" if len(modes) == 2 else " |"))
    print("|---" * (2 + 3 * len(modes) + (len(modes) == 2)) + "|")
    for clients in counts:
        for background in loads:
            cells = [rows[mode, clients, background] for mode in modes]
            line = f"| {clients} | {background} | " + " | ".join(f"{c[0]:.1f} | {c[1]:.0f} | {c[2]:.0f}" for c in cells)
            print(line + (f" | {cells[0][0] / cells[1][0]:.2f}x |" if len(modes) == 2 else " |"))


if __name__ == "__main__":
    main()
