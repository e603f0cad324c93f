"""Sampling (`--sampling`): draws that follow the model's distribution (filtered and tempered as asked),
reproducible with a seed whatever the batching, through the CLI, the JSON records and CTranslate2's engine."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch

from conftest import torch_threads
from nmtcli.inference.sampling import Sampling, parse_sampling, sample
from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import Transformer

DRAWS = 4000
SRC = [5, 6, 7, 8]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models decode fastest on one thread, and on a loaded machine far faster than on several."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def model() -> Transformer:
    """A tiny model of 16 words whose next-token distributions are far from flat (a strong random logits bias)."""
    torch.manual_seed(7)
    config = ModelConfig(vocab_size=16, d_model=32, d_ff=64, heads=4, layers=2, max_positions=64, final_logits_bias=True)
    model = Transformer(config).eval()
    with torch.no_grad():
        model.final_logits_bias.normal_(0, 1.0)
    return model


def _src(*sentences: list[int], pad: int = 0) -> torch.Tensor:
    src = torch.full((len(sentences), max(map(len, sentences)) + 1), pad)
    for i, s in enumerate(sentences):
        src[i, : len(s) + 1] = torch.tensor([*s, 3])
    return src


def _next_log_probs(model: Transformer, prefix: list[int]) -> torch.Tensor:
    """The model's log-probabilities of the token after BOS + prefix, by a full forward pass (no cache)."""
    cfg = model.config
    with torch.no_grad():
        return torch.log_softmax(model(_src(SRC), torch.tensor([[cfg.bos_id, *prefix]]))[0, -1], dim=-1)


def _drawing_distribution(logits: torch.Tensor, sampling: Sampling, temperature: float) -> torch.Tensor:
    """What the draws must follow, written from the definitions: softmax(logits / T) over all but PAD and BOS,
    then the top k, or the fewest most probable tokens whose mass reaches p, renormalized."""
    q = torch.softmax(logits.double() / temperature, dim=-1)
    q[[0, 2]] = 0
    q /= q.sum()
    order = q.argsort(descending=True)
    if sampling.kind == "topk":
        keep = order[: sampling.k]
    elif sampling.kind == "topp":
        mass, size = 0.0, 0
        while mass < sampling.p:
            mass += float(q[order[size]])
            size += 1
        keep = order[:size]
    else:
        keep = order
    out = torch.zeros_like(q)
    out[keep] = q[keep]
    return out / out.sum()


def _chi_square_holds(counts: Counter, expected: dict, draws: int) -> tuple[float, float]:
    """(chi-square statistic, its 0.1% critical value) over the outcomes, those expected fewer than 5 times pooled."""
    stat, pooled_seen, pooled_expected, bins = 0.0, 0, 0.0, 0
    for outcome, p in expected.items():
        e = p * draws
        if e < 5:
            pooled_seen, pooled_expected = pooled_seen + counts.get(outcome, 0), pooled_expected + e
            continue
        stat += (counts.get(outcome, 0) - e) ** 2 / e
        bins += 1
    if pooled_expected > 0:
        stat += (pooled_seen - pooled_expected) ** 2 / max(pooled_expected, 1e-9)
        bins += 1
    df = bins - 1
    z = 3.09  # 0.1% upper tail; Wilson-Hilferty's approximation of the chi-square quantile
    return stat, df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("spec, temperature", [("full", 1.0), ("full", 0.6), ("topk:4", 1.5), ("topp:0.8", 1.0)])
def test_first_tokens_follow_the_models_distribution_filtered_and_tempered(model, spec, temperature):
    sampling = parse_sampling(spec)
    # One free token, then the length limit forces EOS: each row's first draw, DRAWS rows of one sentence.
    hyps = sample(model, _src(SRC), sampling, temperature, seed=11, samples=DRAWS, max_len_a=0, max_len_b=1)[0]
    first = Counter(h.tokens[0] if h.tokens else 3 for h in hyps)
    log_probs = _next_log_probs(model, [])
    q = _drawing_distribution(log_probs, sampling, temperature)  # log-probs are logits shifted: the same softmax
    assert set(first) <= set(torch.nonzero(q).flatten().tolist()), "a token outside the top k / the nucleus, or PAD/BOS"
    stat, critical = _chi_square_holds(first, {t: float(p) for t, p in enumerate(q) if p > 0}, DRAWS)
    assert stat < critical, (spec, temperature, stat, critical)
    if sampling.kind != "full":
        assert len(first) == int((q > 0).sum()) < 14  # the filter removed some tokens, and every kept one was drawn
    # A sample's log_prob is the model's own (temperature 1, unfiltered), EOS included.
    for h in hyps[:20]:
        tokens = [*h.tokens, 3]
        exact = sum(float(_next_log_probs(model, tokens[:i])[t]) for i, t in enumerate(tokens))
        assert h.log_prob == pytest.approx(exact, abs=1e-4) and h.score == h.log_prob


def test_two_token_samples_follow_the_exact_sequence_probabilities(model):
    hyps = sample(model, _src(SRC), Sampling("full"), seed=3, samples=DRAWS, max_len_a=0, max_len_b=2)[0]
    seen = Counter(tuple(h.tokens) for h in hyps)
    first = torch.exp(_next_log_probs(model, []).double())
    first[[0, 2]] = 0
    first /= first.sum()
    expected = {(): float(first[3])}
    for a in range(16):
        if a in (0, 2, 3):
            continue
        second = torch.exp(_next_log_probs(model, [a]).double())
        second[[0, 2]] = 0
        second /= second.sum()
        expected[(a,)] = float(first[a] * second[3])  # a, then EOS
        expected.update({(a, b): float(first[a] * second[b]) for b in range(16) if b not in (0, 2, 3)})
    assert set(seen) <= set(expected)
    stat, critical = _chi_square_holds(seen, expected, DRAWS)
    assert stat < critical, (stat, critical)


def test_a_sentences_samples_do_not_depend_on_its_batch_or_on_how_many_are_drawn(model):
    sentences = [[5, 6, 7, 8], [9, 10], [11, 12, 13, 14, 15, 4], [6]]
    numbers = torch.tensor([41, 42, 43, 44])
    alone = [sample(model, _src(s), Sampling("topp", p=0.9), 0.8, seed=7, lines=numbers[i : i + 1], samples=3,
                    max_len_b=12)[0]
             for i, s in enumerate(sentences)]
    together = sample(model, _src(*sentences), Sampling("topp", p=0.9), 0.8, seed=7, lines=numbers, samples=3, max_len_b=12)
    assert [[h.tokens for h in hs] for hs in together] == [[h.tokens for h in hs] for hs in alone]
    one = sample(model, _src(*sentences), Sampling("topp", p=0.9), 0.8, seed=7, lines=numbers, samples=1, max_len_b=12)
    assert [hs[0].tokens for hs in one] == [hs[0].tokens for hs in together]
    other_seed = sample(model, _src(*sentences), Sampling("topp", p=0.9), 0.8, seed=8, lines=numbers, samples=3, max_len_b=12)
    assert [[h.tokens for h in hs] for hs in other_seed] != [[h.tokens for h in hs] for hs in together]
    assert len({tuple(h.tokens) for h in together[0]}) > 1  # the samples of a line differ from each other
    assert all(len(h.tokens) <= len(s) + 12 for hs, s in zip(together, sentences) for h in hs)


def test_top_k_of_one_is_greedy_search(model):
    from nmtcli.inference.greedy import greedy_search

    src = _src([5, 6, 7, 8], [9, 10], [11, 12, 13])
    greedy = greedy_search(model, src, max_len_b=10)
    sampled = sample(model, src, Sampling("topk", k=1), temperature=3.0, max_len_b=10)
    assert [(h[0].tokens, pytest.approx(h[0].log_prob, abs=1e-5)) for h in sampled] == [(h[0].tokens, h[0].log_prob) for h in greedy]


def test_draws_over_a_large_vocabulary_are_the_inverse_cdf_of_the_whole_sorted_distribution():
    """The shortcuts (two-level blocks for full, the 64 / 1,024 best before a whole sort for top-p, the block
    top-k) pick the token a plain inverse transform over the whole distribution picks with the same u (in
    vocabulary order for full, most probable first for the filters)."""
    from nmtcli.inference.sampling import draw

    torch.manual_seed(0)
    V, rows = 3000, 240
    # Sharp rows (a nucleus of p 0.9 within 64 tokens), middling ones (597-856) and flat ones (over 2,500: a whole sort).
    log_probs = torch.log_softmax(torch.randn(rows, V) * torch.tensor([6.0, 2.0, 0.3]).repeat(rows // 3)[:, None], dim=-1)
    log_probs[:, [0, 2]] = float("-inf")
    allowed = log_probs.double().exp().sum(1)
    u = torch.rand(rows, dtype=torch.float64)
    for sampling in (Sampling("full"), Sampling("topk", k=40), Sampling("topp", p=0.9), Sampling("topp", p=0.5)):
        probs, order = log_probs.double().exp().sort(dim=1, descending=True)
        if sampling.kind == "full":
            probs, order = log_probs.double().exp(), torch.arange(V).expand(rows, V)
        if sampling.kind == "topk":
            probs[:, sampling.k:] = 0
        if sampling.kind == "topp":
            probs[(probs.cumsum(1) - probs) >= sampling.p * allowed[:, None]] = 0
        cdf = probs.cumsum(1)
        expected = order.gather(1, torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True))[:, 0]
        got = draw(log_probs.clone(), sampling, u, allowed)
        assert torch.equal(got, expected), sampling  # (rounding could move a boundary by ~1e-7: no u here falls that close)
        assert torch.isin(got, torch.tensor([0, 2])).sum() == 0


@pytest.mark.parametrize("spec", ["topk:0", "topk:x", "topp:0", "topp:1.5", "topp:", "foo", "full:3"])
def test_a_spec_that_does_not_parse_is_refused(spec):
    with pytest.raises(ValueError):
        parse_sampling(spec)
    assert parse_sampling("topk:10") == Sampling("topk", k=10) and parse_sampling("topp:1") == Sampling("topp", p=1.0)


# --- through nmt translate ---------------------------------------------------------------------------

LINES = "the dog sees a cat\n\na small house by the river\nthe cat\n"


def _translate(nmt_main, model_dir, *args: str, input: str = LINES) -> list[str]:
    out = nmt_main("translate", "-m", str(model_dir), "--max-len-b", "8", *args, input=input)
    return out.stdout.split("\n")[:-1]


def test_translate_samples_one_line_per_line_reproducibly_whatever_the_batching(random_model, nmt_main):
    first = _translate(nmt_main, random_model, "--sampling", "full", "--seed", "5")
    assert len(first) == 4 and first[1] == "" and first[0] and first[2]
    assert _translate(nmt_main, random_model, "--sampling", "full", "--seed", "5") == first
    assert _translate(nmt_main, random_model, "--sampling", "full", "--seed", "5", "--batch-tokens", "8", "--window", "2") == first
    assert _translate(nmt_main, random_model, "--sampling", "full", "--seed", "6") != first
    assert _translate(nmt_main, random_model, "--sampling", "full") == _translate(nmt_main, random_model, "--sampling", "full", "--seed", "1")
    beam = _translate(nmt_main, random_model)
    assert _translate(nmt_main, random_model, "--sampling", "topk:1") == _translate(nmt_main, random_model, "--beam", "1") != first
    assert beam != first


def test_translate_nbest_draws_that_many_samples_in_json(random_model, nmt_main):
    records = [json.loads(line) for line in _translate(nmt_main, random_model, "--sampling", "topp:0.95", "--temperature", "1.3",
                                                        "--nbest", "3", "--output-format", "json")]
    assert len(records) == 4 and records[1]["nbest"] == []
    for record in (records[0], records[2], records[3]):
        assert len(record["nbest"]) == 3 and record["translation"] == record["nbest"][0]["translation"]
        assert all(e["score"] == e["log_prob"] < 0 for e in record["nbest"])
    assert len({e["translation"] for e in records[0]["nbest"]}) > 1
    text = _translate(nmt_main, random_model, "--sampling", "topp:0.95", "--temperature", "1.3")
    assert text == [r["translation"] for r in records]  # sample 1 is the same whatever --nbest


BAD_FLAGS = [
    (["--sampling", "topk:0"], "--sampling 'topk:0': K must be a whole number >= 1"),
    (["--sampling", "topp:1.5"], "--sampling 'topp:1.5': P must be a number above 0 and at most 1"),
    (["--sampling", "foo"], "--sampling 'foo': not one of full, topk:K"),
    (["--sampling", "full", "--temperature", "0"], "--temperature 0 is not above 0"),
    (["--sampling", "full", "--beam", "5"], "--beam does not go with --sampling"),
    (["--sampling", "full", "--alpha", "1"], "--alpha does not go with --sampling"),
    (["--temperature", "0.5"], "--temperature applies to sampling only"),
    (["--seed", "3"], "--seed applies to sampling only"),
    (["--sampling", "full", "--prefix-file", __file__], "--prefix-file works with beam and greedy search, not with --sampling"),
]


@pytest.mark.parametrize("args, message", BAD_FLAGS, ids=[" ".join(a) for a, _ in BAD_FLAGS])
def test_bad_sampling_flags_are_one_error_line(random_model, nmt_main, args, message):
    out = nmt_main("translate", "-m", str(random_model), *args, input="a\n", check=False)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.startswith(f"nmt: error: {message}") and out.stderr.count("\n") == 1, out.stderr
    if args == ["--sampling", "topk:0"]:
        from test_finetune import one_error_line

        one_error_line(out, "usage-sampling")  # the row of docs/errors.md


def test_ctranslate2_engine_samples_with_its_own_generator(random_model, nmt_main, tmp_path):
    pytest.importorskip("ctranslate2")
    out = tmp_path / "ct2"
    nmt_main("export", "ctranslate2", str(random_model), str(out))
    ct2 = ["--engine", "ctranslate2"]
    assert _translate(nmt_main, out, *ct2, "--sampling", "topk:1") == _translate(nmt_main, random_model, "--beam", "1")
    drawn = _translate(nmt_main, out, *ct2, "--sampling", "full", "--seed", "4")
    assert len(drawn) == 4 and drawn[1] == "" and drawn == _translate(nmt_main, out, *ct2, "--sampling", "full", "--seed", "4")
    assert drawn != _translate(nmt_main, out, *ct2, "--sampling", "full", "--seed", "9")
