"""Greedy search (`--beam 1`): the most probable token at every step, batched, with the length limit."""

from __future__ import annotations

import pytest
import torch

from nmtcli.inference.greedy import greedy_search
from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import Transformer


def _reference_greedy(model: Transformer, src: torch.Tensor, max_len: int) -> list[int]:
    """One sentence, no cache, no batch: re-run the whole decoder for every token."""
    cfg = model.config
    out = [cfg.bos_id]
    with torch.no_grad():
        for _ in range(max_len):
            logits = model(src, torch.tensor([out]))[0, -1]
            logits[[cfg.pad_id, cfg.bos_id]] = float("-inf")
            token = int(logits.argmax())
            if token == cfg.eos_id:
                break
            out.append(token)
    return out[1:]


def test_greedy_search_equals_uncached_argmax_decoding_in_a_padded_batch():
    torch.manual_seed(3)
    config = ModelConfig(vocab_size=40, d_model=32, d_ff=64, heads=4, layers=2, max_positions=64,
                         positions="sines_first", final_logits_bias=True, activation="swish")
    model = Transformer(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_()
        model.final_logits_bias[config.eos_id] += 3.0  # sentences end at different lengths
    sentences = [[5, 6, 7, 8, 9, 10, 11], [12, 13], [14, 15, 16, 17]]
    src = torch.full((3, 8), config.pad_id)
    for i, s in enumerate(sentences):
        src[i, : len(s)] = torch.tensor(s)
        src[i, len(s)] = config.eos_id
    hyps = greedy_search(model, src, max_len_a=1.0, max_len_b=3)
    expected = [_reference_greedy(model, src[i : i + 1, : len(s) + 1], len(s) + 3) for i, s in enumerate(sentences)]
    assert [h[0].tokens for h in hyps] == expected
    assert len({len(t) for t in expected}) > 1
    for h, s in zip(hyps, sentences):
        assert len(h[0].tokens) <= len(s) + 3 and h[0].log_prob < 0


def test_old_config_files_load_with_the_papers_behaviour():
    old = {"vocab_size": 100, "d_model": 32, "d_ff": 64, "heads": 4, "layers": 1, "dropout": 0.1, "attention_dropout": 0.0,
           "activation_dropout": 0.0, "activation": "relu", "norm": "post", "max_positions": 16,
           "pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3}
    config = ModelConfig.from_dict(old)
    assert (config.positions, config.scale_embedding, config.final_logits_bias) == ("interleaved", True, False)
    model = Transformer(config)
    assert "final_logits_bias" not in model.state_dict()
    table = model.embedding.positions
    assert torch.allclose(table[5, 0::2], torch.sin(5 / 10000 ** (torch.arange(0, 32, 2) / 32)))
    sines_first = Transformer(config.replace(positions="sines_first")).embedding.positions
    assert torch.equal(sines_first[:, :16], table[:, 0::2]) and torch.equal(sines_first[:, 16:], table[:, 1::2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_over_random_logits_takes_log_softmaxs_argmax_and_sums_its_log_probabilities(monkeypatch, dtype):
    # Greedy search ranks the logits and turns only the chosen token's into a log-probability (issue 33): over
    # random logits (some rows led by PAD or BOS, which are never produced), with prefixes (one holding BOS) and
    # the length limit, each token and log-probability is the one log_softmax over the whole row gives.
    from test_beam import _random_logits

    from nmtcli.inference import greedy
    from nmtcli.model import incremental

    V, limit = 3000, 5
    model = Transformer(ModelConfig(vocab_size=V, d_model=16, d_ff=32, heads=2, layers=1)).eval()
    g = torch.Generator().manual_seed(5)
    steps = []

    def random_step(model, tokens, state, project=None):
        logits = _random_logits(g, *incremental.decode_step(model, tokens, state).shape, dtype)
        steps.append(logits.clone())
        return logits

    monkeypatch.setattr(greedy, "decode_step", random_step)
    src = torch.tensor([[5, 6, 3], [7, 3, 0], [8, 9, 3], [10, 3, 0]])
    prefixes = [[], [11, 12], [2, 13], []]
    hyps = greedy_search(model, src, max_len_a=0.0, max_len_b=limit, sync_every=100, prefixes=prefixes)  # rows stay put
    for i, prefix in enumerate(prefixes):
        tokens, log_prob = [], 0.0
        for t, logits in enumerate(steps):
            log_probs = torch.log_softmax(logits[i].float(), dim=-1)
            log_probs[[0, 2]] = float("-inf")  # PAD, BOS
            token = prefix[t] if t < len(prefix) else 3 if t >= limit else int(log_probs.argmax())
            log_prob += float(log_probs[token])
            if token == 3:
                break
            tokens.append(token)
        assert hyps[i][0].tokens == tokens
        assert hyps[i][0].log_prob == pytest.approx(log_prob, abs=1e-5)
    # The cases came: a sentence cut at the limit, one ended by EOS, and BOS in a prefix at -inf.
    assert len(hyps[0][0].tokens) == limit and len(hyps[3][0].tokens) < limit and hyps[2][0].log_prob == float("-inf")
