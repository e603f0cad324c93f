"""CPU threads that hold up on a shared machine: how many, and how they wait.

PyTorch's CPU kernels (and CTranslate2's) run on an OpenMP thread pool. Two of its defaults go wrong
on the machines many people run nmt on (a desktop, a shared server, a CI runner, a container with a
CPU quota, `nmt serve` beside its own web threads):

- The pool has one thread per core of the host, even when the process may use fewer: an affinity
  mask (taskset, a scheduler's cpuset) or a cgroup quota (`docker --cpus`, Kubernetes limits).
- A thread that finishes its share of a kernel spins, waiting for the others, before it sleeps
  (GNU OpenMP: 300,000 spins, some milliseconds). On a quiet machine that saves a wake-up at every
  parallel region; on a busy one the thread it waits for is not running, and the spinning eats the
  time slice that thread needed: faster on a quiet machine, several times slower on a loaded one
  (docs/speed.md has the measurements).

`configure()` sets, before torch loads its thread pool: as many threads as CPUs this process may
really use, and the wait policy from what the machine is doing when nmt starts: if other tasks are
runnable (they would share the CPUs with nmt's threads) threads sleep at once (PASSIVE), else OpenMP's
default spinning. `nmt serve` always sleeps at once, and leaves one CPU to its web server's own thread:
it runs for days while the load changes, and one translation thread served more lines/s than two
(docs/serving.md has the measurement). A user's own OMP_NUM_THREADS, OMP_WAIT_POLICY or GOMP_SPINCOUNT
wins, and so does `--threads`.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path

# The wait policy nmt sets on a busy machine when the user has set none (chosen by measurement: docs/speed.md).
WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}
# Commands that run long enough for the load to change under them, beside threads of their own (the web
# server's event loop): they always sleep at once and leave one CPU to those threads.
LONG_RUNNING = ("serve",)
# Variables by which a user chooses the wait policy: one of them set, nmt sets none.
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs the cgroup quota allows (quota / period), or None without a quota.

    cgroup v2 keeps "QUOTA PERIOD" (or "max PERIOD") in cpu.max; v1 keeps cpu.cfs_quota_us (-1: none)
    and cpu.cfs_period_us under cpu/ (or cpu,cpuacct/)."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    for v1 in (root / "cpu", root / "cpu,cpuacct"):
        try:
            quota = int((v1 / "cpu.cfs_quota_us").read_text())
            period = int((v1 / "cpu.cfs_period_us").read_text())
        except (OSError, ValueError):
            continue
        return quota / period if quota > 0 and period > 0 else None
    return None


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """The CPUs this process may really use: those of its affinity mask, at most its cgroup quota (rounded up)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(cgroup_root)
    if limit is not None:
        cpus = min(cpus, max(1, math.ceil(limit)))
    return max(1, cpus)


def default_threads() -> int:
    """The CPU threads of an engine that is not told: $OMP_NUM_THREADS (which `configure` sets), else the usable CPUs."""
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]))
    except ValueError:
        return usable_cpus()


def other_runnable_tasks(samples: int = 5, interval: float = 0.004, stat: Path = Path("/proc/stat")) -> int | None:
    """Tasks that want a CPU right now besides this process: the median over a few samples (some 20 ms) of
    the kernel's count of runnable tasks (procs_running, this process included); None where unknown."""
    counts = []
    for i in range(samples):
        try:
            text = stat.read_text()
        except OSError:
            return None
        running = [line.split()[1] for line in text.splitlines() if line.startswith("procs_running ")]
        if not running:
            return None
        counts.append(int(running[0]) - 1)
        if i + 1 < samples:
            time.sleep(interval)
    return max(0, int(statistics.median(counts)))


def choose(environ: Mapping[str, str], cgroup_root: Path = Path("/sys/fs/cgroup"), busy: bool | None = None,
           spare: int = 0) -> dict[str, str]:
    """The variables nmt sets in `environ`: OMP_NUM_THREADS (the usable CPUs, less `spare` ones for the
    process's other threads, at least one) unless the user set it, and, unless the user chose a wait
    policy, WAIT_POLICY when the machine is `busy` (None: look now)."""
    chosen: dict[str, str] = {}
    threads = max(1, usable_cpus(cgroup_root) - spare)
    if "OMP_NUM_THREADS" not in environ:
        chosen["OMP_NUM_THREADS"] = str(threads)
    if not any(name in environ for name in WAIT_VARIABLES):
        if busy is None:
            others = other_runnable_tasks()
            busy = others is None or others > 0  # unknown: sleeping costs little, spinning on a busy machine a lot
        if busy:
            chosen.update(WAIT_POLICY)
    return chosen


def configure(command: str | None = None) -> dict[str, str]:
    """Set `choose`'s variables for the OpenMP runtimes this process (and the processes it starts) will
    load; returns them. `command`: the nmt subcommand (LONG_RUNNING ones always sleep at once). Does
    nothing once torch is imported: its pool has read the environment by then."""
    if "torch" in sys.modules:
        return {}
    long_running = command in LONG_RUNNING
    chosen = choose(os.environ, busy=True if long_running else None, spare=1 if long_running else 0)
    os.environ.update(chosen)
    return chosen


def exit_with_parent() -> None:
    """In a worker process (a pool's initializer): end it once the process that started it is gone. A pool's worker
    holds both ends of the pool's pipes, so when `nmt prepare` is killed (-9, the OOM killer) no end of file reaches it:
    the misaligned filter's workers, blocked writing a result no one reads, waited for ever holding the judge. The
    parent's sentinel (a pipe the parent holds open) is readable from the moment the parent is gone, even if that was
    before this runs."""
    import multiprocessing.connection  # here, not at the top: every `nmt` command imports this module as it starts
    import threading

    parent = multiprocessing.parent_process()
    if parent is None:  # not a worker
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()
