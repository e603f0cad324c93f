"""A beam search whose cache is read through slots (model/beam_attention.py): the Triton kernels a GPU runs
(self-attention through slots, encoder-decoder attention of a sentence's beam queries), through Triton's
interpreter on a CPU, against their twins; the search through slots against the search that
reorders its cache; the memory it holds. Graphs through slots: tests/test_gpu_paths.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import torch_threads
from test_beam import SENTENCES, _as_lists, tiny_model

from nmtcli.errors import NmtError
from nmtcli.inference.batches import BatchBudget, translate_ids
from nmtcli.inference.settings import SearchSettings
from nmtcli.model.incremental import reads_slots


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    with torch_threads(1):
        yield


def _cache(rows: int, beam: int, heads: int = 2, capacity: int = 24, d_k: int = 16, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    keys, values = (torch.randn(rows + beam, heads, capacity, d_k, generator=g).to(dtype) for _ in range(2))  # rows past N: never read
    q = torch.randn(rows, heads, 1, d_k, generator=g).to(dtype)
    slots = torch.randint(0, beam, (rows + beam, capacity), generator=g, dtype=torch.int32)
    return q, keys, values, slots


def _by_hand(q, keys, values, slots, position: int, beam: int):
    """Each row's positions 0..position copied out of the rows their slots name, then softmax(QK^T/sqrt(d))V."""
    out = torch.empty(q.shape, dtype=torch.float32)
    for r in range(q.size(0)):
        holder = [r // beam * beam + int(slots[r, p]) for p in range(position + 1)]
        k = torch.stack([keys[h, :, p] for p, h in enumerate(holder)], dim=1).float()  # (heads, L, d_k)
        v = torch.stack([values[h, :, p] for p, h in enumerate(holder)], dim=1).float()
        weights = torch.softmax(q[r].float() @ k.transpose(-1, -2) / q.size(-1) ** 0.5, dim=-1)
        out[r] = weights @ v
    return out


KERNEL_CHECK = """
import json, sys
import torch
sys.path.insert(0, sys.argv[1])
from test_beam_attention import _by_hand, _cache
from nmtcli.model.beam_attention import gathered_attention, kernel_attention, kernel_source_attention
from nmtcli.model.incremental import cached_attention

errors = []
for dtype in (torch.float32, torch.bfloat16):
    for position, span in ((0, 1), (13, 16), (22, 24)):
        beam = 4
        q, keys, values, slots = _cache(3 * beam, beam, dtype=dtype, seed=position)
        # The caller's views: the rows in use and the span a step reads (the kernel stops at the position).
        args = (q, keys[: q.size(0), :, :span], values[: q.size(0), :, :span], slots, torch.tensor([position]), beam)
        kernel, twin, expected = kernel_attention(*args), gathered_attention(*args), _by_hand(q, keys, values, slots, position, beam)
        assert kernel.shape == twin.shape == q.shape and kernel.dtype == twin.dtype == dtype
        errors.append([str(dtype), position, (kernel.float() - expected).abs().max().item(), (twin.float() - expected).abs().max().item()])
# A step's queries are a chunk of one projection (not contiguous), its keys the front rows of a larger buffer.
qkv = torch.randn(4, 2 * 16 * 3)
q = qkv[:, : 2 * 16].view(4, 1, 2, 16).transpose(1, 2)
_, keys, values, slots = _cache(4, 2, 2, 8, 16)
kernel = kernel_attention(q, keys[:4, :, :8], values[:4, :, :8], slots, torch.tensor([5]), 2)
errors.append(["strides", 5, (kernel - _by_hand(q, keys, values, slots, 5, 2)).abs().max().item(), 0.0])
# Encoder-decoder attention: a sentence's beam queries (any number: padded to a power of two inside) against its
# source, under the additive padding mask; a query laid out as a step lays it out (a view of the projection).
for dtype in (torch.float32, torch.bfloat16):
    for beam in (1, 3, 4):
        g = torch.Generator().manual_seed(beam)
        n, heads, S, d_k = 3, 2, 21, 16
        q = torch.randn(n, beam, heads, d_k, generator=g).to(dtype).transpose(1, 2)
        keys, values = (torch.randn(n, heads, S, d_k, generator=g).to(dtype) for _ in range(2))
        mask = torch.zeros(n, 1, 1, S, dtype=dtype)
        mask[0, ..., 15:] = float("-inf")  # padding, a block of it alone included
        mask[2, ..., 1:] = float("-inf")
        weights = torch.softmax(q.float() @ keys.float().transpose(-1, -2) / d_k ** 0.5 + mask.float(), dim=-1)
        expected = weights @ values.float()
        kernel, twin = kernel_source_attention(q, keys, values, mask), cached_attention(q, keys, values, mask)
        assert kernel.shape == twin.shape == q.shape and kernel.dtype == dtype
        errors.append([str(dtype), f"source beam {beam}", (kernel.float() - expected).abs().max().item(),
                       (twin.float() - expected).abs().max().item()])
print(json.dumps(errors))
"""


def test_the_kernels_and_their_twins_attend_as_the_paper_says():
    # Triton's interpreter must be on before Triton is first imported (its library's functions are made then):
    # the kernel runs in a process of its own, on the CPU, each of its programs in NumPy.
    pytest.importorskip("triton", reason="Triton is a dev dependency: pip install -e '.[dev]'")
    tests = Path(__file__).parent
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join([str(tests.parent), str(tests)])}
    done = subprocess.run([sys.executable, "-c", KERNEL_CHECK, str(tests)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    errors = json.loads(done.stdout.splitlines()[-1])
    assert len(errors) == 13
    for dtype, position, kernel, twin in errors:
        tolerance = 2e-2 if "bfloat16" in dtype else 1e-5
        assert kernel <= tolerance and twin <= tolerance, (dtype, position, kernel, twin)


def _lines(cache: str, monkeypatch, prefixes=None, nbest: int = 2, budget_tokens: int = 1000):
    monkeypatch.setenv("NMT_BEAM_CACHE", cache)
    model = tiny_model(8, vocab_size=30)
    hyps = translate_ids(model, SENTENCES * 2, SearchSettings(beam=4, nbest=nbest, max_len_b=7), BatchBudget(budget_tokens),
                         torch.device("cpu"), prefixes=prefixes)
    return _as_lists(hyps)


@pytest.mark.parametrize("budget_tokens", [1000, 30])  # one batch; many, whose sentences leave as they end
def test_a_search_through_slots_equals_the_search_that_reorders(monkeypatch, budget_tokens):
    assert _lines("slots", monkeypatch, budget_tokens=budget_tokens) == _lines("reorder", monkeypatch, budget_tokens=budget_tokens)


def test_with_prefixes_a_search_through_slots_equals_the_search_that_reorders(monkeypatch):
    prefixes = [[5, 6], [], [7], [], [8, 9, 10], [], [5], [], [6, 7], []] * 2
    assert _lines("slots", monkeypatch, prefixes) == _lines("reorder", monkeypatch, prefixes)


def test_a_gpu_reads_through_slots_by_default_and_the_setting_is_checked(monkeypatch):
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv("NMT_BEAM_CACHE", raising=False)
    assert not reads_slots(cpu, 4)  # a CPU reorders (its matrix products; the kernel is a GPU's)
    assert not reads_slots(gpu, 1)  # one row a sentence never reorders
    from nmtcli.model import beam_attention

    monkeypatch.setattr(beam_attention, "available", lambda device: True)  # a GPU with Triton ...
    for runs in (True, False):  # ... where the kernels run for this dtype and head size, or not
        monkeypatch.setattr(beam_attention, "works", lambda device, dtype, beam, d_k: runs)
        assert reads_slots(gpu, 4, torch.bfloat16, 64) is runs
    monkeypatch.setenv("NMT_BEAM_CACHE", "slots")
    assert reads_slots(cpu, 4)
    monkeypatch.setenv("NMT_BEAM_CACHE", "reorder")
    assert not reads_slots(gpu, 4)
    monkeypatch.setenv("NMT_BEAM_CACHE", "moved")
    with pytest.raises(NmtError, match="NMT_BEAM_CACHE is 'moved'") as error:
        reads_slots(cpu, 4)
    assert error.value.exit_code == 2


def test_through_slots_the_arena_holds_one_set_of_keys_and_values_and_the_slots():
    from nmtcli.inference.memory import arena_bytes
    from nmtcli.model.config import ModelConfig

    config = ModelConfig()
    reorder, slots = arena_bytes(config, 64, 32, 96), arena_bytes(config, 64, 32, 96, slots=True)
    cache = lambda parts: sum(v for k, v in parts.items() if k.startswith("cache."))  # noqa: E731
    assert cache(slots) == cache(reorder) // 2 + 4 * 64 * 4 * 96  # half the keys/values; an int32 slot a row and position
    assert "cache.1.keys.0" in reorder and "cache.1.keys.0" not in slots


def test_where_the_kernels_cannot_run_one_warning_says_so_and_the_search_reorders(caplog):
    # Compiled for a GPU, launched on a CPU's tensors (no interpreter in this process): what a GPU or dtype Triton
    # has no code for looks like to `works`.
    pytest.importorskip("triton", reason="Triton is a dev dependency: pip install -e '.[dev]'")
    from nmtcli.model import beam_attention

    with caplog.at_level("WARNING", logger="nmtcli"):
        assert not beam_attention.works(torch.device("cpu"), torch.float32, 3, 8)
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert message.startswith("nmt: warning: the beam search kernels do not run on this GPU in float32 (")
    assert message.endswith("beam search reorders its cache instead")
