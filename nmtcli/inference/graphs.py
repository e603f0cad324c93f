"""Beam search steps replayed as CUDA graphs: one launch per step instead of hundreds.

A decoder step of a base model is some 150 small kernels; launched one by one from Python they cost
more host time than the GPU needs to run them, so the GPU waits. `BeamSearch.step` touches only
tensors that keep their addresses (the decoder cache is written in place, the search state is
updated with `copy_`) and never reads a value back, so it can be recorded once as a CUDA graph and
replayed: the host then spends microseconds per step.

A graph has fixed shapes and addresses, so a search with graphs runs in a shape class
(memory.shape_class): its sentences, its padded source width and its decoder cache's capacity rounded
up to sizes at most a quarter apart (memory.ladder: ..., 16, 20, 24, 28, 32, 40, ...), every tensor a
step reads or writes a view of the `Arena`, which keeps them from batch to batch. A graph is recorded
once per class (and span, and set of decoder buffers) and replayed by every later batch of the class.
Decided sentences ride along, masked, until the live ones fit the next smaller class; then they are
compacted into the front rows of the same tensors, which are that class's (BeamSearch._leave_in_class).
Why dead rows up to a class boundary and not a class per batch: a GPU step of a fifth fewer rows is
hardly cheaper, while a new shape means new graphs; classes a quarter apart bound the wasted rows to a
fifth and the classes to four per doubling (beside 1 to 8). The positions that self-attention reads grow
with every step, so a graph reads a span of `bucket` positions more than it needs and masks the ones
beyond the current step (DecoderCache.fixed_span): one graph serves `bucket` consecutive steps.

The padding sentences of a class cost its encoder pass and steps as much, also at most a fifth.

Memory: each role's buffer in the Arena is as large as that role's tensor in the largest class that came so
far: it grows with the classes that come, not with what the batch budget could bring (a request's beam, n-best
or output length may be far beyond what a GPU holds for the budget's largest class). A buffer made larger lets
go of the old one and drops every graph (they read its memory). A window is sorted shortest first, so its
classes do not come largest first; but its batches are known before the first is searched, and the Arena is
sized once for all of them (StepGraphs.reserve_window): within a window nothing grows (until out of memory)
and each graph is recorded once. A later window grows it only where one of its classes is larger than every
class before it (a window of longer lines), and then the graphs are recorded again as they are needed.
The first step of each (class, span) runs eagerly, not captured: cuBLAS and cuDNN build their plans for a
new shape there, never inside a capture. The graphs share one pool; no tensor made there is read by another graph (every result is copied into the Arena), so the pool holds about
one step's temporaries, the largest class's (memory.search_bytes' "graph pool"), whatever the number of graphs.
When the graphs are let go, so is the pool's handle, and later captures get a new pool (GraphPool: PyTorch's
allocator refuses a capture into a pool whose graphs all died).

A step reorders the decoder cache's keys/values from one set of buffers into the other (each byte
moves once), so the two sets take turns and a span has two graphs, one for each (`cache.advance()`
does on the host what a replayed step did there: a position more, the other set current).

What can fail, and what happens then (the host's count of decoded positions, `cache.length`, always
ends equal to the device's, `cache.position`):
- running out of memory, anywhere (a buffer of the Arena made larger too): the graphs, their memory pool and the
  Arena are let go and the error goes on to the caller, which halves the batch (inference/batches.py) and
  keeps using graphs; a single line is searched once more without graphs before it is given up;
- a capture that fails otherwise (an operation this build cannot capture): graphs are off for the
  rest of the run, with a warning, and the step runs eagerly (a capture runs nothing on the device);
- a warm-up step or a replay that fails otherwise: graphs are off, and the batch is searched again
  from its start without them (`GraphsOff`): the state such a failure leaves is not trusted;
- the first replay differs from the same step run eagerly: the eager result is kept, graphs are off.

`CudaGraphs` is the CUDA side (warm-up on a side stream, capture, replay); the tests put a recorder
in its place that records the step's Python function and replays it, which runs on a CPU.
`StepGraphs(capture=False)` runs the same fixed-span steps eagerly.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from nmtcli import faults
from nmtcli.device import is_out_of_memory
from nmtcli.inference.beam import BeamSearch, GraphsOff
from nmtcli.inference.memory import arena_bytes, ladder, shape_class
from nmtcli.model.config import ModelConfig
from nmtcli.model.incremental import reads_slots
from nmtcli.model.packed_attention import compute_dtype
from nmtcli.model.transformer import Transformer

WARMUP_STEPS = 2  # eager steps before the first capture of all: lazy initialisation (cuBLAS, kernels) must not be captured


class GraphPool:
    """The handle of the memory pool every graph of a `StepGraphs` is recorded into, and which graphs hold it.

    PyTorch's caching allocator counts the graphs that hold a pool: a capture into it adds one, a graph
    destroyed takes one off. Once the count is back at 0 the pool is on its way out, and a capture that names
    the same handle again fails (`it->second->use_count > 0 INTERNAL ASSERT FAILED`, CUDACachingAllocator.cpp;
    the bug class of pytorch/pytorch#189126). That happens whenever every graph is let go (the Arena grew,
    out of memory) and recording goes on. So a handle is kept only while a graph recorded into it lives: when
    the last one dies, or on `release`, it is forgotten, and the next capture mints a new one.

    `mint()` makes a new handle (`torch.cuda.graph_pool_handle`; the tests' stand-in has its own). Both the
    CUDA backend and the tests' recorder capture through `record`, so the tests run this logic."""

    def __init__(self, mint: Callable[[], object]):
        self._mint = mint
        self._handle = None
        self.holders = 0  # graphs recorded into the current handle and still alive

    def handle(self):
        """The handle to capture into: the current one while a graph holds it, else a new one."""
        if self._handle is None:
            self._handle = self._mint()
            self.holders = 0
        return self._handle

    def record(self, capture: Callable[[object], object]):
        """capture(handle) -> a graph recorded into the pool; the graph is counted as holding it until it dies."""
        handle = self.handle()
        try:
            graph = capture(handle)
        except BaseException:
            if self.holders == 0:  # the failed capture may have made the pool and let it go: never name it again
                self._handle = None
            raise
        self.holders += 1
        weakref.finalize(graph, self._graph_died, handle)
        return graph

    def release(self) -> None:
        """Forget the handle (the graphs are being let go): the next capture mints a new one."""
        self._handle = None
        self.holders = 0

    def _graph_died(self, handle) -> None:
        if handle == self._handle:
            self.holders -= 1
            if self.holders == 0:
                self._handle = None


class CudaGraphs:
    """Warm-up, capture and replay on the current CUDA device, the graphs held at once in one memory pool.
    Training's step graphs (training/graphs.py) use it too.

    `capture_error_mode` is CUDA's stream capture mode: "global" fails a capture when any thread makes a call
    that is unsafe during one; "thread_local" only when the capturing thread does (training: the loader's
    thread pins the next batches, a cudaHostAlloc, while a step is captured)."""

    def __init__(self, capture_error_mode: str = "global"):
        self.pool = GraphPool(torch.cuda.graph_pool_handle)
        self.capture_error_mode = capture_error_mode
        self._stream: torch.cuda.Stream | None = None

    def _side_stream(self) -> torch.cuda.Stream:
        if self._stream is None:
            self._stream = torch.cuda.Stream()
        return self._stream

    def warm_up(self, step: Callable[[], None]) -> None:
        """Run `step` eagerly on the side stream that captures will use."""
        side = self._side_stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            step()
        torch.cuda.current_stream().wait_stream(side)

    def record(self, step: Callable[[], None]) -> torch.cuda.CUDAGraph:
        """`step` captured, not run. Unlike `torch.cuda.graph`, without synchronizing the device and
        emptying the allocator's cache before every capture: the graphs of a search share one pool."""
        return self.pool.record(lambda pool: self._capture(step, pool))

    def _capture(self, step: Callable[[], None], pool) -> torch.cuda.CUDAGraph:
        graph = torch.cuda.CUDAGraph()
        side = self._side_stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            graph.capture_begin(pool=pool, capture_error_mode=self.capture_error_mode)
            try:
                step()
            except BaseException:
                try:
                    graph.capture_end()  # end the stream's capture mode; the capture itself is lost
                except RuntimeError:
                    pass
                raise
            graph.capture_end()
        torch.cuda.current_stream().wait_stream(side)
        return graph

    def replay(self, graph: torch.cuda.CUDAGraph, search: BeamSearch | None = None) -> None:
        """Replay `graph` (recorded for `search`'s class: on its tensors, which the Arena keeps in place; the
        tests' recorder checks that they are)."""
        graph.replay()

    def release(self) -> None:
        """Let go of the pool: with the graphs gone too, the allocator can reuse or free its memory."""
        self.pool.release()


class Arena:
    """The tensors of searches in shape classes, kept from batch to batch: one flat buffer per role (the
    names of memory.arena_bytes), a class's tensor the view of its front. A smaller class's tensors are the
    fronts of a larger one's, so sentences that leave are compacted in place and all classes share memory."""

    def __init__(self):
        self._flat: dict[str, Tensor] = {}
        self.version = 0  # new whenever a buffer is let go: graphs recorded before read memory that is gone
        self._reserved: dict[str, int] = {}  # bytes by role to size the buffers for at the next tensor taken

    def reserve(self, nbytes: dict[str, int]) -> None:
        """Size every buffer for at least `nbytes` (by role) when the next tensor is taken: in the search of the
        next batch, so that running out of memory there halves the batch as anywhere else."""
        self._reserved = dict(nbytes)

    def tensor(self, role: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> Tensor:
        """An empty tensor for `role`, at the front of its buffer (made, or made larger, if it is short)."""
        reserved, self._reserved = self._reserved, {}
        for other, size in reserved.items():
            self._buffer(other, size, device)
        nbytes = math.prod(shape) * dtype.itemsize
        return self._buffer(role, nbytes, device)[:nbytes].view(dtype).view(shape)

    def _buffer(self, role: str, nbytes: int, device: torch.device) -> Tensor:
        """The buffer of `role`, made, or made larger, if it holds fewer than `nbytes`."""
        flat = self._flat.get(role)
        if flat is None or flat.numel() < nbytes or flat.device != device:
            if flat is not None:
                del self._flat[role], flat  # before the larger one is taken
                self.version += 1
            faults.point("cuda-graph", phase="arena")
            flat = self._flat[role] = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return flat

    @property
    def nbytes(self) -> int:
        return sum(flat.numel() for flat in self._flat.values())

    def release(self) -> None:
        if self._flat:
            self.version += 1
        self._flat.clear()
        self._reserved = {}  # after out of memory the batches are smaller: each takes what its class needs


class StepGraphs:
    def __init__(self, bucket: int = 16, capture: bool = True, warn: Callable[[str], None] | None = None, backend=None):
        self.bucket = bucket
        self.arena = Arena()
        self.budget: tuple[int, int | None] | None = None  # (batch tokens, sentences): the batches' most sentences (`cap`)
        self._version = self.arena.version
        self.capture = capture
        self.backend = backend if backend is not None else (CudaGraphs() if capture else None)
        self.warn = warn or (lambda message: None)
        self.enabled = True
        self.checked = False
        self.warmed_up = 0  # warm-up steps run
        self._warm: set[tuple] = set()  # (class, span) warmed up (a shape's plans outlive a growth of the Arena)
        self.captured = 0  # graphs recorded so far (for the log and the tests)
        self.dropped = 0  # graphs let go because a buffer of the Arena was made larger
        self.replayed = 0  # steps run as a replay of a graph
        self.off_reason: str | None = None  # why graphs turned themselves off (the warning), while they are off
        self._cleared: int | None = None  # the generation whose cache had its unwritten positions zeroed
        self._graphs: dict[tuple, object] = {}

    def summary(self) -> dict:
        """What the graphs did, for `nmt translate -v` and the benchmarks: whether they are on, the graphs
        captured, dropped (the Arena grew) and the steps replayed, and why they turned off (None: they did not)."""
        return {"enabled": self.enabled, "captured": self.captured, "dropped": self.dropped, "replayed": self.replayed,
                "off_reason": self.off_reason}

    @property
    def cap(self) -> int | None:
        """The most sentences a batch has (a GPU's default batch): the largest class's."""
        return self.budget[1] if self.budget else None

    # --- a search in a shape class (BeamSearch calls these with graphs) -------------------------------------

    def pad_to_class(self, config: ModelConfig, src: Tensor, prefixes: Sequence[list[int]] | None, max_len_a: float,
                     max_len_b: int) -> tuple[Tensor, Sequence[list[int]] | None]:
        """A batch (and its prefixes) padded to its shape class's sentences and source width: each padding sentence
        an empty source (EOS alone) without a prefix."""
        real = src.size(0)
        rows, width, _ = shape_class(config, real, src.size(1), 0, max_len_a, max_len_b, self.bucket, self.cap)
        src = torch.nn.functional.pad(src, (0, width - src.size(1), 0, rows - real), value=config.pad_id)
        src[real:, 0] = config.eos_id
        if prefixes is not None:
            prefixes = [*prefixes, *[[]] * (rows - real)]
        return src, prefixes

    def class_tensors(self, config: ModelConfig, src: Tensor, steps: int, prefix: Tensor | None, max_len_a: float,
                      max_len_b: int) -> tuple[int, Tensor | None, Callable]:
        """For a padded batch that decodes at most `steps` positions: its class's decoder capacity, its prefixes
        padded to the class's width (a ladder size), and alloc(role, shape, dtype), which takes the search's
        tensors from the Arena."""
        capacity = shape_class(config, src.size(0), src.size(1), steps, max_len_a, max_len_b, self.bucket, self.cap)[2]
        if prefix is not None:
            prefix = torch.nn.functional.pad(prefix, (0, ladder(prefix.size(1)) - prefix.size(1)), value=config.pad_id)
        device = src.device
        return capacity, prefix, lambda role, shape, dtype: self.arena.tensor(role, shape, dtype, device)

    def move_into_arena(self, search: BeamSearch, real: int) -> None:
        """The search's own tensors (what a step reads and changes) copied into the Arena, where the previous
        batch of the class had them; the padding sentences after the `real` ones decided from the start."""
        for name in search._INPUTS + search._STEP_STATE:
            value = getattr(search, name, None)
            if value is not None:
                setattr(search, name, self.arena.tensor(name, value.shape, value.dtype, value.device).copy_(value))
        search.done[real:] = True
        search.sentence[real:] = -1

    @staticmethod
    def rows_in_smaller_class(done: list[bool]) -> list[int] | None:
        """The sentences that go on when the live ones fit a smaller class: the live ones and, in order, as many
        decided ones as fill that class (they ride along, masked); None while they need the present class."""
        live = [i for i, d in enumerate(done) if not d]
        rows = ladder(len(live))
        if rows >= len(done):
            return None
        return sorted(live + [i for i, d in enumerate(done) if d][: rows - len(live)])

    def reserve_window(self, model: Transformer, batches: Sequence[tuple[Sequence[int], Sequence[int]]], beam: int, nbest: int,
                       max_len_a: float, max_len_b: int) -> None:
        """Size the Arena once for a window's batches, before the first is searched: each role for its largest over
        the classes the batches fall in, so that no later batch of the window makes a buffer larger (and drops
        the graphs recorded so far). `batches`: each batch's source lengths (without EOS) and prefix lengths.
        Called where the search runs (autocast on or off): its dtype is the keys/values'."""
        cfg = model.config
        dtype = compute_dtype(model.embedding.tokens.weight)
        slots = reads_slots(next(model.parameters()).device, beam, dtype, cfg.d_k)
        most: dict[str, int] = {}
        for lengths, prefix_lengths in batches:
            rows, source, capacity, prefix = batch_class(cfg, lengths, prefix_lengths, max_len_a, max_len_b, self.bucket, self.cap)
            for role, nbytes in arena_bytes(cfg, rows, source, capacity, beam, nbest, prefix, dtype.itemsize, slots).items():
                most[role] = max(most.get(role, 0), nbytes)
        self.arena.reserve(most)

    def step(self, search: BeamSearch) -> None:
        if not self.enabled:
            search.step()
            return
        cache = search.state.cache
        if search.generation != self._cleared:  # buffers new to fixed spans
            cache.clear_unwritten()
            self._cleared = search.generation
        # Read through slots, a step attends up to its position on the device: one span, the whole capacity.
        span = cache.capacity if cache.reads_slots else min(-(-(cache.length + 1) // self.bucket) * self.bucket, cache.capacity)
        cache.fixed_span = span
        try:
            if not self.capture:
                search.step()
            else:
                self._graphed_step(search, span)
        finally:
            cache.fixed_span = None

    def release(self) -> None:
        """Drop every graph, the pool they share and the Arena (before emptying the allocator's cache: a
        graph's memory must not be handed out while the graph may still be replayed)."""
        self._drop_graphs()
        self._warm.clear()  # warm up again after out of memory: what the libraries held may have gone with the cache
        self.arena.release()

    def _drop_graphs(self) -> None:
        """Let go of every graph, and of the pool's handle with them: a capture into a pool whose graphs all
        died fails in PyTorch's allocator (GraphPool), so the next capture mints a new handle."""
        self._graphs.clear()
        if self.backend is not None:
            self.backend.release()

    @property
    def recorded_keys(self) -> set[tuple]:
        """(class, span, buffer set) of every graph held."""
        return set(self._graphs)

    def _graphed_step(self, search: BeamSearch, span: int) -> None:
        """The step replayed; recorded first if its (class, span, buffer set) has no graph yet, and warmed up
        before that: the first step of a shape runs eagerly on the capture's stream, so that cuBLAS and cuDNN
        build their plans for it there and not inside a capture (also the first WARMUP_STEPS of all: the
        libraries' lazy initialisation)."""
        if self.arena.version != self._version:  # a buffer was let go: the graphs point at memory that is gone
            self.dropped += len(self._graphs)
            self._drop_graphs()
            self._version = self.arena.version
        # The decoder cache's two sets of buffers take turns: a graph for each.
        key = (search.class_key(), span, search.state.cache.keys[0].data_ptr())
        if key not in self._graphs and (self.warmed_up < WARMUP_STEPS or key[:2] not in self._warm):
            self._guarded(search, "warm-up", lambda: (self.backend.warm_up(search.step), faults.point("cuda-graph", phase="warm-up")))
            self.warmed_up += 1
            self._warm.add(key[:2])
            return
        self._replay(search, key)

    def _replay(self, search: BeamSearch, key: tuple) -> None:
        cache = search.state.cache
        graph = self._graphs.get(key)
        if graph is None:
            graph = self._record(search)
            if graph is None:  # graphs are off now; the state is untouched: this step runs eagerly
                search.step()
                return
            self._graphs[key] = graph
        if not self.checked:
            self._check(search, graph)
            return
        self._guarded(search, "replay", lambda: self._replay_graph(graph, search))
        cache.advance()  # a replay changes nothing on the host: its count of positions, its current buffers

    def _record(self, search: BeamSearch):
        """The step captured as a graph; None if it cannot be (graphs are then off)."""
        cache = search.state.cache
        host = cache.host_state()
        try:
            graph = self.backend.record(search.step)
            faults.point("cuda-graph", phase="capture")  # after the step's host side ran: the hardest place to fail
        except Exception as e:
            if is_out_of_memory(e):
                self.release()
                raise
            self._give_up(f"CUDA graphs are off ({type(e).__name__}: {e}); decoding goes on without them")
            return None
        finally:
            cache.set_host_state(host)  # the captured step ran its host side (a position counted, buffers swapped), not its device side
        self.captured += 1
        return graph

    def _guarded(self, search: BeamSearch, phase: str, run: Callable[[], None]) -> None:
        """Run a warm-up step or a replay. Out of memory: the caller halves the batch. Otherwise the state
        is not trusted: graphs off, and the batch starts over without them."""
        try:
            run()
        except Exception as e:
            if is_out_of_memory(e):
                self.release()
                raise
            self._give_up(f"CUDA graphs are off (a {phase} step failed: {type(e).__name__}: {e}); the batch is searched again without them")
            raise GraphsOff(phase) from e

    def _check(self, search: BeamSearch, graph) -> None:
        """Run the step eagerly and as the graph from the same state; keep the eager result if they differ.

        The copies hold what a step changes: the search's state and the positions of the decoder cache
        the step reads (its span), not the whole cache; the replayed state is compared in place.
        """
        cache = search.state.cache
        host = cache.host_state()
        before = search.snapshot()
        search.step()
        eager = search.snapshot()
        cache.set_host_state(host)
        search.restore(before)
        del before
        self._guarded(search, "replay", lambda: self._replay_graph(graph, search))
        cache.advance()
        self.checked = True
        differ = [name for name, t in search.step_tensors().items() if not _same(eager[name], t)]
        if differ:
            search.restore(eager)
            self._give_up(f"a CUDA graph's replay differs from the eager step in {', '.join(differ)}; decoding goes on without graphs")

    def _give_up(self, message: str) -> None:
        self.enabled = False
        self.off_reason = message
        self.release()
        self.warn(message)

    def _replay_graph(self, graph, search: BeamSearch) -> None:
        faults.point("cuda-graph", phase="replay")
        self.backend.replay(graph, search)
        self.replayed += 1


def batch_class(config: ModelConfig, lengths: Sequence[int], prefix_lengths: Sequence[int], max_len_a: float, max_len_b: int,
                bucket: int, cap: int | None) -> tuple[int, int, int, int]:
    """(sentences, source width, capacity, prefix width) of the class BeamSearch searches a batch in: sources of
    `lengths` tokens (without EOS), target prefixes of `prefix_lengths` (0: none), limits as outputs.max_output_lengths
    and prefixes.prefix_tensors make them (a prefix longer than the limit is the whole output)."""
    rows, source, _ = shape_class(config, len(lengths), max(lengths) + 1, 0, max_len_a, max_len_b, bucket, cap)
    steps = 0
    for length, prefix in zip(lengths, prefix_lengths or [0] * len(lengths)):
        limit = min(max(math.floor(max_len_a * length + max_len_b), 0), config.max_positions - 2)
        limit = prefix if length == 0 and prefix else max(limit, prefix)
        steps = max(steps, limit + 1)
    capacity = shape_class(config, rows, source, steps, max_len_a, max_len_b, bucket, cap)[2]
    prefix_width = ladder(max(prefix_lengths)) if prefix_lengths and any(prefix_lengths) else 0
    return rows, source, capacity, prefix_width


def _same(a: Tensor, b: Tensor) -> bool:
    if a.is_floating_point():
        return bool(torch.allclose(a, b, rtol=1e-3, atol=1e-3, equal_nan=True))
    return bool(torch.equal(a, b))
