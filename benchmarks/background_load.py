"""A busy machine on demand: N CPU-bound processes running beside a benchmark's measured engine.

Used by translate_speed.py, train_throughput.py and serve_throughput.py (`--background-load N`) to
measure what users on desktops, shared servers and CI machines see. Each process spins a Python
loop on one CPU; they start before the timed work, stop after it, and never outlive the benchmark.

The engine's fair share: with N such processes the CPU is shared N + 1 ways, so an engine that kept
min(threads, CPUs) CPUs busy on a quiet machine has CPUs / (N + 1) of them now and should take

    quiet seconds x max(1, min(threads, CPUs) x (N + 1) / CPUs)

(2 CPUs, 2 threads, N = 2: three times its quiet time). Slower than that, it wastes the CPU it gets.
"""

from __future__ import annotations

import os
import subprocess
import sys

BUSY = "while True:\n    pass\n"


class BackgroundLoad:
    """`with BackgroundLoad(n):` n CPU-bound processes run inside the block (none for n = 0)."""

    def __init__(self, processes: int):
        self.processes = processes
        self._running: list[subprocess.Popen] = []

    def __enter__(self) -> BackgroundLoad:
        self._running = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(self.processes)]
        return self

    def __exit__(self, *exc) -> None:
        for p in self._running:
            p.kill()
        for p in self._running:
            p.wait()
        self._running = []


def cpus() -> int:
    """The CPUs this process may use (its affinity mask), as the engines see them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def fair_seconds(quiet_seconds: float, load: int, threads: int) -> float:
    """The time an engine of `threads` threads that took `quiet_seconds` alone should take beside `load`
    CPU-bound processes, if it wasted none of the CPU it gets."""
    n = cpus()
    return quiet_seconds * max(1.0, min(threads, n) * (load + 1) / n)


def load_average() -> str:
    return f"load average {os.getloadavg()[0]:.1f} on {cpus()} CPUs"
