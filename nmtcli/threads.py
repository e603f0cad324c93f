"""CPU threads that hold up on a shared machine: how many, and how they wait.

PyTorch's CPU kernels (and CTranslate2's) run on an OpenMP thread pool. Two of its defaults go wrong
on the machines most people run nmt on (a desktop, a shared server, a CI runner, a container with a
CPU quota, `nmt serve` beside its own web threads):

- The pool has one thread per core of the host, even when the process may use fewer: an affinity
  mask (taskset, a scheduler's cpuset) or a cgroup quota (`docker --cpus`, Kubernetes limits).
- A thread that finishes its share of a kernel spins, waiting for the others, before it sleeps
  (GNU OpenMP: 300,000 spins, some milliseconds). On a quiet machine that saves a wake-up; on a busy
  one the thread it waits for is not running, and the spinning eats the time slice that thread needed.
  Measured on 2 cores with two other CPU-bound jobs: `nmt translate` took 3-5x longer than its fair
  share (the README's Speed section has the table).

`configure()` sets both before torch loads its thread pool: as many threads as CPUs this process may
really use, and the wait policy WAIT_POLICY. A user's own OMP_NUM_THREADS, OMP_WAIT_POLICY or
GOMP_SPINCOUNT wins, and so does `--threads`.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path

# The wait policy nmt sets when the user has set none (chosen by measurement: README.md, Speed).
WAIT_POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}
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


def choose(environ: Mapping[str, str], cgroup_root: Path = Path("/sys/fs/cgroup")) -> dict[str, str]:
    """The variables nmt sets in `environ`: OMP_NUM_THREADS (the usable CPUs) unless the user set it, and
    the wait policy unless the user chose one."""
    chosen: dict[str, str] = {}
    if "OMP_NUM_THREADS" not in environ:
        chosen["OMP_NUM_THREADS"] = str(usable_cpus(cgroup_root))
    if not any(name in environ for name in WAIT_VARIABLES):
        chosen.update(WAIT_POLICY)
    return chosen


def configure() -> dict[str, str]:
    """Set `choose`'s variables for the OpenMP runtimes this process (and the processes it starts) will
    load; returns them. Does nothing once torch is imported: its pool has read the environment by then."""
    if "torch" in sys.modules:
        return {}
    chosen = choose(os.environ)
    os.environ.update(chosen)
    return chosen
