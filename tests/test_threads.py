"""CPU threads on a shared machine (nmtcli/threads.py): as many as the CPUs the process may really use,
waiting without spinning, and the user's own settings left alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import NMT

from nmtcli.threads import WAIT_POLICY, cgroup_cpu_limit, choose, default_threads, other_runnable_tasks, usable_cpus

affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs Linux's sched_setaffinity")


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_cgroup_v2_quota(tmp_path):
    write(tmp_path / "cpu.max", "150000 100000\n")
    assert cgroup_cpu_limit(tmp_path) == 1.5
    write(tmp_path / "cpu.max", "max 100000\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_cgroup_v1_quota(tmp_path):
    write(tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us", "50000\n")
    write(tmp_path / "cpu,cpuacct" / "cpu.cfs_period_us", "100000\n")
    assert cgroup_cpu_limit(tmp_path) == 0.5
    write(tmp_path / "cpu,cpuacct" / "cpu.cfs_quota_us", "-1\n")
    assert cgroup_cpu_limit(tmp_path) is None


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cgroup_cpu_limit(tmp_path) is None


def test_usable_cpus_take_the_quota_rounded_up(tmp_path):
    write(tmp_path / "cpu.max", "50000 100000\n")  # half a CPU: one thread
    assert usable_cpus(tmp_path) == 1
    write(tmp_path / "cpu.max", f"{100000 * 64} 100000\n")  # a quota above the affinity mask: the mask
    assert usable_cpus(tmp_path) == len(os.sched_getaffinity(0))


def test_choose_sets_threads_and_sleeps_at_once_on_a_busy_machine(tmp_path):
    write(tmp_path / "cpu.max", "100000 100000\n")
    assert choose({}, tmp_path, busy=True) == {"OMP_NUM_THREADS": "1", **WAIT_POLICY}
    assert WAIT_POLICY == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert choose({}, tmp_path, busy=False) == {"OMP_NUM_THREADS": "1"}  # quiet: OpenMP's spinning is faster
    write(tmp_path / "cpu.max", "300000 100000\n")
    assert choose({}, tmp_path, busy=True, spare=1)["OMP_NUM_THREADS"] == str(min(3, len(os.sched_getaffinity(0))) - 1 or 1)
    assert choose({}, tmp_path, busy=True, spare=8)["OMP_NUM_THREADS"] == "1"  # never none


def test_other_runnable_tasks_read_the_kernels_count(tmp_path):
    write(tmp_path / "stat", "cpu  1 2 3\nprocs_running 3\nprocs_blocked 0\n")
    assert other_runnable_tasks(samples=3, interval=0, stat=tmp_path / "stat") == 2  # this process is one of them
    write(tmp_path / "stat", "cpu  1 2 3\n")
    assert other_runnable_tasks(stat=tmp_path / "stat") is None
    assert other_runnable_tasks(stat=tmp_path / "missing") is None


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="needs Linux's /proc/stat")
def test_cpu_bound_processes_beside_make_the_machine_busy():
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        import time

        time.sleep(0.3)  # started and spinning
        assert other_runnable_tasks() >= 2
    finally:
        for p in busy:
            p.kill()
            p.wait()


@pytest.mark.parametrize("name", ["OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME"])
def test_choose_leaves_the_users_settings_alone(tmp_path, name):
    assert choose({"OMP_NUM_THREADS": "3", name: "1"}, tmp_path, busy=True) == {}


def test_default_threads_reads_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3,1")  # OpenMP's nested form: the outer level counts
    assert default_threads() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "many")
    assert default_threads() == usable_cpus()


def _translate_on_one_cpu(model, *args: str, env: dict | None = None) -> str:
    """The real `nmt translate` (torch loads in the process) pinned to one CPU; returns its summary line."""
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    result = subprocess.run([NMT, "translate", "-m", str(model), "--max-len-b", "2", *args], input="a house\n",
                            capture_output=True, text=True, env={**environ, "COLUMNS": "200", **(env or {})},
                            preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1
    return result.stderr.strip().splitlines()[-1]


@affinity
def test_translate_takes_the_cpus_it_may_use(random_model):
    """Pinned to one CPU of a bigger machine, nmt runs one thread, not one per core of the host."""
    assert _translate_on_one_cpu(random_model).endswith("on 1 CPU thread")


@affinity
@pytest.mark.skipif(len(getattr(os, "sched_getaffinity", lambda _: ())(0)) < 2, reason="needs 2 CPUs to tell the cases apart")
def test_the_user_chooses_threads_over_the_default(random_model):
    assert _translate_on_one_cpu(random_model, env={"OMP_NUM_THREADS": "2"}).endswith("on 2 CPU threads")
    assert _translate_on_one_cpu(random_model, "--threads", "2").endswith("on 2 CPU threads")


def test_configure_sets_the_environment_before_torch_loads():
    """In a fresh interpreter: configure() sets the variables torch's OpenMP reads at load (`nmt serve`, which
    runs long, always sleeps at once); after torch is imported it changes nothing (the pool has read them)."""
    code = ("import os\nfrom nmtcli import threads\nfirst = threads.configure('serve')\nimport torch\n"
            "print(first.get('OMP_WAIT_POLICY'), os.environ.get('OMP_WAIT_POLICY'), torch.get_num_threads() == int(first['OMP_NUM_THREADS']), threads.configure())")
    environ = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, check=True).stdout.split()
    assert out == ["PASSIVE", "PASSIVE", "True", "{}"]
