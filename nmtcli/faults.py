"""Fault injection for the tests of failure paths that cannot be produced on demand (a GPU running out
of memory, a process killed at one exact point). NMT_TEST_FAULT makes nmt fail at a chosen point; never
set it otherwise. Unset, as it always is outside the tests, every check is one dictionary look-up.

  kill-in-checkpoint:STEP    SIGKILL while the checkpoint of STEP is half written (training)
  fail:RANK:STEP             rank RANK raises an NmtError at STEP (training)
  oom:STEP                   the error a GPU raises for a batch that does not fit, at STEP (training)
  oom-above:LINES            the same for every translation batch of more than LINES lines
  kill-after-rename:N        SIGKILL right after the N-th file this process renames into place
                             (every model dir write: import, average, pull -o)
  serve-slow-lines           `nmt serve` holds a batch for S seconds on a line "<slow S>"
"""

from __future__ import annotations

import os
import signal

_renamed = 0


def injected(kind: str) -> int | None:
    """The step (or count) at which NMT_TEST_FAULT asks for a fault of `kind` in this process (0 for a
    kind without one); None: no fault."""
    parts = os.environ.get("NMT_TEST_FAULT", "").split(":")
    if parts[0] != kind:
        return None
    if kind == "fail" and int(parts[1]) != int(os.environ.get("RANK", "0")):
        return None
    return int(parts[-1]) if len(parts) > 1 else 0


def renamed() -> None:
    """Count one file renamed into place; the one `kill-after-rename:N` names kills the process."""
    global _renamed
    _renamed += 1
    if injected("kill-after-rename") == _renamed:
        os.kill(os.getpid(), signal.SIGKILL)
