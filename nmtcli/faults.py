"""Fault injection for the tests of failure paths that cannot be produced on demand (a GPU running out
of memory, a process killed at one exact point): NMT_TEST_FAULT=KIND:ARG:... names one fault.

Unset, as it always is outside the tests, every check is one dictionary look-up.
"""

from __future__ import annotations

import os


def injected(kind: str) -> list[str] | None:
    """The arguments of the fault NMT_TEST_FAULT names, if it is of this kind; else None."""
    kind_given, *arguments = os.environ.get("NMT_TEST_FAULT", "").split(":")
    return arguments if kind_given == kind else None
