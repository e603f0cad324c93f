"""The translator around the search: loading a model dir, batch sizes per device, running out of memory."""

from __future__ import annotations

import torch

from nmtcli.inference.settings import DEVICE_DEFAULTS, SearchSettings, batching_for
from nmtcli.inference.translator import Translator
from nmtcli.model.checkpoint import WEIGHTS_FILE, load_model, load_weights
from nmtcli.model.transformer import Transformer, sinusoidal_positions

LINES = [f"the {word} sees a dog number {i}" + " and a cat" * (i % 5) for i, word in enumerate(["man", "woman", "child"] * 12)]


def test_a_loaded_model_is_exactly_its_file_with_no_random_initialization(random_model):
    model, values = load_model(random_model)
    stored = load_weights(random_model / WEIGHTS_FILE)
    assert set(model.state_dict()) == set(stored)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, stored[name]), name
    cfg = model.config
    assert torch.equal(model.embedding.positions, sinusoidal_positions(cfg.max_positions, cfg.d_model, cfg.positions))
    assert not model.training
    # Built the usual way and loaded, the same model computes the same logits.
    reference = Transformer(cfg).eval()
    reference.load_state_dict(stored)
    src, tgt = torch.tensor([[5, 6, 7, 3]]), torch.tensor([[2, 8, 9]])
    with torch.no_grad():
        assert torch.equal(model(src, tgt), reference(src, tgt))


def test_batches_default_to_the_size_that_suits_the_device():
    assert batching_for(SearchSettings(), "cpu") == DEVICE_DEFAULTS["cpu"] == (1024, 1000)
    assert batching_for(SearchSettings(), "cuda") == DEVICE_DEFAULTS["cuda"]
    assert DEVICE_DEFAULTS["cuda"][0] > 8 * DEVICE_DEFAULTS["cpu"][0]
    assert batching_for(SearchSettings(batch_tokens=100, window=7), "cuda") == (100, 7)


def test_running_out_of_memory_halves_the_batch_and_loses_no_line(random_model, tmp_path, monkeypatch):
    warnings: list[str] = []
    settings = SearchSettings(batch_tokens=100_000, max_len_a=0, max_len_b=10)  # a random model writes to the length limit
    expected = list(Translator(random_model, settings=settings).translate(LINES))
    # A GPU out of memory cannot be had on demand: the fault makes every batch of more than 5 lines
    # raise torch's OutOfMemoryError, as a full GPU would.
    monkeypatch.setenv("NMT_TEST_FAULT", "oom-above:5")
    translator = Translator(random_model, settings=settings, warn=warnings.append)
    assert list(translator.translate(LINES)) == expected
    assert len(expected) == len(LINES) and len(set(expected)) > 3
    assert translator.batch_tokens < 100_000  # later batches start small instead of failing again
    assert warnings and all(w.startswith("out of memory with a batch of ") for w in warnings)
    assert "continuing with --batch-tokens" in warnings[0]


def test_translate_reports_its_speed_when_done(random_model, nmt_main):
    result = nmt_main("translate", "-m", str(random_model), "--beam", "2", "--max-len-b", "10", input="\n".join(LINES[:6]) + "\n")
    assert len(result.stdout.splitlines()) == 6
    assert "translated 6 line(s) in " in result.stderr and " lines/s; the first after " in result.stderr
