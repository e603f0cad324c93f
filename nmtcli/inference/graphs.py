"""Beam search steps replayed as CUDA graphs: one launch per step instead of hundreds.

A decoder step of a base model is some 150 small kernels; launched one by one from Python they cost
more host time than the GPU needs to run them, so the GPU waits. `BeamSearch.step` touches only
tensors that keep their addresses (the decoder cache is written in place, the search state is
updated with `copy_`) and never reads a value back, so it can be recorded once as a CUDA graph and
replayed: the host then spends microseconds per step.

A graph has fixed shapes. The rows are fixed between two looks of the host at the search (when
decided sentences leave the batch, the search gets new tensors and new graphs); the positions that
self-attention reads grow with every step, so a graph reads a span of `bucket` positions more than it
needs and masks the ones beyond the current step (DecoderCache.fixed_span): one graph serves
`bucket` consecutive steps.

Before the first graph is used, its replay is checked against the same step run eagerly; any
failure or difference turns graphs off for the rest of the run, with a warning, and decoding goes on
eagerly. `StepGraphs(capture=False)` runs the same fixed-span steps eagerly, which is how the CPU
tests check everything a graph replays but the capture itself.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from nmtcli.inference.beam import BeamSearch

WARMUP_STEPS = 2  # eager steps before the first capture: lazy initialisation (cuBLAS, kernels) must not be captured


class StepGraphs:
    def __init__(self, bucket: int = 16, capture: bool = True, warn: Callable[[str], None] | None = None):
        self.bucket = bucket
        self.capture = capture
        self.warn = warn or (lambda message: None)
        self.enabled = True
        self.checked = False
        self.warmed_up = 0
        self.captured = 0  # graphs recorded so far (for the log and the tests)
        self._owner: int | None = None  # the generation of search state tensors the graphs belong to
        self._cleared: int | None = None  # the generation whose cache had its unwritten positions zeroed
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._pool = None

    def step(self, search: BeamSearch) -> None:
        if not self.enabled:
            search.step()
            return
        cache = search.state.cache
        if search.generation != self._cleared:  # buffers new to fixed spans
            cache.clear_unwritten()
            self._cleared = search.generation
        span = min(-(-(cache.length + 1) // self.bucket) * self.bucket, cache.capacity)
        cache.fixed_span = span
        try:
            if not self.capture:
                search.step()
            elif self.warmed_up < WARMUP_STEPS:
                self._warm_up(search)
            else:
                self._replay(search, span)
        finally:
            cache.fixed_span = None

    def _warm_up(self, search: BeamSearch) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            search.step()
        torch.cuda.current_stream().wait_stream(side)
        self.warmed_up += 1

    def _replay(self, search: BeamSearch, span: int) -> None:
        owner = search.generation
        if owner != self._owner:  # new tensors: the old graphs point at memory that is gone
            self._graphs.clear()
            self._owner = owner
        graph = self._graphs.get(span)
        if graph is None:
            try:
                graph = self._record(search)
            except Exception as e:  # an op that cannot be captured on this build or GPU
                self._give_up(f"CUDA graphs are off ({type(e).__name__}: {e}); decoding goes on without them")
                search.step()
                return
            self._graphs[span] = graph
        if not self.checked:
            self._check(search, graph)
            return
        graph.replay()
        search.state.cache.length += 1  # the host's count: a replay changes nothing on the host

    def _record(self, search: BeamSearch) -> torch.cuda.CUDAGraph:
        cache = search.state.cache
        length = cache.length
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            search.step()  # recorded, not run
        cache.length = length
        self.captured += 1
        return graph

    def _check(self, search: BeamSearch, graph: torch.cuda.CUDAGraph) -> None:
        """Run the step eagerly and as the graph from the same state; keep the eager result if they differ."""
        before = search.snapshot()
        search.step()
        eager = search.snapshot()
        search.restore(before)
        search.state.cache.length -= 1
        graph.replay()
        search.state.cache.length += 1
        replayed = search.snapshot()
        self.checked = True
        differ = [name for name in eager if not _same(eager[name], replayed[name])]
        if differ:
            search.restore(eager)
            self._give_up(f"a CUDA graph's replay differs from the eager step in {', '.join(differ)}; decoding goes on without graphs")

    def _give_up(self, message: str) -> None:
        self.enabled = False
        self._graphs.clear()
        self.warn(message)


def _same(a: Tensor, b: Tensor) -> bool:
    if a.is_floating_point():
        return bool(torch.allclose(a, b, rtol=1e-3, atol=1e-3, equal_nan=True))
    return bool(torch.equal(a, b))
