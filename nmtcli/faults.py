"""Fault points: the one seam through which the tests make nmt fail where a failure cannot be produced
on demand (a GPU running out of memory, a process killed at one exact point).

Production code marks a place with `faults.point(NAME, **where)` and knows nothing more. A test sets
NMT_TEST_FAULT (read here only, so it also reaches the `nmt` processes the tests start) to one of:

  kill-in-checkpoint:STEP    SIGKILL while the checkpoint of STEP is half written (training)
  fail:RANK:STEP             rank RANK raises an NmtError at STEP (training)
  oom:STEP                   the error a GPU raises for a batch that does not fit, at STEP (training)
  oom-above:LINES            the same for every translation batch of more than LINES lines
  kill-after-rename:N        SIGKILL right after the N-th file this process renames into place
                             (every model dir write: import, average, pull -o)
  kill-in-stage:STAGE:N      SIGKILL right after the N-th file renamed into place once `nmt distill`'s STAGE has
                             started (and before the next stage starts: a stage of fewer renames is not cut short)
  kill-after-chunk:N         SIGKILL right after the N-th chunk this process writes whole into an OUT.parts/
                             (bulk.py: chunked translation, back-translation, the score filter's scores)
  serve-slow-lines           `nmt serve` holds a batch for S seconds on a line "<slow S>"
  graph-oom:PHASE:N          a GPU's out-of-memory error the N-th time a CUDA graph PHASE (warm-up,
                             capture, replay; arena: a buffer of the graphs' Arena taken) is reached
                             (translation; training's step graphs reach capture only)
  graph-error:PHASE:N        the same with another error (an operation that cannot be captured)

Never set it otherwise. Unset, as it always is outside the tests, a point is one dictionary look-up.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Callable
from typing import Any

_renamed = 0
_chunks = 0
_stage: dict[str, Any] = {"name": None, "renamed": 0}  # the distill stage running while a kill-in-stage fault is set
_reached: dict[str, int] = {}  # CUDA graph phase -> times reached while a graph-* fault was set


def point(name: str, **where: Any) -> None:
    """A place where an injected fault may strike; `where` says where exactly (the step, the lines)."""
    spec = os.environ.get("NMT_TEST_FAULT")
    if spec:
        kind, _, value = spec.partition(":")
        strike = _FAULTS.get((name, kind))
        if strike is not None:
            strike(value, **where)


def _count_rename(value: str) -> None:
    global _renamed
    _renamed += 1
    if int(value) == _renamed:
        _kill()


def _enter_stage(value: str, stage: str) -> None:
    _stage.update(name=stage, renamed=0)


def _count_rename_in_stage(value: str) -> None:
    stage, _, count = value.rpartition(":")
    if _stage["name"] == stage:
        _stage["renamed"] += 1
        if _stage["renamed"] == int(count):
            _kill()


def _count_chunk(value: str, chunk: int) -> None:
    global _chunks
    _chunks += 1
    if int(value) == _chunks:
        _kill()


def _kill_at_step(value: str, step: int) -> None:
    if int(value) == step:
        _kill()


def _fail_at_step(value: str, step: int) -> None:
    rank, _, at = value.partition(":")
    if int(rank) == int(os.environ.get("RANK", "0")) and int(at) == step:
        from nmtcli.errors import NmtError

        raise NmtError(f"injected failure at step {step} (NMT_TEST_FAULT)", "unset NMT_TEST_FAULT")


def _oom_at_step(value: str, step: int) -> None:
    if int(value) == step:
        from nmtcli.device import OUT_OF_MEMORY

        raise OUT_OF_MEMORY("CUDA out of memory (injected by NMT_TEST_FAULT)")


def _oom_above(value: str, lines: int) -> None:
    if lines > int(value):
        from nmtcli.device import OUT_OF_MEMORY

        raise OUT_OF_MEMORY(f"NMT_TEST_FAULT: {lines} lines")


def _graph_fault(error: Callable[[str], BaseException]) -> Callable[..., None]:
    def strike(value: str, phase: str) -> None:
        at_phase, _, at = value.partition(":")
        if at_phase == phase:
            _reached[phase] = _reached.get(phase, 0) + 1
            if _reached[phase] == int(at or 1):
                raise error(f"NMT_TEST_FAULT: CUDA graph {phase}")

    return strike


def _oom(message: str) -> BaseException:
    from nmtcli.device import OUT_OF_MEMORY

    return OUT_OF_MEMORY(message)


def _slow_lines(value: str, lines: list[str]) -> None:
    for line in lines:
        if found := re.fullmatch(r"<slow ([0-9.]+)>", line):
            time.sleep(float(found.group(1)))


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


# (fault point, NMT_TEST_FAULT kind) -> what happens there.
_FAULTS: dict[tuple[str, str], Callable[..., None]] = {
    ("renamed", "kill-after-rename"): _count_rename,
    ("chunk-written", "kill-after-chunk"): _count_chunk,
    ("distill-stage", "kill-in-stage"): _enter_stage,
    ("renamed", "kill-in-stage"): _count_rename_in_stage,
    ("checkpoint-half-written", "kill-in-checkpoint"): _kill_at_step,
    ("train-step", "fail"): _fail_at_step,
    ("train-step", "oom"): _oom_at_step,
    ("translate-batch", "oom-above"): _oom_above,
    ("serve-batch", "serve-slow-lines"): _slow_lines,
    ("cuda-graph", "graph-oom"): _graph_fault(_oom),
    ("cuda-graph", "graph-error"): _graph_fault(RuntimeError),
}
