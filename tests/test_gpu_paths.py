"""The GPU's code paths run on a CPU: the attention calls a GPU makes, CUDA graph capture and its failures,
the memory a GPU batch needs. What stays GPU-only (the kernels themselves, a real capture, speed) is
listed in docs/architecture.md, "What the CPU tests cover of a GPU"."""

from __future__ import annotations

import copy
import weakref

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from conftest import torch_threads
from test_beam import SENTENCES, _as_lists, _batch, tiny_model

from nmtcli import faults
from nmtcli.inference.beam import beam_search
from nmtcli.inference.graphs import GraphPool, StepGraphs
from nmtcli.inference.memory import arena_bytes, arena_reserve, shape_class
from nmtcli.inference.precision import autocast, to_half
from nmtcli.inference.batches import BatchBudget, translate_ids
from nmtcli.inference.settings import SearchSettings
from nmtcli.model import incremental
from nmtcli.model.incremental import DecoderCache
from nmtcli.training.graphs import Unrecorded


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The models here are tiny: one thread runs them fastest, and waits for no other on a loaded machine."""
    with torch_threads(1):
        yield


@pytest.fixture
def sdpa_calls(monkeypatch):
    """Decoding steps attend through scaled_dot_product_attention as on a GPU; every call's mask is checked
    where it is made: 4-d, broadcastable to (B, h, Lq, Lk), and accepted by the backend choice (whose
    cuDNN check reads mask.size(-2)) in the call's own dtype."""
    calls = []
    sdpa = F.scaled_dot_product_attention

    def checked(q, k, v, attn_mask=None, **kwargs):
        if attn_mask is not None:
            full = (q.size(0), q.size(1), q.size(2), k.size(2))
            assert attn_mask.dim() == 4 and torch.broadcast_shapes(attn_mask.shape, full) == full, attn_mask.shape
        torch._fused_sdp_choice(q, k, v, attn_mask)  # raises where a backend cannot read the mask
        calls.append((q.dtype, None if attn_mask is None else tuple(attn_mask.shape)))
        return sdpa(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", checked)
    monkeypatch.setattr(incremental, "fused_attention", lambda device: True)
    return calls


def test_a_one_dimensional_mask_is_what_the_backend_choice_rejects():
    # The check the fixture makes is the one that fails: the mask fixed spans had before (span,).
    q, k = torch.zeros(4, 2, 1, 8), torch.zeros(4, 2, 16, 8)
    with pytest.raises(IndexError):
        torch._fused_sdp_choice(q, k, k, torch.zeros(16))
    torch._fused_sdp_choice(q, k, k, torch.zeros(1, 1, 1, 16))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_gpu_attention_calls_of_every_search_equal_the_cpu_search(sdpa_calls, monkeypatch, dtype):
    model = tiny_model(8, vocab_size=30)
    src = _batch(SENTENCES)
    monkeypatch.setattr(incremental, "fused_attention", lambda device: False)
    if dtype == "bf16":
        to_half(model, "bf16")
    with autocast(torch.device("cpu"), dtype):
        reference = beam_search(model, src, beam=4, nbest=2, max_len_b=9)
        monkeypatch.setattr(incremental, "fused_attention", lambda device: True)
        eager = beam_search(model, src, beam=4, nbest=2, max_len_b=9)
        fixed = beam_search(model, src, beam=4, nbest=2, max_len_b=9, sync_every=4, graphs=StepGraphs(bucket=4, capture=False))
    tokens = [[h.tokens for h in s] for s in reference]
    assert [[h.tokens for h in s] for s in eager] == tokens == [[h.tokens for h in s] for s in fixed]
    close = 1e-4 if dtype == "fp32" else 0.05
    for ours, theirs in zip(fixed, reference):
        assert all(abs(a.score - b.score) < close for a, b in zip(ours, theirs))
    expected = torch.float32 if dtype == "fp32" else torch.bfloat16
    assert {d for d, _ in sdpa_calls} == {expected}
    spans = {shape for _, shape in sdpa_calls if shape and shape[:3] == (1, 1, 1)}
    assert spans >= {(1, 1, 1, 4), (1, 1, 1, 8)}, "the fixed-span masks never reached the kernel"
    assert any(shape and shape[1:3] == (1, 1) and shape[0] > 1 for _, shape in sdpa_calls), "no source mask seen"


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_every_decoding_step_attends_with_the_kernels_chosen_for_its_dtype(sdpa_calls, monkeypatch, dtype):
    # A GPU decides between flash, memory-efficient, cuDNN and math by the flags sdpa_kernel sets: every
    # step of every search (eager, fixed spans, greedy, sampling) must call with DECODING_KERNELS' choice on,
    # and the flags must be back as they were after it (training's attention is not restricted).
    from torch.nn.attention import SDPBackend

    from nmtcli.inference.greedy import greedy_search
    from nmtcli.inference.sampling import parse_sampling, sample

    flags, in_step = [], []
    sdpa, layer_step = F.scaled_dot_product_attention, incremental.decoder_layer_step
    backends = torch.backends.cuda

    def flagged(*args, **kwargs):
        if in_step:  # a decoder step's call (the encoder's pass over a batch is not a step)
            flags.append((backends.flash_sdp_enabled(), backends.mem_efficient_sdp_enabled(), backends.cudnn_sdp_enabled(),
                          backends.math_sdp_enabled()))
        return sdpa(*args, **kwargs)

    def marked(*args, **kwargs):
        in_step.append(1)
        try:
            return layer_step(*args, **kwargs)
        finally:
            in_step.pop()

    monkeypatch.setattr(F, "scaled_dot_product_attention", flagged)
    monkeypatch.setattr(incremental, "decoder_layer_step", marked)
    model = tiny_model(8, vocab_size=30)
    if dtype == "bf16":
        to_half(model, "bf16")
    before = (backends.flash_sdp_enabled(), backends.mem_efficient_sdp_enabled(), backends.cudnn_sdp_enabled(), backends.math_sdp_enabled())
    src = _batch(SENTENCES)
    with autocast(torch.device("cpu"), dtype):
        beam_search(model, src, beam=4, max_len_b=6)
        beam_search(model, src, beam=4, max_len_b=6, sync_every=4, graphs=StepGraphs(bucket=4, capture=False))
        greedy_search(model, src, max_len_b=6)
        sample(model, src, parse_sampling("topk:5"), max_len_b=6)
    chosen = incremental.DECODING_KERNELS[torch.float32 if dtype == "fp32" else torch.bfloat16]
    expected = tuple(b in chosen for b in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION,
                                           SDPBackend.MATH))
    assert flags and set(flags) == {expected}, set(flags)
    assert not expected[2], "cuDNN attention builds a plan per shape: decoding steps must not use it"
    after = (backends.flash_sdp_enabled(), backends.mem_efficient_sdp_enabled(), backends.cudnn_sdp_enabled(), backends.math_sdp_enabled())
    assert after == before


def test_teacher_forced_attention_takes_masks_every_backend_accepts(sdpa_calls):
    model = tiny_model(3, vocab_size=30).train()
    src = _batch(SENTENCES)
    model(src, src[:, :4]).sum().backward()
    assert len(sdpa_calls) == 3 * model.config.layers  # encoder self, decoder self (causal), cross


# --- CUDA graphs, recorded as Python ---------------------------------------------------------------


class Recorder:
    """CUDA graphs as a CPU can have them. A capture runs the step's host side and none of its device
    side (its tensors are put back), as a real capture does; a replay runs the recorded step and none of
    its host side, on the tensors the step had when it was recorded (a real graph's kernels hold their
    addresses), also when a later search replays it. A replay checks what a real one would silently get
    wrong: the replaying search's tensors must be where the recorded ones were, with their shapes, and
    the host must count the positions the device has.

    Captures name their pool through the production GraphPool, and the recorder keeps the caching
    allocator's count of the graphs that hold each pool (a capture adds one, a graph that dies takes one
    off): a capture into a pool whose graphs all died fails as PyTorch's allocator does."""

    def __init__(self):
        self.recorded = self.replayed = self.released = 0
        self.pool = GraphPool(self._mint)
        self.use_count: dict[int, int] = {}  # pool handle -> live graphs recorded into it (the allocator's use_count)
        self._minted = 0

    def _mint(self) -> int:
        self._minted += 1
        return self._minted

    def warm_up(self, step):
        step()

    def record(self, step):
        return self.pool.record(lambda pool: self._capture(step, pool))

    def _capture(self, step, pool):
        if self.use_count.get(pool, 1) == 0:  # CUDACachingAllocator's beginAllocateToPool
            raise RuntimeError('it->second->use_count > 0 INTERNAL ASSERT FAILED at "c10/cuda/CUDACachingAllocator.cpp" '
                               "(a capture into a pool whose graphs all died)")
        search = step.__self__
        cache = search.state.cache
        host, before, addresses = cache.host_state(), search.snapshot(), _addresses(search)
        frozen = copy.copy(search)  # the step's bindings as they are now: what the graph's kernels point at
        frozen.state = copy.copy(search.state)
        frozen.state.cache = copy.copy(cache)
        step()
        after = cache.host_state()
        cache.set_host_state(host)  # the tensors back where the step found them; the host's side as the step left it
        search.restore(before)
        cache.set_host_state(after)
        self.recorded += 1
        self.use_count[pool] = self.use_count.get(pool, 0) + 1
        graph = Replay(frozen, addresses)
        weakref.finalize(graph, self._graph_died, pool)
        return graph

    def _graph_died(self, pool):
        self.use_count[pool] -= 1

    def replay(self, graph, search):
        assert _addresses(search) == graph.addresses, "a graph replayed on tensors that moved"
        graph.cache.set_host_state(search.state.cache.host_state())  # the live buffers are the recorded ones (checked above)
        graph.step()
        self.replayed += 1

    def release(self):
        self.released += 1
        self.pool.release()


class Replay:
    def __init__(self, frozen, addresses: dict[str, tuple]):
        self.cache, self.step, self.addresses = frozen.state.cache, frozen.step, addresses


def _addresses(search) -> dict[str, tuple]:
    return {name: (t.data_ptr(), tuple(t.shape)) for name, t in search.graph_tensors().items()}


@pytest.fixture
def positions_agree(monkeypatch):
    """Every decoder step starts where the host thinks it does."""
    begin = DecoderCache.begin_step

    def checked(self):
        assert self.length == int(self.position), f"host at {self.length}, device at {int(self.position)}"
        begin(self)

    monkeypatch.setattr(DecoderCache, "begin_step", checked)


def _search_lines(backend=None, budget_tokens=1000, settings=None):
    """Two copies of SENTENCES (10 lines) translated through translate_ids (with `settings`, default beam 4, nbest 2,
    max_len_b 7), with step graphs on `backend` (None: no graphs): (the lines' n-best lists, warnings, the batch
    budget after, the graphs)."""
    model = tiny_model(8, vocab_size=30)
    warnings = []
    graphs = StepGraphs(bucket=4, backend=backend, warn=warnings.append) if backend is not None else None
    budget = BatchBudget(budget_tokens)
    hyps = translate_ids(model, SENTENCES * 2, settings or SearchSettings(beam=4, nbest=2, max_len_b=7), budget, torch.device("cpu"),
                         graphs=graphs, warn=warnings.append)
    return _as_lists(hyps), warnings, budget, graphs


@pytest.fixture(scope="module")
def eager_lines():
    lines = _search_lines()[0]
    assert len({len(h[0][0]) for h in lines}) > 1, "every line has the same length: the tests prove little"
    return lines


def test_recorded_graphs_replay_the_eager_search_with_a_brevity_penalty(positions_agree, eager_lines):
    # the lengths the sources predict are a per-sentence input of the step: in the Arena, and moved with their sentences
    settings = SearchSettings(beam=4, nbest=2, max_len_b=7, brevity_penalty=5.0, length_ratio=2.0)
    eager = _search_lines(settings=settings)[0]
    assert eager != eager_lines  # the penalty changes some lines' choice
    recorder = Recorder()
    lines, warnings, _, graphs = _search_lines(recorder, settings=settings)
    assert lines == eager and warnings == []
    assert graphs.enabled and recorder.replayed > recorder.recorded >= 3


def _fault(monkeypatch, spec: str | None):
    faults._reached.clear()
    if spec:
        monkeypatch.setenv("NMT_TEST_FAULT", spec)


def test_recorded_graphs_replay_the_eager_search(positions_agree, eager_lines):
    recorder = Recorder()
    lines, warnings, _, graphs = _search_lines(recorder)
    assert lines == eager_lines and warnings == []
    assert graphs.enabled and graphs.checked and recorder.replayed > recorder.recorded >= 3
    assert graphs.summary() == {"enabled": True, "captured": recorder.recorded, "dropped": graphs.dropped, "replayed": recorder.replayed,
                                "off_reason": None}


@pytest.mark.parametrize("phase", ["arena", "warm-up", "capture", "replay"])
def test_out_of_memory_in_a_graph_halves_the_batch_and_keeps_graphs_on(monkeypatch, positions_agree, eager_lines, phase):
    _fault(monkeypatch, f"graph-oom:{phase}:1")
    recorder = Recorder()
    lines, warnings, budget, graphs = _search_lines(recorder)
    assert lines == eager_lines
    assert len(warnings) == 1 and warnings[0].startswith("out of memory with a batch of 10 lines"), warnings
    assert budget.tokens < 1000 and graphs.enabled and recorder.released >= 1
    assert recorder.replayed > 0, "graphs were not used after the failure"


@pytest.mark.parametrize("phase", ["warm-up", "capture", "replay"])
def test_any_other_graph_failure_turns_graphs_off_and_changes_no_line(monkeypatch, positions_agree, eager_lines, phase):
    _fault(monkeypatch, f"graph-error:{phase}:1")
    recorder = Recorder()
    lines, warnings, budget, graphs = _search_lines(recorder)
    assert lines == eager_lines
    assert len(warnings) == 1 and warnings[0].startswith("CUDA graphs are off") and "RuntimeError" in warnings[0], warnings
    assert not graphs.enabled and budget.tokens == 1000
    summary = graphs.summary()
    assert not summary["enabled"] and summary["off_reason"] == warnings[0] and summary["replayed"] == recorder.replayed


def test_a_replay_that_differs_from_the_eager_step_keeps_the_eager_result(monkeypatch, positions_agree, eager_lines):
    class Wrong(Recorder):
        def record(self, step):
            replay = super().record(step)
            search = step.__self__
            right = replay.step

            def wrong_step():  # the replay writes a wrong score
                right()
                search.scores.add_(1.0)

            replay.step = wrong_step
            return replay

    lines, warnings, _, graphs = _search_lines(Wrong())
    assert lines == eager_lines and not graphs.enabled
    assert len(warnings) == 1 and "differs from the eager step in scores" in warnings[0]
    assert graphs.summary()["off_reason"] == warnings[0] and graphs.summary()["captured"] == 1


def test_the_graph_check_copies_only_the_span_a_step_reads():
    # The check clones what a step changes; the decoder cache is by far the largest part, and a step
    # reads and reorders only its span: at the first capture a sixteenth of a cache of 256 positions.
    from nmtcli.inference.beam import BeamSearch

    model = tiny_model(8, vocab_size=30)
    with torch.inference_mode():
        search = BeamSearch(model, _batch(SENTENCES), 4, 0.6, 0.0, 255, 1, "gnmt", 0)
        search.step()
        cache = search.state.cache
        cache.fixed_span = 16
        copied = sum(t.numel() * t.element_size() for name, t in search.snapshot().items() if "keys" in name or "values" in name)
    whole = sum(t.numel() * t.element_size() for t in (*cache.keys, *cache.values))
    assert cache.capacity == 256 and copied * 16 == whole


# --- memory arithmetic ----------------------------------------------------------------------------


def test_the_memory_arithmetic_is_that_of_the_tensors_a_search_allocates():
    # The decoder's real allocations, on the meta device (shapes, no memory): a base model, fp32.
    from nmtcli.inference.memory import positions, search_bytes
    from nmtcli.inference.outputs import NORMALIZER_CHUNK_BYTES
    from nmtcli.model.config import ModelConfig
    from nmtcli.model.incremental import decode_step, start_decoding
    from nmtcli.model.transformer import skeleton

    config = ModelConfig()
    model = skeleton(config).eval()
    model.embedding.positions = model.embedding.positions.to("meta")
    n, longest, beam = 24, 30, 4
    with torch.inference_mode():
        memory = torch.empty(n, longest + 1, config.d_model, device="meta")
        state = start_decoding(model, memory, torch.ones(n, 1, 1, longest + 1, dtype=torch.bool, device="meta"), beam,
                               capacity=positions(config, longest))
        state.cache.start_with(n)
        decode_step(model, torch.ones(n, dtype=torch.long, device="meta"), state)
        state.reorder(torch.zeros(n * beam, dtype=torch.long, device="meta"))  # makes the spare set
        logits = decode_step(model, torch.ones(n * beam, dtype=torch.long, device="meta"), state)
        cache = state.cache
        per_chunk = NORMALIZER_CHUNK_BYTES["cuda"] // (4 * config.vocab_size)  # the rows outputs.log_normalizer takes at once
        normalizing = torch.log_softmax(logits[:per_chunk], dim=-1, dtype=torch.float32)
    nbytes = lambda tensors: sum(t.numel() * t.element_size() for t in tensors)  # noqa: E731
    estimate = search_bytes(config, n, longest, beam, dtype_bytes=4)
    assert estimate["keys/values"] == nbytes([*cache._buffers[0], *cache._buffers[1], *cache._spare[0], *cache._spare[1]])
    assert estimate["encoder keys/values"] == nbytes([t for kv in state.memory_kv for t in kv])
    assert estimate["logits"] == nbytes([logits, normalizing])  # fp32: the projection, the log-softmax of a chunk of its rows
    many = search_bytes(config, 20 * n, longest, beam, dtype_bytes=2)["logits"]  # bf16, more rows than a chunk
    assert many == nbytes([logits]) * 20 // 2 + 2 * per_chunk * config.vocab_size * 4  # the chunk's float32 copy too
    span = 16
    assert estimate["graph check"] == 2 * nbytes([b[:, :, :span] for b in (*cache.keys, *cache.values)])


@pytest.mark.parametrize("card_gb, dtype_bytes", [(80, 4), (80, 2), (24, 4), (24, 2)])
def test_the_default_gpu_batch_fits_its_card_with_a_fifth_to_spare(card_gb, dtype_bytes):
    from nmtcli.inference.memory import GB, gpu_batch, search_bytes, worst_case
    from nmtcli.inference.settings import DEVICE_DEFAULTS
    from nmtcli.model.config import ModelConfig

    config = ModelConfig()  # base: 37k vocabulary, d_model 512, 6 layers
    card = card_gb * GB * 0.93  # what a card of that name reports, less the CUDA context
    batch_tokens, sentences = gpu_batch(card)
    if card_gb == 80:
        assert batch_tokens == DEVICE_DEFAULTS["cuda"][0]
    used, longest = worst_case(config, batch_tokens, sentences, dtype_bytes)
    assert used < 0.8 * card, f"{used / GB:.1f} GB for sentences of {longest} tokens"
    # With CUDA graphs the Arena comes to hold at most every class's tensors (each role its largest over the
    # classes, which round batches up), beside one step's logits, the graphs' pool and the graph check.
    step = search_bytes(config, sentences, 1, dtype_bytes=dtype_bytes)
    kept = sum(arena_reserve(config, batch_tokens, sentences, dtype_bytes=dtype_bytes).values())
    assert kept + step["logits"] + step["graph pool"] + step["graph check"] < 0.8 * card, f"{kept / GB:.1f} GB kept"
    # Without the sentence cap, 1-token lines alone would need several cards' worth.
    assert sum(search_bytes(config, batch_tokens // 2, 1, dtype_bytes=dtype_bytes).values()) > 2.5 * card


def test_a_gpu_batch_is_capped_in_sentences_and_the_cap_halves_with_the_tokens():
    from nmtcli.inference.batches import length_sorted_batches

    budget = BatchBudget(10_000, sentences=4)
    batches = list(length_sorted_batches([[5]] * 10, budget))
    assert [len(b) for b in batches] == [4, 4, 2]


# --- the training loss's GPU path -----------------------------------------------------------------


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_loss_of_a_gpu_batch_weighting_rows_by_a_mask_equals_the_full_loss(monkeypatch, precision):
    # On a GPU without the token count, padded rows stay in and are weighted 0 (nothing waits for the
    # device); on a CPU they are dropped. Large logits (a sharp model) too: the loss reads log p, not p.
    from reference_loss import label_smoothed_loss

    from nmtcli.training import loss as loss_module

    monkeypatch.setattr(loss_module, "_target_rows", lambda mask, tokens: None)
    monkeypatch.setitem(loss_module.CHUNK_LOGITS, "cpu", 16 * 300)
    torch.manual_seed(4)
    hidden = (torch.randn(70, 32) * 3).requires_grad_()
    weight = (torch.randn(300, 32) * 2).requires_grad_()
    bias = torch.randn(300, requires_grad=True)
    target = torch.randint(4, 300, (70,))
    target[50:] = 0
    leaves = (hidden, weight, bias)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    results = []
    for fused in (True, False):
        with autocast:
            if fused:
                loss, nll = loss_module.output_loss(hidden, weight, bias, target, 0.1, pad_id=0)
            else:
                loss, nll = label_smoothed_loss(F.linear(hidden, weight, bias), target, 0.1, pad_id=0)
        (loss * 0.5).backward()
        results.append((loss.detach(), nll, *(t.grad.clone() for t in leaves)))
        for t in leaves:
            t.grad = None
    tolerance = {"rtol": 1e-5, "atol": 1e-4} if precision == "fp32" else {"rtol": 2e-2, "atol": 2e-2}
    assert results[1][0] > 1000  # sharp: some tokens cost far more than log V
    for ours, reference in zip(*results):
        torch.testing.assert_close(ours.float(), reference.float(), **tolerance)
    assert torch.all(results[0][2][50:] == 0)  # padding gets no gradient


def _loss_and_gradients(loss_fn, precision: str, rows: int = 70):
    """(loss, nll, d hidden, d weight, d bias) of a sharp GPU batch (rows weighted by their mask) under `precision`."""
    torch.manual_seed(4)
    hidden = (torch.randn(rows, 32) * 3).requires_grad_()
    weight = (torch.randn(300, 32) * 2).requires_grad_()
    bias = torch.randn(300, requires_grad=True)
    target = torch.randint(4, 300, (rows,))
    target[rows * 5 // 7 :] = 0
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
        loss, nll = loss_fn(hidden, weight, bias, target)
    (loss * 0.5).backward()
    return loss.detach(), nll, hidden.grad, weight.grad, bias.grad


def test_the_fused_loss_makes_one_graph_for_any_number_of_rows(monkeypatch):
    # FUSED "on": chunk_terms compiled as on a GPU (static vocabulary, symbolic rows), here with a backend
    # that counts graphs and runs them eagerly. Every batch's last chunk has other rows: still one graph,
    # and one more for a chunk of one row (dynamo specializes a size of 1).
    from torch._dynamo.testing import CompileCounter

    from nmtcli.training import loss as loss_module

    counter = CompileCounter()
    monkeypatch.setattr(loss_module, "COMPILE_BACKEND", counter)
    monkeypatch.setattr(loss_module, "_compiled_chunk_terms", None)
    monkeypatch.setattr(loss_module, "_target_rows", lambda mask, tokens: None)
    monkeypatch.setitem(loss_module.CHUNK_LOGITS, "cpu", 16 * 300)
    torch._dynamo.reset()
    for rows in (70, 37, 51, 66, 17):
        monkeypatch.setattr(loss_module, "FUSED", "off")
        eager = _loss_and_gradients(lambda *a: loss_module.output_loss(*a, 0.1, pad_id=0), "fp32", rows)
        monkeypatch.setattr(loss_module, "FUSED", "on")
        fused = _loss_and_gradients(lambda *a: loss_module.output_loss(*a, 0.1, pad_id=0), "fp32", rows)
        for ours, reference in zip(fused, eager):
            torch.testing.assert_close(ours, reference, rtol=1e-6, atol=1e-5)
    assert counter.frame_count == 2, counter.frame_count  # chunks of 16, 6, 5, 3, 2 rows; then of 1 row (17)
    monkeypatch.setattr(loss_module, "FUSED", "sometimes")
    from nmtcli.errors import NmtError

    with pytest.raises(NmtError, match="NMT_FUSED_LOSS is 'sometimes'") as error:  # a user's setting: one line, exit 2
        _loss_and_gradients(lambda *a: loss_module.output_loss(*a, 0.1, pad_id=0), "fp32")
    assert error.value.exit_code == 2
    torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_fused_loss_compiled_by_inductor_equals_the_full_loss(monkeypatch, precision):
    """The GPU's fused loss through inductor (its CPU code generator: the same graph, C++ instead of Triton)
    against the loss over full logits, with the tolerances of the eager path."""
    from reference_loss import label_smoothed_loss

    from nmtcli.training import loss as loss_module

    monkeypatch.setattr(loss_module, "FUSED", "on")
    monkeypatch.setattr(loss_module, "_compiled_chunk_terms", None)
    monkeypatch.setattr(loss_module, "_target_rows", lambda mask, tokens: None)
    monkeypatch.setitem(loss_module.CHUNK_LOGITS, "cpu", 16 * 300)
    torch._dynamo.reset()
    fused = _loss_and_gradients(lambda *a: loss_module.output_loss(*a, 0.1, pad_id=0), precision)
    full = _loss_and_gradients(lambda h, w, b, t: label_smoothed_loss(F.linear(h, w, b), t, 0.1, pad_id=0), precision)
    tolerance = {"rtol": 1e-5, "atol": 1e-4} if precision == "fp32" else {"rtol": 2e-2, "atol": 2e-2}
    for ours, reference in zip(fused, full):
        torch.testing.assert_close(ours.float(), reference.float(), **tolerance)
    assert torch.all(fused[2][50:] == 0)  # padding gets no gradient
    torch._dynamo.reset()


# --- the step's normaliser compiled (issue 33) -----------------------------------------------------------


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_the_compiled_normalizer_makes_one_graph_for_any_rows_and_the_search_keeps_its_translations(monkeypatch, dtype):
    # FUSED "on": the step's row normaliser compiled as on a GPU (static vocabulary, symbolic rows), here with a
    # backend that counts graphs and runs them eagerly, inside beam and greedy searches (inference mode, bf16
    # autocast: how a GPU searches). Batches of every size share one graph, and one more for a single row.
    from torch._dynamo.testing import CompileCounter

    from nmtcli.inference import outputs
    from nmtcli.inference.greedy import greedy_search

    counter = CompileCounter()
    monkeypatch.setattr(outputs, "COMPILE_BACKEND", counter)
    monkeypatch.setattr(outputs, "_compiled_row_terms", None)
    torch._dynamo.reset()
    model = tiny_model(8, vocab_size=300)
    if dtype == "bf16":
        to_half(model, "bf16")
    results = {}
    for fused in ("off", "on"):
        monkeypatch.setattr(outputs, "FUSED", fused)
        with autocast(torch.device("cpu"), dtype):
            results[fused] = ([beam_search(model, _batch(SENTENCES[:n]), beam=4, nbest=2) for n in (5, 3)],
                              greedy_search(model, _batch(SENTENCES), max_len_b=6), beam_search(model, _batch([[9]]), beam=1))
    eager, compiled = results["off"], results["on"]
    for ours, reference in zip([*compiled[0], compiled[1], compiled[2]], [*eager[0], eager[1], eager[2]]):
        assert [[h.tokens for h in s] for s in ours] == [[h.tokens for h in s] for s in reference]
        for a, b in zip(ours, reference):
            assert [h.log_prob for h in a] == pytest.approx([h.log_prob for h in b], abs=1e-5)
    assert counter.frame_count == 2, counter.frame_count  # rows of every batch; a single row (beam 1, one line)
    monkeypatch.setattr(outputs, "FUSED", "sometimes")
    from nmtcli.errors import NmtError

    with pytest.raises(NmtError, match="NMT_FUSED_NORMALIZER is 'sometimes'") as error:  # a user's setting: one line, exit 2
        outputs.log_normalizer(torch.zeros(2, 5))
    assert error.value.exit_code == 2
    torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_normalizer_compiled_by_inductor_gives_log_softmax_within_float_rounding(monkeypatch, dtype):
    """The GPU's compiled normaliser through inductor (its CPU code generator: the same graph, C++ instead of
    Triton), in inference mode as a search runs it, against log_softmax over the whole float32 rows."""
    from nmtcli.inference import outputs

    monkeypatch.setattr(outputs, "FUSED", "on")
    monkeypatch.setattr(outputs, "_compiled_row_terms", None)
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for rows in (37, 12):
            logits = (torch.randn(rows, 3000, generator=g) * torch.linspace(0.05, 12, rows)[:, None] + 3).to(dtype)
            normalizer = outputs.log_normalizer(logits)
            torch.testing.assert_close(outputs.log_probs_of(logits, normalizer), torch.log_softmax(logits.float(), -1),
                                       rtol=0, atol=1e-5)
    torch._dynamo.reset()


# --- the varlen kernel under --compile ------------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_varlen():
    """PyTorch's varlen attention ops (CUDA kernels only) with CPU kernels for this process: the kernel's
    contract (tests/test_model.py: reference_varlen_attention) sequence by sequence. TorchDynamo traces
    the ops through their own fake kernels, as on a GPU."""
    import torch.nn.attention.varlen as varlen

    def sequences(cu_q, cu_k):
        for i in range(len(cu_q) - 1):
            yield slice(int(cu_q[i]), int(cu_q[i + 1])), slice(int(cu_k[i]), int(cu_k[i + 1]))

    def probabilities(q, k, causal):  # (h, Lq, d_k), (h, Lk, d_k) -> softmax(Q K^T / sqrt(d_k)) (sec. 3.2.1)
        scores = q @ k.transpose(1, 2) * q.size(-1) ** -0.5
        if causal:
            scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
        return scores.softmax(-1)

    def forward(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, *rest):
        out = torch.zeros_like(query)
        for qs, ks in sequences(cu_seq_q, cu_seq_k):
            q, k, v = (t.transpose(0, 1) for t in (query[qs], key[ks], value[ks]))
            out[qs] = (probabilities(q, k, is_causal) @ v).transpose(0, 1)
        return out, torch.zeros(query.size(1), query.size(0)), torch.zeros(2, dtype=torch.uint64)

    def backward(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, is_causal, *rest):
        # A kernel runs below autograd: the attention's gradient by hand. Key rows past the real ones: 0.
        dq, dk, dv = torch.zeros_like(query), torch.zeros_like(key), torch.zeros_like(value)
        for qs, ks in sequences(cu_seq_q, cu_seq_k):
            q, k, v, do = (t.transpose(0, 1) for t in (query[qs], key[ks], value[ks], grad_out[qs]))
            p = probabilities(q, k, is_causal)
            dp = do @ v.transpose(1, 2)
            ds = p * (dp - (dp * p).sum(-1, keepdim=True)) * q.size(-1) ** -0.5
            dq[qs], dk[ks], dv[ks] = ((ds @ k).transpose(0, 1), (ds.transpose(1, 2) @ q).transpose(0, 1),
                                      (p.transpose(1, 2) @ do).transpose(0, 1))
        return dq, dk, dv

    varlen._varlen_attn.register_kernel("cpu")(forward)
    varlen._varlen_attn_backward.register_kernel("cpu")(backward)


def wmt_shaped_batches(count: int, seed: int = 0):
    """(src, tgt_in) batches of 2,000 padded tokens, sentence lengths drawn like WMT's (log-normal, median ~22
    tokens, a long tail), targets about as long as their sources, lengths padded to the compile buckets."""
    import random

    from nmtcli.data.batching import collate
    from nmtcli.training import compiling
    from nmtcli.training.loader import pad_lengths

    rng = random.Random(seed)
    for _ in range(count):
        longest = min(120, max(2, round(rng.lognormvariate(3.1, 0.55))))
        rows = max(1, 400 // longest)
        src = [torch.randint(4, 100, (rng.randint(1, longest),)).numpy() for _ in range(rows)]
        tgt = [torch.randint(4, 100, (max(1, round(len(s) * rng.uniform(0.8, 1.25))),)).numpy() for s in src]
        batch = pad_lengths(collate(src, tgt), compiling.bucket_length)
        yield batch.src, batch.tgt_in


def test_compiled_layers_with_packed_attention_make_two_graphs_no_break_and_eager_gradients(cpu_varlen, monkeypatch):
    import copy

    from torch._dynamo.testing import CompileCounter
    from torch._dynamo.utils import counters

    from nmtcli.model import packed_attention
    from nmtcli.model.config import PRESETS
    from nmtcli.model.transformer import Transformer
    from nmtcli.training import compiling

    torch._dynamo.reset()
    counters.clear()
    counter = CompileCounter()
    monkeypatch.setattr(compiling, "BACKEND", counter)
    monkeypatch.setattr(packed_attention, "applies", lambda attention, x: True)  # the GPU's bf16 training path
    monkeypatch.setattr(packed_attention, "VARLEN_ATTENTION", packed_attention._load_varlen())
    torch.manual_seed(0)
    eager = Transformer(PRESETS["tiny"].replace(vocab_size=100, layers=2, dropout=0.0, attention_dropout=0.0))
    compiled = copy.deepcopy(eager)
    compiling.compile_layers(compiled)
    shapes = set()
    for src, tgt_in in wmt_shaped_batches(6):
        shapes.add((*src.shape, tgt_in.size(1)))
        for model in (eager, compiled):
            model.zero_grad()
            model(src, tgt_in, hidden=True).square().mean().backward()
        for (name, a), b in zip(eager.named_parameters(), compiled.parameters()):
            torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=name)
    assert len(shapes) == 6
    assert counter.frame_count == 2, f"{counter.frame_count} graphs (recompiles) for {len(shapes)} shapes"
    assert not counters["graph_break"], dict(counters["graph_break"])
    torch._dynamo.reset()


# --- device settings ------------------------------------------------------------------------------


def test_fp32_training_on_a_gpu_multiplies_in_tf32_and_a_cpu_is_left_alone():
    from nmtcli.training.precision import resolve

    backends = (torch.backends.cuda.matmul, torch.backends.cudnn)
    before = [b.fp32_precision for b in backends]
    try:
        for b in backends:
            b.fp32_precision = "ieee"
        resolve("fp32", torch.device("cpu"))
        assert [b.fp32_precision for b in backends] == ["ieee", "ieee"]
        resolve("fp32", torch.device("cuda", 1))  # resolving fp32 asks nothing of the GPU itself
        assert [b.fp32_precision for b in backends] == ["tf32", "tf32"]
    finally:
        for b, value in zip(backends, before):
            b.fp32_precision = value


def test_a_search_on_cuda_n_makes_n_the_current_device():
    from nmtcli.device import on_device

    context = on_device(torch.device("cuda", 2))
    assert isinstance(context, torch.cuda.device) and context.idx == 2
    assert not isinstance(on_device(torch.device("cpu")), torch.cuda.device)


def test_a_captured_step_moves_each_key_and_value_once(positions_agree):
    # The reorder of a fixed-span step selects rows from one set of buffers into the other (no temporary
    # copied back), so the sets take turns and each span gets a graph per set.
    from torch.utils._python_dispatch import TorchDispatchMode

    from nmtcli.inference.beam import BeamSearch

    class Writes(TorchDispatchMode):
        def __init__(self, buffers):
            super().__init__()
            self.buffers, self.calls = {b.data_ptr() for b in buffers}, []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = kwargs.get("out", args[0] if args and func._schema.is_mutable else None)
            if isinstance(out, torch.Tensor) and out.untyped_storage().data_ptr() in self.buffers:
                self.calls.append(func.__name__.split(".")[0])
            return func(*args, **kwargs)

    model = tiny_model(8, vocab_size=30)
    with torch.inference_mode():
        search = BeamSearch(model, _batch(SENTENCES), 4, 0.6, 0.0, 30, 1, "gnmt", 0)
        search.step()
        cache = search.state.cache
        cache.clear_unwritten()
        cache.fixed_span = 16
        first = cache.keys[0].data_ptr()
        buffers = [b for sets in (cache._buffers, cache._spare) for kv in sets for b in kv]
        with Writes(buffers) as writes:
            search.step()
        assert cache.keys[0].data_ptr() != first
        search.step()
        assert cache.keys[0].data_ptr() == first
    layers = model.config.layers
    assert sorted(writes.calls) == sorted(["index_copy_"] * 2 * layers + ["index_select"] * 2 * layers), writes.calls
    recorder = Recorder()
    _search_lines(recorder)
    assert recorder.recorded <= 2 * 4 * 3  # at most two graphs per span of 4 (spans 4 to 16) for each of 3 generations


# --- graphs recorded once per shape class -----------------------------------------------------------


def _wmt_shaped_windows(windows: int = 3, lines: int = 40) -> list[list[list[int]]]:
    """Windows of token lines with newstest's length shape (log-normal, median ~14 here, a long tail),
    scaled down for a tiny model; a few empty lines among them."""
    g = torch.Generator().manual_seed(19)
    out = []
    for _ in range(windows):
        lengths = torch.empty(lines).log_normal_(2.6, 0.6, generator=g).clamp(max=60).long().tolist()
        out.append([torch.randint(3, 30, (n,), generator=g).tolist() for n in lengths])
    return out


def _translate_stream(windows, graphs=None, settings=SearchSettings(beam=4, nbest=2, max_len_a=0.25, max_len_b=4)):
    model = tiny_model(8, vocab_size=30)
    budget = BatchBudget(240, sentences=16)  # a GPU's budget in tokens and sentences, scaled down: several batches a window
    warnings = []
    lines = [_as_lists(translate_ids(model, w, settings, budget, torch.device("cpu"), graphs=graphs, warn=warnings.append))
             for w in windows]
    return lines, warnings, budget


def _same_translations(ours, theirs) -> bool:
    """Equal n-best tokens, scores equal to float tolerance: a class pads a batch's source and sentences,
    which changes the order of the sums in the matrix products (the search itself is the same)."""
    flat = lambda lines: [h for window in lines for line in window for h in line]  # noqa: E731
    a, b = flat(ours), flat(theirs)
    return len(a) == len(b) and all(x[0] == y[0] and abs(x[1] - y[1]) < 2e-4 and abs(x[2] - y[2]) < 2e-4 for x, y in zip(a, b)) \
        and [[len(line) for line in w] for w in ours] == [[len(line) for line in w] for w in theirs]


@pytest.fixture(scope="module")
def stream():
    windows = _wmt_shaped_windows()
    return windows, _translate_stream(windows)[0]


@pytest.mark.parametrize("beam_cache", ["reorder", "slots"])
def test_a_graph_is_recorded_once_per_shape_class_and_replayed_by_every_later_batch(monkeypatch, positions_agree, stream, beam_cache):
    # slots: the cache read through slots (model/beam_attention.py, its twin on a CPU) is never reordered.
    monkeypatch.setenv("NMT_BEAM_CACHE", beam_cache)
    windows, eager = stream
    visits = []  # (search, class, Arena version) of every graphed step: a search per batch, a new class when sentences leave
    searches_seen = []  # every search, kept alive: numbered by its place here (an id() could be reused once one is freed)

    def number(search) -> int:
        known = next((k for k, s in enumerate(searches_seen) if s is search), None)
        if known is None:
            searches_seen.append(search)
            return len(searches_seen) - 1
        return known

    step, record = StepGraphs.step, StepGraphs._record
    monkeypatch.setattr(StepGraphs, "step", lambda self, search: (visits.append((number(search), search.class_key(), self.arena.version)),
                                                                  step(self, search))[1])
    captures = []  # (class, span, set of decoder buffers) of every capture
    monkeypatch.setattr(StepGraphs, "_record", lambda self, search: (captures.append(
        (search.class_key(), search.state.cache.fixed_span, search.state.cache.keys[0].data_ptr())), record(self, search))[1])
    recorder = Recorder()
    graphs = StepGraphs(bucket=4, backend=recorder)
    lines, warnings = [], []
    for window in windows:
        first, captured = len(visits), len(captures)
        window_lines, window_warnings, _ = _translate_stream([window], graphs)
        lines += window_lines
        warnings += window_warnings
        # The Arena was sized for the whole window before its first batch: no batch of it made a buffer larger
        # (which would have dropped the graphs), and each (class, span, buffer set) was recorded once.
        assert len({version for _, _, version in visits[first:]}) == 1
        assert len(set(captures[captured:])) == len(captures) - captured
    assert _same_translations(lines, eager) and warnings == []
    searches, classes = len({s for s, _, _ in visits}), {c for _, c, _ in visits}
    assert searches >= 9 and len({(s, c) for s, c, _ in visits}) > len(classes), "the stream never comes back to a class: it tests no reuse"
    # Across windows a graph is recorded again only after a later window's larger class made the Arena grow.
    assert recorder.recorded == len(graphs.recorded_keys) + graphs.dropped and {key[0] for key in graphs.recorded_keys} <= classes
    assert recorder.replayed > recorder.recorded
    # The Arena grew with the classes that came, never past what the budget's largest class needs.
    config = tiny_model(8, vocab_size=30).config
    reserve = arena_reserve(config, 240, 16, 4, 2, 4, 0.25, 4, 4, slots=beam_cache == "slots")  # each role's largest over the budget's classes
    assert set(graphs.arena._flat) == set(reserve) and graphs.arena.nbytes <= sum(reserve.values())
    if beam_cache == "slots":  # one graph a class: one span (the capacity), one set of buffers
        assert len(graphs.recorded_keys) == len({key[0] for key in graphs.recorded_keys})
    held, version, dropped = graphs.arena.nbytes, graphs.arena.version, graphs.dropped
    # The same stream again takes no memory and drops no graph (it records those dropped before, and those of
    # shapes that were only warmed up); a third time it records nothing: every class has its graphs.
    assert _same_translations(_translate_stream(windows, graphs)[0], eager)
    assert graphs.arena.nbytes == held and graphs.arena.version == version and graphs.dropped == dropped
    recorded = recorder.recorded
    assert _same_translations(_translate_stream(windows, graphs)[0], eager) and recorder.recorded == recorded
    assert graphs.arena.nbytes == held and graphs.arena.version == version


def test_graphs_stay_on_when_a_longer_window_makes_the_arena_grow(positions_agree):
    # Issue 33: when a larger class made the Arena grow, every graph was let go but their pool's handle was
    # kept; the next capture named a pool whose graphs had all died, PyTorch's allocator failed an internal
    # assert, and graphs were off for the rest of every GPU run.
    short = [line for line in SENTENCES if len(line) <= 3]  # small classes: the Arena is sized for them
    longer = [[3 + (7 * i + j) % 26 for j in range(12 + i)] for i in range(12)]  # more and longer lines: it grows
    recorder, off = Recorder(), []
    graphs = StepGraphs(bucket=4, backend=recorder, warn=off.append)
    lines, warnings, _ = _translate_stream([short, longer], graphs)
    eager, _, _ = _translate_stream([short, longer])
    assert off == [] and warnings == [] and graphs.enabled
    assert graphs.dropped > 0 and recorder.recorded > graphs.dropped, "the Arena never grew after graphs were recorded"
    assert _same_translations(lines, eager)
    live = [count for count in recorder.use_count.values() if count]
    assert live == [len(graphs.recorded_keys)]  # the graphs held all hold one pool, the ones let go none


@pytest.mark.parametrize("spec", ["graph-oom:capture:3", "graph-oom:replay:30", "graph-error:capture:3"])
def test_a_graph_that_failed_is_never_replayed_and_the_stream_loses_no_line(monkeypatch, positions_agree, stream, spec):
    windows, eager = stream
    _fault(monkeypatch, spec)
    recorder, off = Recorder(), []
    graphs = StepGraphs(bucket=4, backend=recorder, warn=off.append)
    lines, warnings, budget = _translate_stream(windows, graphs)
    warnings += off
    assert _same_translations(lines, eager) and len(warnings) == 1
    if spec.startswith("graph-oom"):  # graphs and Arena let go, the batch halved, graphs on and recorded again
        assert warnings[0].startswith("out of memory") and budget.tokens < 240 and graphs.enabled and recorder.released >= 1
        held = recorder.recorded - (1 if "capture" in spec else 0)  # the failed capture's graph is not kept
        assert len(graphs.recorded_keys) <= held and recorder.replayed > 0
    else:
        assert warnings[0].startswith("CUDA graphs are off") and not graphs.enabled and not graphs.recorded_keys


def test_prefixes_in_shape_classes_equal_the_eager_search(positions_agree, stream):
    windows, _ = stream
    window = windows[0]
    eos = tiny_model(8, vocab_size=30).config.eos_id
    prefixes = [[t for t in line if t != eos][: i % 4] for i, line in enumerate(window)]  # none, or 1 to 3 tokens
    model = tiny_model(8, vocab_size=30)
    settings = SearchSettings(beam=4, nbest=2, max_len_a=0.25, max_len_b=4)

    def run(graphs):
        return [_as_lists(translate_ids(model, window, settings, BatchBudget(240, sentences=16), torch.device("cpu"), graphs=graphs,
                                        prefixes=prefixes))]

    recorder = Recorder()
    graphs = StepGraphs(bucket=4, backend=recorder)
    lines = run(graphs)
    assert _same_translations(lines, run(None)) and recorder.recorded == len(graphs.recorded_keys) + graphs.dropped and recorder.replayed
    assert all(h[0][: len(p)] == p for line, p in zip(lines[0], prefixes) for h in line)
    assert graphs.arena.nbytes and "prefix" in graphs.arena._flat


# --- the Arena holds what the classes that came need, and nothing after running out of memory ---------


def _class_bytes(config, lines, settings, cap=16, dtype_bytes=4):
    """Bytes by role of the shape class `lines` are searched in as one batch (bucket 4)."""
    shape = shape_class(config, len(lines), max(map(len, lines)) + 1, 0, settings.max_len_a, settings.max_len_b, 4, cap)
    return arena_bytes(config, *shape, settings.beam, settings.nbest, dtype_bytes=dtype_bytes)


def test_the_arena_grows_to_the_classes_that_come_not_to_the_worst_case_of_their_settings(positions_agree):
    model = tiny_model(8, vocab_size=30)
    graphs = StepGraphs(bucket=4, backend=Recorder())
    large = SearchSettings(beam=4, nbest=2, max_len_b=7)
    runs = [(SENTENCES * 2, large), (SENTENCES[:1], large),  # a large batch, then a line: nothing grows
            (SENTENCES[:1], SearchSettings(beam=8, nbest=1, max_len_b=7)),  # a request's larger beam
            (SENTENCES[:1], SearchSettings(beam=2, nbest=2, max_len_b=60))]  # a request's longer outputs
    held: dict[str, int] = {}
    for i, (lines, settings) in enumerate(runs):
        version = graphs.arena.version
        translate_ids(model, lines, settings, BatchBudget(1000, sentences=16), torch.device("cpu"), graphs=graphs)
        for role, size in _class_bytes(model.config, lines, settings).items():
            held[role] = max(held.get(role, 0), size)
        assert graphs.arena.nbytes == sum(held.values()), i
        if i == 1:
            assert graphs.arena.version == version  # the line's class is the front of the large batch's
    worst = arena_reserve(model.config, 1000, 16, 8, 2, 4, 1.0, 60, 4)
    assert graphs.arena.nbytes < sum(worst.values()) / 4


def test_a_window_sizes_the_arena_once_for_its_batches_largest_classes(monkeypatch, positions_agree, stream):
    from nmtcli.inference.batches import length_sorted_batches

    windows, _ = stream
    model = tiny_model(8, vocab_size=30)
    settings = SearchSettings(beam=4, nbest=2, max_len_a=0.25, max_len_b=4)
    batches = [[ids for _, ids in batch] for batch in length_sorted_batches(windows[0], BatchBudget(240, sentences=16))]
    need: dict[str, int] = {}
    for lines in batches:
        for role, size in _class_bytes(model.config, lines, settings).items():
            need[role] = max(need.get(role, 0), size)
    # No one batch needs all of it (the first has the most sentences, the last the longest lines): sized ahead,
    # not by taking the largest batch first.
    assert len(batches) > 2 and all(_class_bytes(model.config, lines, settings) != need for lines in batches)
    held = []  # the Arena's bytes at every graphed step
    step = StepGraphs.step
    monkeypatch.setattr(StepGraphs, "step", lambda self, search: (held.append(self.arena.nbytes), step(self, search))[1])
    graphs = StepGraphs(bucket=4, backend=Recorder())
    translate_ids(model, windows[0], settings, BatchBudget(240, sentences=16), torch.device("cpu"), graphs=graphs)
    assert set(held) == {sum(need.values())} and graphs.dropped == 0


def test_under_bf16_autocast_the_arena_holds_bf16_sizes(positions_agree):
    model = tiny_model(8, vocab_size=30)
    graphs = StepGraphs(bucket=4, backend=Recorder())
    settings = SearchSettings(beam=4, nbest=2, max_len_b=7)
    translate_ids(model, SENTENCES, settings, BatchBudget(1000, sentences=16), torch.device("cpu"),
                  autocast=lambda: autocast(torch.device("cpu"), "bf16"), graphs=graphs)
    assert graphs.arena.nbytes == sum(_class_bytes(model.config, SENTENCES, settings, dtype_bytes=2).values())
    assert {key[0][-1] for key in graphs.recorded_keys} == {torch.bfloat16}  # a graph's key has its dtype


def test_a_single_line_out_of_memory_with_graphs_is_searched_again_without_them(monkeypatch, positions_agree):
    model = tiny_model(8, vocab_size=30)
    settings = SearchSettings(beam=4, nbest=2, max_len_b=7)
    eager = _as_lists(translate_ids(model, SENTENCES[1:2], settings, BatchBudget(1000), torch.device("cpu")))
    recorder, warnings = Recorder(), []
    graphs = StepGraphs(bucket=4, backend=recorder)
    translate_ids(model, SENTENCES, settings, BatchBudget(1000), torch.device("cpu"), graphs=graphs)
    assert graphs.arena.nbytes
    _fault(monkeypatch, "graph-oom:warm-up:1")
    graphs.warmed_up = 0  # warm up again, where the fault strikes
    lines = _as_lists(translate_ids(model, SENTENCES[1:2], settings, BatchBudget(1000), torch.device("cpu"), graphs=graphs,
                                    warn=warnings.append))
    assert lines == eager and len(warnings) == 1 and "searching it again without them" in warnings[0]
    assert graphs.arena.nbytes == 0 and not graphs.recorded_keys and graphs.enabled and recorder.released >= 1


def test_after_running_out_of_memory_the_arena_holds_nothing(monkeypatch, positions_agree):
    from nmtcli.errors import NmtError

    model = tiny_model(8, vocab_size=30)
    settings = SearchSettings(beam=4, nbest=2, max_len_b=7)
    graphs = StepGraphs(bucket=4, backend=Recorder())
    translate_ids(model, SENTENCES, settings, BatchBudget(1000), torch.device("cpu"), graphs=graphs)
    assert graphs.arena.nbytes
    _fault(monkeypatch, "oom-above:0")  # every batch, the retry without graphs too
    with pytest.raises(NmtError, match="out of memory translating a single line"):
        translate_ids(model, SENTENCES[:1], settings, BatchBudget(1000), torch.device("cpu"), graphs=graphs)
    assert graphs.arena.nbytes == 0 and not graphs.recorded_keys


# --- one training step on the GPU's path: host syncs, casts, the optimizer ------------------------

# Ops whose result the host must wait for: a value read back (.item(), bool(), .tolist()), or an output
# whose size depends on the values (nonzero, masked_select, boolean indexing, unique, ...).
HOST_SYNCS = {"_local_scalar_dense", "item", "is_nonzero", "nonzero", "masked_select", "equal", "unique",
              "_unique", "_unique2", "unique_consecutive", "unique_dim", "bincount", "repeat_interleave", "allclose"}


def _step_ops_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        """Every aten op of a block: the host syncs, the dtype casts (`_to_copy`, `copy_` and foreach copies
        that change a dtype; a foreach copy counts once, it is one kernel), and the ops by name. Casts inside
        the loss's `chunk_terms` are counted apart: compiled on a GPU, they are part of its one kernel."""

        def __init__(self):
            super().__init__()
            self.ops: dict[str, int] = {}
            self.syncs: list[str] = []
            self.casts: list[str] = []
            self.fused_casts: list[str] = []
            self.in_fused = False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.overloadpacket.__name__
            self.ops[name] = self.ops.get(name, 0) + 1
            out = func(*args, **kwargs)
            if name in HOST_SYNCS:
                self.syncs.append(name)
            cast = None
            if name == "_to_copy":
                if out.device != args[0].device:
                    self.syncs.append(f"_to_copy to {out.device}")
                if out.dtype != args[0].dtype:
                    cast = f"_to_copy {args[0].dtype}->{out.dtype} {tuple(out.shape)}"
            elif name == "copy_" and args[0].dtype != args[1].dtype:
                cast = f"copy_ {args[1].dtype}->{args[0].dtype} {tuple(args[0].shape)}"
            elif name == "_foreach_copy_" and any(a.dtype != b.dtype for a, b in zip(args[0], args[1])):
                cast = f"_foreach_copy_ {args[1][0].dtype}->{args[0][0].dtype} x{len(args[0])}"
            if cast:
                (self.fused_casts if self.in_fused else self.casts).append(cast)
            return out

    return Recorder()


@pytest.fixture
def gpu_step(cpu_varlen, monkeypatch, prepared, tmp_path):
    """step(precision, layers) -> the Recorder of one steady training step (the second: the first makes
    Adam's state) of a d_model 64 model, through the GPU's code path on the CPU: packed attention through
    the varlen op (cpu_varlen), the loss's rows found without a wait (`first_true`), the loss's chunk terms
    as `FUSED` runs them on a CPU (eagerly; the recorder sees them apart)."""
    from nmtcli.model import packed_attention
    from nmtcli.training import loss as loss_module
    from nmtcli.training.loader import StepLoader
    from nmtcli.training.settings import train_settings_for
    from nmtcli.training.trainer import Trainer

    monkeypatch.setattr(packed_attention, "applies", lambda attention, x: True)
    monkeypatch.setattr(packed_attention, "VARLEN_ATTENTION", packed_attention._load_varlen())
    monkeypatch.setattr(loss_module, "_target_rows", lambda mask, tokens: loss_module.first_true(mask, tokens))
    chunk_terms = loss_module.chunk_terms

    def step(precision: str, layers: int = 2):
        recorder = _step_ops_mode()

        def fused(*args):
            recorder.in_fused = True
            try:
                return chunk_terms(*args)
            finally:
                recorder.in_fused = False

        monkeypatch.setattr(loss_module, "chunk_terms", fused)
        config, settings = train_settings_for("tiny", max_steps=2, batch_tokens=300, device="cpu", precision=precision)
        config = config.replace(d_model=64, d_ff=256, heads=4, layers=layers)
        trainer = Trainer(tmp_path / f"{precision}-{layers}", prepared, config, settings)
        loader = StepLoader(trainer.stream, 1, 0, 1, trainer.device)
        try:
            trainer.train_step(next(loader))
            batches = next(loader)
            with recorder:
                trainer.train_step(batches)
        finally:
            loader.close()
        return recorder

    return step


def test_a_bf16_master_step_on_the_gpu_path_waits_for_nothing_casts_little_and_steps_adam_once(gpu_step):
    with _step_ops_mode() as probe:  # what the recorder calls a wait: a value read back, a size from values
        torch.arange(3).nonzero()
        float(torch.ones(()))
    assert probe.syncs == ["nonzero", "_local_scalar_dense"]
    ops = gpu_step("bf16-master")
    assert ops.syncs == []
    assert ops.ops.get("_fused_adam_") == 1 and ops.ops.get("_varlen_attn", 0) > 0
    # No weight is cast per use: the gradients go into the masters and the masters into the bf16 weights in
    # one foreach copy each. The loss casts a vector (eps / V sum_v W_v), per chunk (one here) the weight's
    # gradient product into its float32 sum and the rows' g h for its index_add, and once the sum back to
    # bf16. The one left is the loss's sort of its rows, which takes uint8; the packed attention finds its keys
    # by counts, in the dtypes the varlen kernel takes (model/packed_attention.py key_order), once per layer and
    # without a cast.
    floating = [c for c in ops.casts if "bfloat16" in c]
    assert len(ops.casts) == 7 and len(floating) == 6, ops.casts
    assert sum(c.startswith("_foreach_copy_") for c in ops.casts) == 2
    assert len(ops.fused_casts) == 2, ops.fused_casts  # bf16 logits -> float32 softmax -> bf16: in its one kernel
    assert len(gpu_step("bf16-master", layers=3).casts) == 7  # none per layer
    # bf16 autocast, the same step: 7 + 61 per encoder and decoder layer (129 here, 373 for base's 6).
    autocast = gpu_step("bf16")
    assert autocast.syncs == [] and autocast.ops.get("_fused_adam_") == 1
    assert len(autocast.casts) > 10 * len(ops.casts), len(autocast.casts)

# --- the training step as CUDA graphs (training/graphs.py), recorded op by op ----------------------


class Tape:
    """CUDA graphs as a CPU can have them, op by op, for the training step (its batches and its update).

    A capture runs the part under a dispatch mode that records every aten op with its arguments, then puts back
    every tensor that existed before it (a real capture runs nothing on the device; the CPU's random state too).
    A replay runs the recorded ops again and nothing of the part's Python: tensors that existed before the capture
    are the same tensors (a graph's kernels hold their addresses), and they must still be alive, where they were
    and of the same shape; tensors the capture made are the pool's and are made again by each replay; Python
    values (a float, a shape, a count of rows) are the capture's, as a graph's kernel arguments are. So a step
    that reads a Python value that changes from batch to batch, or gives a tensor a new address, goes wrong here
    as it would on a GPU. A value read back to the host inside a capture fails it, as on a GPU (and `ops` keeps
    the dispatch-mode checker's record of each capture). Pools and their use counts as `Recorder`'s."""

    def __init__(self):
        self.pool = GraphPool(self._mint)
        self.use_count: dict[int, int] = {}
        self._minted = 0
        self.recorded = self.replayed = self.warmed = 0
        self.ops: list = []  # _step_ops_mode() of each capture, in order

    def _mint(self) -> int:
        self._minted += 1
        return self._minted

    def warm_up(self, part):
        self.warmed += 1
        part()

    def record(self, part):
        return self.pool.record(lambda pool: self._capture(part, pool))

    def _capture(self, part, pool):
        if self.use_count.get(pool, 1) == 0:  # CUDACachingAllocator's beginAllocateToPool
            raise RuntimeError("it->second->use_count > 0 INTERNAL ASSERT FAILED (a capture into a pool whose graphs all died)")
        rng = torch.get_rng_state()
        tape = _taping_mode()
        checker = _step_ops_mode()
        try:
            with checker, tape:
                part()
        finally:
            tape.put_back()
            torch.set_rng_state(rng)
        self.ops.append(checker)
        self.recorded += 1
        self.use_count[pool] = self.use_count.get(pool, 0) + 1
        graph = _TapedGraph(tape.ops)
        weakref.finalize(graph, self._graph_died, pool)
        return graph

    def _graph_died(self, pool):
        self.use_count[pool] -= 1

    def replay(self, graph, owner=None):
        graph.run()
        self.replayed += 1

    def release(self):
        self.pool.release()


def _taping_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Taping(TorchDispatchMode):
        """Records each op as (op, arguments, outputs), a tensor argument as ("made", slot) when an earlier op of the
        capture made it, else as ("kept", weakref, address, shape); keeps a copy of every kept tensor to put back."""

        def __init__(self):
            super().__init__()
            self.ops: list = []
            self.slots: dict[int, int] = {}  # id of a tensor made in the capture -> its slot
            self.made: list = []  # the tensors made in the capture (alive, so that their ids stay theirs)
            self.before: dict[int, tuple] = {}  # id of a kept tensor -> (it, a copy as it was)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = func.overloadpacket.__name__
            if func.namespace == "profiler":  # record_function markers: host bookkeeping, no device work
                return func(*args, **kwargs)
            if name in HOST_SYNCS:
                raise RuntimeError(f"operation not permitted when stream is capturing ({name}: a value read back to the host)")
            spec = pytree.tree_map(self._argument, (args, kwargs))
            out = func(*args, **kwargs)
            slots = []
            for t in pytree.tree_leaves(out):
                if isinstance(t, torch.Tensor) and id(t) not in self.slots and id(t) not in self.before:
                    self.slots[id(t)] = len(self.made)
                    self.made.append(t)
                    slots.append(self.slots[id(t)])
                else:
                    slots.append(None)
            self.ops.append((func, spec, slots))
            return out

        def _argument(self, value):
            if not isinstance(value, torch.Tensor):
                return ("value", value)
            if id(value) in self.slots:
                return ("made", self.slots[id(value)])
            if id(value) not in self.before:
                self.before[id(value)] = (value, value.detach().clone())
            return ("kept", weakref.ref(value), value.data_ptr(), tuple(value.shape))

        def put_back(self):
            with torch.no_grad():
                for kept, copy_ in self.before.values():
                    kept.copy_(copy_)
            self.made.clear()

    return Taping()


class _TapedGraph:
    def __init__(self, ops):
        self.ops = ops

    @torch.no_grad()
    def run(self):
        made: dict[int, torch.Tensor] = {}

        def resolve(spec):
            kind = spec[0]
            if kind == "value":
                return spec[1]
            if kind == "made":
                return made[spec[1]]
            tensor = spec[1]()
            assert tensor is not None, "a graph replayed on a tensor that was freed after its capture"
            assert (tensor.data_ptr(), tuple(tensor.shape)) == spec[2:], "a graph replayed on a tensor that moved"
            return tensor

        for func, spec, slots in self.ops:  # ops as they reached the device, below autograd: no graph is built again
            args, kwargs = pytree.tree_map(resolve, spec, is_leaf=lambda x: isinstance(x, tuple) and len(x) > 0 and x[0] in ("value", "made", "kept"))
            out = func(*args, **kwargs)
            for slot, t in zip(slots, pytree.tree_leaves(out)):
                if slot is not None:
                    made[slot] = t


def _trainer(prepared, run_dir, update_freq: int, precision: str = "fp32", graphs=None, events=None):
    """A 2-layer d_model 64 model's trainer on the prepared data in shape classes; `graphs`: a capture backend for
    --cuda-graphs (None: the eager step)."""
    from nmtcli.training.settings import train_settings_for
    from nmtcli.training.trainer import Trainer

    # Adam's eps 1e-6, not 1e-9: the key projections' biases get no gradient but rounding noise (~1e-10: softmax
    # ignores what is added to a whole row of scores), which eps 1e-9 would make full-size steps of either sign.
    config, settings = train_settings_for("tiny", max_steps=10, batch_tokens=300, device="cpu", precision=precision,
                                          update_freq=update_freq, cuda_graphs=graphs is not None, adam_eps=1e-6)
    config = config.replace(d_model=64, d_ff=128, heads=4, layers=2)  # dropout 0.1, as tiny's
    on_event = (lambda kind, values: events.append((kind, values))) if events is not None else None
    return Trainer(run_dir, prepared, config, settings, shape_classes=True, graph_backend=graphs, on_event=on_event)


def _steps_of_two_classes(trainer, update_freq: int, steps: int):
    """`steps` steps of `update_freq` batches from the stream's two commonest shape classes A and B, in the order
    A B A B ... (one a step) or A B, B A, A B, ... (two a step)."""
    from nmtcli.training.flops import LengthStats
    from nmtcli.training.loader import StepBatches

    stream, data = trainer.stream, trainer.train_data
    by_class: dict = {}
    for _ in range(80):
        indices = stream.next_indices()
        by_class.setdefault(stream.shape(indices), []).append(indices)
    a, b = sorted(by_class, key=lambda shape: -len(by_class[shape]))[:2]
    pattern = ("AB" if update_freq == 1 else "ABBA") * steps
    taken = {"A": iter(by_class[a]), "B": iter(by_class[b])}
    chosen = [next(taken[c]) for c in pattern[: steps * update_freq]]
    result = []
    for k in range(steps):
        mine = chosen[k * update_freq : (k + 1) * update_freq]
        every = np.concatenate(mine)
        batches = [data.batch(indices, stream.shape(indices)) for indices in mine]
        result.append(StepBatches(batches, 0, sum(b.target_tokens for b in batches),
                                  LengthStats.of(data.src.lengths[every], data.tgt.lengths[every]), stream.state_dict()))
    assert len({tuple(b.src.shape) for step in result for b in step.batches}) == 2
    return result


def _same_training(graphed, eager, steps, exactly=None) -> None:
    """The trainers take `steps`; each step's loss and, at the end, every weight agree: bit for bit with `exactly`
    (the graphs' functions run eagerly), to float rounding with `eager` (its loss drops padding rows where the graphs'
    weights them 0, and its learning rate is a Python float where theirs is a float32 tensor). A wrong scale, a stale
    learning rate, a lost batch or other dropout masks would be an update apart: 4e-5 (the first step's lr) or more."""
    start = [p.detach().clone() for p in eager.model.parameters()]
    for step in steps:
        ours = graphed.train_step(step)
        for other in (eager, exactly) if exactly is not None else (eager,):
            theirs = other.train_step(step)
            for key in ("loss_sum", "nll_sum"):
                assert float(ours[key]) == pytest.approx(float(theirs[key]), rel=1e-5), key
    with torch.no_grad():
        moved = max(float((p - s).abs().max()) for p, s in zip(eager.model.parameters(), start))
        apart = max(float((p - q).abs().max()) for p, q in zip(graphed.model.parameters(), eager.model.parameters()))
    assert moved > 4e-4 and apart < 1e-5, (moved, apart)
    if exactly is not None:
        assert all(torch.equal(p, q) for p, q in zip(graphed.model.parameters(), exactly.model.parameters()))


@pytest.mark.parametrize("update_freq", [1, 2])
def test_training_steps_replayed_from_graphs_train_as_the_eager_steps(prepared, tmp_path, update_freq):
    """Two shape classes taking turns, dropout on (each batch's seed is honoured by the replays): a class is warmed up
    at its first batch, captured at its second and replayed from then on, the update likewise, and the weights
    are the eager steps' to float rounding."""
    tape, events = Tape(), []
    graphed = _trainer(prepared, tmp_path / "graphed", update_freq, graphs=tape, events=events)
    eager = _trainer(prepared, tmp_path / "eager", update_freq)
    unrecorded = _trainer(prepared, tmp_path / "unrecorded", update_freq, graphs=Unrecorded())
    steps = _steps_of_two_classes(eager, update_freq, 6 if update_freq == 1 else 4)
    _same_training(graphed, eager, steps, exactly=unrecorded)
    assert [kind for kind, _ in events] == []
    # 1: A, B warmed up / 2: B, A and the update captured (two a step; one a step: A and B at their second batch,
    # the update at the second step) / then replayed.
    assert graphed.graphs.summary() == {"enabled": True, "captured": 3, "warmed_up": 3, "replayed": 9, "off_reason": None}
    assert tape.recorded == 3 and tape.replayed == 9 and tape.warmed == 3


def test_a_captured_training_step_reads_nothing_back_and_steps_adam_once(prepared, tmp_path):
    """bf16 masters, one batch a step: whatever a capture records (the update's, then each class's batch) reads no
    value back to the host; the update is one fused Adam and one foreach copy into the bf16 weights, a batch one
    foreach add into the masters' gradients; and a whole step with graphs (the batch copied in, the seed, the lr,
    the replays) waits for nothing either."""
    tape = Tape()
    trainer = _trainer(prepared, tmp_path / "run", 1, precision="bf16-master", graphs=tape)
    steps = _steps_of_two_classes(trainer, 1, 5)
    for step in steps[:4]:
        trainer.train_step(step)
    with _step_ops_mode() as host:
        trainer.train_step(steps[4])  # every part replayed
    update, *batches = tape.ops
    assert len(batches) == 2 and trainer.graphs.enabled
    assert [ops.syncs for ops in tape.ops] == [[], [], []] and host.syncs == []
    assert update.ops.get("_fused_adam_") == 1 and [ops.ops.get("_fused_adam_", 0) for ops in batches] == [0, 0]
    assert update.casts == ["_foreach_copy_ torch.float32->torch.bfloat16 x" + str(len(trainer.graphs.grads))]
    for ops in batches:  # the gradients into the masters: one foreach add (and no per-parameter op)
        assert ops.ops.get("_foreach_add_") == 1 and ops.ops.get("_foreach_zero_") == 1


@pytest.mark.parametrize("failure", ["graph-error:capture:2", "graph-oom:capture:1", "a value read back"])
def test_a_capture_that_fails_warns_once_and_training_goes_on_eagerly_as_before(prepared, tmp_path, monkeypatch, failure):
    """A capture that fails (an operation it cannot record, out of memory, a host read inside the captured region)
    turns graphs off with one warning; the part it was capturing runs eagerly and the weights are the eager run's."""
    tape, events = Tape(), []
    _fault(monkeypatch, failure if failure.startswith("graph-") else None)
    graphed = _trainer(prepared, tmp_path / "graphed", 1, graphs=tape, events=events)
    eager = _trainer(prepared, tmp_path / "eager", 1)
    if failure == "a value read back":  # the eager loss, which drops padding rows: a CPU finds them with nonzero()
        graphed.graphs.losses = lambda src, tgt_in, tgt_out: graphed._losses(src, tgt_in, tgt_out, tokens=0)
    _same_training(graphed, eager, _steps_of_two_classes(eager, 1, 5))
    warnings = [values["reason"] for kind, values in events if kind == "cuda_graphs_off"]
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    expected = {"graph-error:capture:2": "RuntimeError: NMT_TEST_FAULT: CUDA graph capture",
                "graph-oom:capture:1": "OutOfMemoryError: NMT_TEST_FAULT: CUDA graph capture",
                "a value read back": "operation not permitted when stream is capturing (nonzero"}[failure]
    assert warnings[0].startswith("CUDA graphs are off (") and expected in warnings[0], warnings[0]
    assert not graphed.graphs.enabled and graphed.graphs.summary()["off_reason"] == warnings[0]
    assert tape.pool._handle is None  # the pool's handle let go with the graphs


def test_training_replays_graphs_by_default_only_where_they_were_measured_to_pay():
    from nmtcli.training import graphs as training_graphs

    assert training_graphs.by_default("bf16-master", True, 1, True, False)  # one H200, base: +26%
    assert not training_graphs.by_default("bf16-master", True, 1, True, True)  # with --compile: not measured
    assert not training_graphs.by_default("bf16", True, 1, True, False)  # autocast: not measured
    assert not training_graphs.by_default("bf16-master", True, 2, True, False)  # several ranks: refused
    assert not training_graphs.by_default("bf16-master", False, 1, True, False)  # no shape classes: refused
    assert not training_graphs.by_default("fp32", True, 1, False, False)  # a CPU
