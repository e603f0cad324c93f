"""Beam search (sec. 6.1) against exhaustive search and greedy decoding on small random models."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from nmtcli.inference.beam import beam_search
from nmtcli.inference.penalties import Brevity, lp
from nmtcli.model.config import BOS_ID, EOS_ID, ModelConfig
from nmtcli.model.transformer import Transformer

# Ids 0-3 are pad/unk/bos/eos; with vocab_size 6 the model can say unk, 4 or 5.
WORDS = (1, 4, 5)


def tiny_model(seed: int, vocab_size: int = 6, layers: int = 2, decoder_layers: int | None = None) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=vocab_size, d_model=16, d_ff=32, heads=2, layers=layers, decoder_layers=decoder_layers, dropout=0.0)
    model = Transformer(config).eval()
    with torch.no_grad():  # sharpen the distributions so that different choices really differ
        model.embedding.tokens.weight.mul_(4)
    return model


def sequence_log_prob(model: Transformer, src: torch.Tensor, tokens: tuple[int, ...]) -> float:
    tgt_in = torch.tensor([[BOS_ID, *tokens]])
    with torch.no_grad():
        log_probs = torch.log_softmax(model(src, tgt_in)[0].float(), dim=-1)
    return sum(log_probs[t, y].item() for t, y in enumerate((*tokens, EOS_ID)))


def exhaustive_best(model, src, max_len, alpha, penalty, brevity=Brevity()):
    best = None
    pieces = int((src != 0).sum()) - 1  # the source's, without EOS
    for length in range(max_len + 1):
        for tokens in itertools.product(WORDS, repeat=length):
            score = sequence_log_prob(model, src, tokens) / lp(length + 1, alpha, penalty) + brevity.of(pieces, length)
            if best is None or score > best[1]:
                best = (list(tokens), score)
    return best


@pytest.mark.parametrize("penalty", ["gnmt", "power"])
def test_wide_beam_finds_the_exhaustive_best_under_each_length_penalty(penalty):
    src = torch.tensor([[4, 5, 4, EOS_ID]])
    max_len = 3  # 1 + 3 + 9 + 27 = 40 candidate outputs; a beam of 27 holds every prefix
    winners_change = False
    for seed in range(6):
        model = tiny_model(seed)
        winners = set()
        for alpha in (0.0, 0.6, 3.0):
            tokens, score = exhaustive_best(model, src, max_len, alpha, penalty)
            hyp = beam_search(model, src, beam=27, alpha=alpha, max_len_a=0.0, max_len_b=max_len, length_penalty=penalty)[0][0]
            assert hyp.tokens == tokens, (seed, alpha)
            assert hyp.score == pytest.approx(score, abs=1e-4)
            winners.add(tuple(tokens))
        winners_change |= len(winners) > 1
    assert winners_change, "no model where the length penalty changes the winner: the test proves nothing"


def test_wide_beam_finds_the_exhaustive_best_under_a_brevity_penalty():
    # a finished hypothesis's score only falls by the penalty, so the early stop (live log P / the largest lp) still
    # never stops a search that a live hypothesis could win
    src = torch.tensor([[4, 5, 4, EOS_ID]])
    longer = 0
    for seed in range(6):
        model = tiny_model(seed)
        for weight, ratio in ((1.0, 1.0), (4.0, 0.7), (20.0, 1.0)):
            brevity = Brevity(weight, ratio)
            tokens, score = exhaustive_best(model, src, 3, 0.6, "gnmt", brevity)
            hyp = beam_search(model, src, beam=27, alpha=0.6, max_len_a=0.0, max_len_b=3, brevity=brevity)[0][0]
            assert hyp.tokens == tokens, (seed, weight, ratio)
            assert hyp.score == pytest.approx(score, abs=1e-4)
            longer += len(tokens) > len(exhaustive_best(model, src, 3, 0.6, "gnmt")[0])
    assert longer, "no model where the penalty lengthens the winner: the test proves nothing"


def greedy(model: Transformer, src: torch.Tensor, max_len: int, prefix: tuple[int, ...] = ()) -> list[int]:
    """One sentence, no cache: the whole decoder run for every token, fed `prefix` first (test_prefix.py)."""
    tokens: list[int] = list(prefix)
    with torch.no_grad():
        while len(tokens) < max_len:
            logits = model(src, torch.tensor([[BOS_ID, *tokens]]))[0, -1]
            logits[[0, BOS_ID]] = float("-inf")
            token = int(logits.argmax())
            if token == EOS_ID:
                break
            tokens.append(token)
    return tokens


def test_beam_of_one_is_greedy_search():
    model = tiny_model(1, vocab_size=30)
    for src_tokens in ([5, 6, 7], [20, 21, 22, 23, 24, 25], [9]):
        src = torch.tensor([[*src_tokens, EOS_ID]])
        hyp = beam_search(model, src, beam=1, alpha=0.0, max_len_a=1.0, max_len_b=5)[0][0]
        assert hyp.tokens == greedy(model, src, len(src_tokens) + 5)


def test_each_sentence_gets_the_same_translation_alone_and_in_a_batch():
    model = tiny_model(2, vocab_size=30)
    sentences = [[5, 6, 7], [20, 21, 22, 23, 24, 25, 26], [9], [10, 11, 12, 13]]
    width = max(len(s) for s in sentences) + 1
    batch = torch.zeros(len(sentences), width, dtype=torch.long)
    for i, s in enumerate(sentences):
        batch[i, : len(s) + 1] = torch.tensor([*s, EOS_ID])
    together = beam_search(model, batch, beam=4, nbest=2)
    for i, s in enumerate(sentences):
        alone = beam_search(model, torch.tensor([[*s, EOS_ID]]), beam=4, nbest=2)[0]
        assert [h.tokens for h in alone] == [h.tokens for h in together[i]]
        assert [h.score for h in alone] == pytest.approx([h.score for h in together[i]], abs=1e-4)


def test_output_length_is_bounded_by_a_times_source_plus_b():
    model = tiny_model(3, vocab_size=30)
    with torch.no_grad():
        model.embedding.tokens.weight[EOS_ID].fill_(-5)  # a model that never wants to stop
    src = torch.tensor([[5, 6, 7, 8, EOS_ID]])
    for a, b in ((1.0, 2), (0.5, 0), (2.0, 1)):
        hyps = beam_search(model, src, beam=3, max_len_a=a, max_len_b=b, nbest=3)[0]
        assert all(len(h.tokens) <= int(a * 4 + b) for h in hyps)


def test_nbest_are_distinct_and_sorted_by_score():
    model = tiny_model(4, vocab_size=30)
    hyps = beam_search(model, torch.tensor([[5, 6, 7, EOS_ID]]), beam=5, nbest=5)[0]
    assert len(hyps) == 5
    assert len({tuple(h.tokens) for h in hyps}) == 5
    assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)


def test_gnmt_length_penalty_formula():
    assert lp(10, 0.6) == pytest.approx(((5 + 10) / 6) ** 0.6)
    assert lp(10, 0.6, "power") == pytest.approx(10**0.6)
    assert lp(7, 0.0) == 1.0


def test_a_student_with_a_shallower_decoder_searches_its_own_scores():
    # 3 encoder layers, 1 decoder layer: what the incremental search finds and scores is what the whole model computes.
    src = torch.tensor([[4, 5, 4, EOS_ID]])
    for seed in range(3):
        model = tiny_model(seed, layers=3, decoder_layers=1)
        assert len(model.decoder.layers) == 1
        tokens, score = exhaustive_best(model, src, 3, 0.6, "gnmt")
        hyp = beam_search(model, src, beam=27, alpha=0.6, max_len_a=0.0, max_len_b=3)[0][0]
        assert hyp.tokens == tokens and hyp.score == pytest.approx(score, abs=1e-4)
    model = tiny_model(5, vocab_size=30, layers=3, decoder_layers=1)
    for hyp in beam_search(model, torch.tensor([[5, 6, 7, 8, EOS_ID]]), beam=4, alpha=0.6, nbest=4)[0]:
        assert hyp.log_prob == pytest.approx(sequence_log_prob(model, torch.tensor([[5, 6, 7, 8, EOS_ID]]), tuple(hyp.tokens)), abs=1e-4)


def test_reported_scores_equal_a_full_recomputation():
    model = tiny_model(5, vocab_size=30)
    src = torch.tensor([[5, 6, 7, 8, EOS_ID]])
    for hyp in beam_search(model, src, beam=4, alpha=0.6, nbest=4)[0]:
        assert hyp.log_prob == pytest.approx(sequence_log_prob(model, src, tuple(hyp.tokens)), abs=1e-4)
        assert hyp.score == pytest.approx(hyp.log_prob / lp(len(hyp.tokens) + 1, 0.6), abs=1e-6)


def test_packed_cpu_model_translates_exactly_like_the_plain_one():
    from nmtcli.inference.cpu import pack_for_cpu

    plain = tiny_model(6, vocab_size=300)
    packed = tiny_model(6, vocab_size=300)
    assert pack_for_cpu(packed), "oneDNN packing unavailable on this build"
    src = torch.tensor([[5, 6, 7, 8, 9, EOS_ID], [10, 11, EOS_ID, 0, 0, 0]])
    for a, b in zip(beam_search(plain, src, beam=4, nbest=3), beam_search(packed, src, beam=4, nbest=3), strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


def test_int8_layers_are_exact_on_their_quantization_grids():
    """Weights that are whole multiples of 1/127 of their own row's largest value, and inputs on a
    7-bit grid, go through int8 without rounding: the products equal fp32's (to its own rounding).
    A scale shared by all rows (instead of one per row) would round the small rows here."""
    from nmtcli.inference.cpu import Int8Linear

    g = torch.Generator().manual_seed(0)
    row_scale = torch.tensor([1.0, 0.01, 3.0, 0.2])[:, None] / 127
    weight = torch.randint(-127, 128, (4, 16), generator=g) * row_scale
    weight[:, 0] = 127 * row_scale[:, 0]  # each row's largest value sets its scale
    bias = torch.tensor([0.5, -1.0, 0.0, 2.0])
    x = (torch.randint(0, 128, (5, 16), generator=g) - 64) / 64  # 128 levels from -1 to 63/64, zero one of them
    x[0, 0], x[0, 1] = -1.0, 63 / 64
    layer = Int8Linear(weight, bias)
    assert torch.allclose(layer(x), F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)
    assert layer(x.view(5, 1, 16)).shape == (5, 1, 4)  # decoding steps feed (rows, 1, d)


def test_int8_search_keeps_fp32_translations_or_finds_ones_as_good():
    """int8 rounding may change a translation where candidates are close; where it does, the exact
    (fp32) model must score the int8 choice about as well as its own."""
    from nmtcli.inference.cpu import pack_for_cpu

    exact, quantized = tiny_model(8, vocab_size=300), tiny_model(8, vocab_size=300)
    assert pack_for_cpu(quantized, "int8"), "int8 linear ops unavailable on this build"
    assert not any(isinstance(m, torch.nn.Linear) for m in quantized.modules())
    sentences = [[5 + i, 17 + 2 * i, 40 + i, 9] for i in range(12)]
    same = 0
    for sentence, a, b in zip(sentences, beam_search(exact, _batch(sentences), beam=4),
                              beam_search(quantized, _batch(sentences), beam=4), strict=True):
        same += a[0].tokens == b[0].tokens
        rescored = sequence_log_prob(exact, _batch([sentence]), tuple(b[0].tokens)) / lp(len(b[0].tokens) + 1, 0.6)
        assert rescored >= a[0].score - 0.5, (a[0].tokens, b[0].tokens)
    assert same >= 9, f"only {same} of 12 translations kept"


def _batch(sentences: list[list[int]]) -> torch.Tensor:
    width = max(len(s) for s in sentences) + 1
    batch = torch.zeros(len(sentences), width, dtype=torch.long)
    for i, s in enumerate(sentences):
        batch[i, : len(s) + 1] = torch.tensor([*s, EOS_ID])
    return batch


SENTENCES = [[5, 6, 7], [20, 21, 22, 23, 24, 25, 26], [9], [10, 11, 12, 13], [14, 15]]


def _as_lists(hyps):
    return [[(h.tokens, round(h.score, 4), round(h.log_prob, 4)) for h in sentence] for sentence in hyps]


@pytest.mark.parametrize("sync_every, leave_fraction", [(3, 0.0), (100, 0.0), (1, 0.5), (8, 0.25)])
def test_looking_at_the_search_only_every_few_steps_changes_nothing(sync_every, leave_fraction):
    # On a GPU the host looks at the search state only every few steps, and decided sentences leave
    # the batch only once a share of it is decided; until then they keep running, masked. Results
    # must equal a look after every step that drops every decided sentence at once.
    from nmtcli.inference.beam import BeamSearch

    model = tiny_model(7, vocab_size=30)
    src = _batch(SENTENCES)
    for settings in ({"beam": 4, "nbest": 2}, {"beam": 3, "nbest": 3, "min_len": 2, "alpha": 1.5}, {"beam": 5, "max_len_b": 3}):
        every_step = beam_search(model, src, sync_every=1, **settings)
        full = {"alpha": 0.6, "max_len_a": 1.0, "max_len_b": 50, "nbest": 1, "length_penalty": "gnmt", "min_len": 0, **settings}
        with torch.inference_mode():
            search = BeamSearch(model, src, full.pop("beam"), **full)
            assert _as_lists(search.run(sync_every, leave_fraction=leave_fraction)) == _as_lists(every_step)
    assert len({len(h[0].tokens) for h in every_step}) > 1, "all sentences end together: the test proves nothing"


def test_first_step_on_one_row_per_sentence_equals_the_step_on_all_beams(monkeypatch):
    from nmtcli.model.incremental import DecoderCache

    model = tiny_model(9, vocab_size=30)
    src = _batch(SENTENCES)
    rows = []
    monkeypatch.setattr(DecoderCache, "_swap", lambda self, r, swap=DecoderCache._swap: (rows.append((self.rows, r.numel())), swap(self, r))[1])
    shortcut = beam_search(model, src, beam=4, nbest=3)
    assert rows[0] == (len(SENTENCES), 4 * len(SENTENCES))  # the first reorder grows one row per sentence to K
    monkeypatch.setattr(DecoderCache, "start_with", lambda self, rows: None)
    assert _as_lists(shortcut) == _as_lists(beam_search(model, src, beam=4, nbest=3))


def test_fixed_span_steps_that_cuda_graphs_replay_equal_the_eager_search(monkeypatch):
    # StepGraphs(capture=False) runs exactly what a captured graph replays (attention over a fixed
    # span of positions, masked beyond the current one; in-place reordering) without capturing it.
    from nmtcli.inference.graphs import StepGraphs

    # The decoder cache is empty memory, which may hold NaN: make it hold NaN, so that a position
    # read before it is written (or zeroed) shows in the results.
    empty, empty_like = torch.empty, torch.empty_like
    monkeypatch.setattr(torch, "empty", lambda *a, **k: _poisoned(empty(*a, **k)))
    monkeypatch.setattr(torch, "empty_like", lambda *a, **k: _poisoned(empty_like(*a, **k)))
    model = tiny_model(8, vocab_size=30)
    src = _batch(SENTENCES)
    for sync_every in (1, 4):
        graphs = StepGraphs(bucket=4, capture=False)
        fixed = beam_search(model, src, beam=4, nbest=2, sync_every=sync_every, graphs=graphs)
        assert _as_lists(fixed) == _as_lists(beam_search(model, src, beam=4, nbest=2, sync_every=1))


def _poisoned(t: torch.Tensor) -> torch.Tensor:
    return t.fill_(float("nan")) if t.is_floating_point() else t


class NoReads:
    """Within it, an operation that reads a value back to the host fails: a CUDA graph can only record a step whose
    every operation stays on the device, so no .item(), .tolist(), nonzero() or Python branch on a tensor's value.
    Each of those either dispatches an operation that reads a value (_local_scalar_dense, or an output shape that
    depends on values) or goes through tolist/numpy, so a dispatch mode and those methods, made to refuse, prove it
    on a CPU. (TorchDynamo with fullgraph=True would too, but cannot trace index_select into a view, which the
    captured step's reorder is.) `tolist=False`: the dispatch mode alone."""

    def __init__(self, monkeypatch, tolist: bool = True):
        from torch.utils._python_dispatch import TorchDispatchMode

        aten = torch.ops.aten
        reads = {aten._local_scalar_dense.default, aten.item.default, aten.is_nonzero.default, aten.equal.default,
                 aten.nonzero.default, aten.masked_select.default, aten.unique_dim.default, aten._unique2.default}

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                assert func not in reads, f"a step reads a value back: {func}"
                return func(*args, **(kwargs or {}))

        self.mode, self.monkeypatch, self.tolist = Mode(), monkeypatch, tolist

    def __enter__(self):
        self.patching = self.monkeypatch.context()
        patched = self.patching.__enter__()
        if self.tolist:
            for name in ("tolist", "numpy", "__array__"):
                patched.setattr(torch.Tensor, name, _refuse)
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
        self.patching.__exit__(*exc)


def _refuse(*args, **kwargs):
    raise AssertionError("a step reads a value back: tolist/numpy")


@pytest.mark.parametrize("prefixes", [None, [[11, 12, 13], [], [4], [25, 26, 27, 28], []]])
def test_a_search_step_never_reads_a_value_back_to_the_host(monkeypatch, prefixes):
    from nmtcli.inference.beam import BeamSearch

    model = tiny_model(2, vocab_size=30)
    with torch.inference_mode():
        search = BeamSearch(model, _batch(SENTENCES), 4, 0.6, 1.0, 5, 2, "gnmt", 0, prefixes)
        expected = BeamSearch(model, _batch(SENTENCES), 4, 0.6, 1.0, 5, 2, "gnmt", 0, prefixes)
        for s in (search, expected):
            s.step()  # the first step decodes one row per sentence and grows the cache: eager, never captured
            s.state.cache.clear_unwritten()
            s.state.cache.fixed_span = 8
        with NoReads(monkeypatch):
            for _ in range(3):
                search.step()
        with pytest.raises(AssertionError, match="reads a value back"), NoReads(monkeypatch, tolist=False):  # the check can fail
            bool(search.scores[0, 0] > 0)
        for _ in range(3):
            expected.step()
    assert torch.equal(search.tokens, expected.tokens) and torch.equal(search.parents, expected.parents)
    assert torch.equal(search.last, expected.last)
    assert torch.allclose(search.scores, expected.scores)


def test_half_precision_decoding_rounds_only_the_matrix_products():
    # bf16 on a GPU (inference/precision.py): linear layers stored in bf16 and run under autocast,
    # while embeddings, layer norms and the residual stream stay fp32 as in training. CPU autocast
    # runs the same code path, so the translations can be checked against fp32 here.
    from nmtcli.inference.precision import autocast, to_half

    model = tiny_model(8, vocab_size=30)
    src = _batch(SENTENCES)
    reference = beam_search(model, src, beam=4, nbest=2)
    to_half(model, "bf16")
    kinds = {(type(m).__name__, p.dtype) for m in model.modules() for p in m.parameters(recurse=False)}
    assert kinds == {("Embedding", torch.float32), ("LayerNorm", torch.float32), ("Linear", torch.bfloat16)}
    with autocast(torch.device("cpu"), "bf16"):
        half = beam_search(model, src, beam=4, nbest=2)
    assert [[h.tokens for h in s] for s in half] == [[h.tokens for h in s] for s in reference]
    # bf16 keeps 8 significant bits: a sentence's score moves by a little, not by a token's worth.
    for ours, theirs in zip(half, reference):
        assert all(abs(a.score - b.score) < 0.1 for a, b in zip(ours, theirs))


def test_a_hypothesis_is_read_back_from_its_last_beam_through_the_parents():
    from nmtcli.inference.beam import backtrack

    # One sentence, 2 beams, 3 positions. Beam 0: tokens 5 6 7, each continuing beam 0; beam 1 took 8 at
    # position 1 from beam 0 and 9 at position 2 from itself: its hypothesis is 5 8 9.
    tokens = torch.tensor([[[5, 6, 7], [4, 8, 9]]])
    parents = torch.tensor([[[0, 0, 0], [0, 0, 1]]])
    ended = torch.tensor([[1, 0, 1]])  # beam 1 after 3 positions, beam 0 after 3, beam 1 after 2 (5 8)
    length = torch.tensor([[3, 3, 2]])
    assert backtrack(tokens, parents, ended, length).tolist() == [[[5, 8, 9], [5, 6, 7], [5, 8, 0]]]


# --- ranking on the logits (issue 33) --------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_log_probabilities_from_the_row_normalizer_are_log_softmax_to_the_bit(monkeypatch, dtype):
    # A step turns only its chosen tokens' logits into log-probabilities, with each row's (shift, log_sum)
    # computed a few rows at a time: the values must be the ones log_softmax over the whole float32 tensor gives.
    from nmtcli.inference import outputs

    g = torch.Generator().manual_seed(0)
    logits = (torch.randn(37, 5000, generator=g) * torch.linspace(0.05, 12, 37)[:, None] + 3).to(dtype)
    full = torch.log_softmax(logits.float(), dim=-1)
    for chunk_bytes in (4 << 20, 4 * 5000 * 5):  # the whole at once; 5 rows a chunk, the last one short
        monkeypatch.setitem(outputs.NORMALIZER_CHUNK_BYTES, "cpu", chunk_bytes)
        normalizer = outputs.log_normalizer(logits)
        assert torch.equal(outputs.log_probs_of(logits, normalizer), full)
    columns = torch.randint(0, 5000, (37, 9), generator=g)
    assert torch.equal(outputs.log_probs_of(logits.gather(1, columns), normalizer), full.gather(1, columns))
    assert outputs.log_probs_of(torch.full((37, 1), float("-inf"), dtype=dtype), normalizer).isneginf().all()


def _reference_candidates(search, logits: torch.Tensor, generated: torch.Tensor, R: int):
    """BeamSearch.candidates written the straightforward way, as it was before issue 33: log-softmax over the
    whole float32 vocabulary, every rule applied to it, then topk. Also returns the masked log-probabilities."""
    cfg = search.model.config
    g, rows, V = int(generated), *logits.shape
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    log_probs[:, [cfg.pad_id, cfg.bos_id]] = float("-inf")
    if g <= int(search.min_len):
        log_probs[:, cfg.eos_id] = float("-inf")
    for r in range(rows):
        s = r // R
        if search.prefix is not None and g <= int(search.prefix_len[s]):  # inside its prefix: that token alone
            token = int(search.prefix[s, g - 1])
            kept = log_probs[r, token].clone()
            log_probs[r] = float("-inf")
            log_probs[r, token] = kept
    values, tokens = log_probs.topk(min(2 * search.scores.size(1), V), dim=1)
    for r in range(rows):
        if g > int(search.max_len[r // R]):  # at its length limit: EOS alone
            values[r] = float("-inf")
            values[r, 0] = log_probs[r, cfg.eos_id]
            tokens[r] = cfg.eos_id
    return values, tokens, log_probs


def _random_logits(g: torch.Generator, rows: int, V: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows of all kinds: flat and peaked, some led by EOS, some by a banned token (PAD or BOS)."""
    logits = torch.randn(rows, V, generator=g) * torch.empty(rows, 1).uniform_(0.1, 8, generator=g)
    lead = torch.randint(0, 4, (rows,), generator=g)  # 0 PAD, 2 BOS, 3 EOS; 1 (UNK): leave the row as drawn
    for r in range(rows):
        if int(lead[r]) != 1:
            logits[r, int(lead[r])] = logits[r].max() + 1.0
    return logits.to(dtype)


# Prefixes with every case a row inside its prefix can meet: a token allowed, EOS (allowed only after min_len),
# BOS (banned), none, one past the length limit.
RANDOM_PREFIXES = [[5, 6, 7, 8, 9, 10], [], [BOS_ID, 4], [4, EOS_ID], [4, 5, EOS_ID]]


def _in_vocabulary(sentences: list[list[int]], V: int) -> list[list[int]]:
    """The sentences with their word ids (4 and above) folded into a vocabulary of V."""
    return [[t if t < 4 else 4 + (t - 4) % (V - 4) for t in s] for s in sentences]


@pytest.mark.parametrize("V, dtype", [(7, torch.float32), (50, torch.float32), (3000, torch.float32), (3000, torch.bfloat16)])
@pytest.mark.parametrize("prefixes", [None, RANDOM_PREFIXES])
def test_a_step_ranks_its_candidates_on_the_logits_as_log_softmax_then_topk_would(V, dtype, prefixes):
    # Over random logits, with banned tokens leading rows, min length, prefixes and rows at their length limit:
    # the candidates (log-probabilities, best first, and tokens) equal the reference's. V = 7 has fewer than 2K
    # finite candidates a row; V = 3000 takes top_k_per_row's CPU block path; bf16 logits have ties.
    from nmtcli.inference.beam import BeamSearch

    model = tiny_model(11, vocab_size=V)
    src = _batch(_in_vocabulary(SENTENCES, V))
    g = torch.Generator().manual_seed(V)
    with torch.inference_mode():
        search = BeamSearch(model, src, 4, 0.6, 0.5, 2, 2, "gnmt", 3, prefixes and _in_vocabulary(prefixes, V))
        n, K = search.scores.shape
        assert len(set(search.max_len.tolist())) > 1
        for generated in range(1, search.steps + 2):  # past every sentence's limit too
            for R in (1, K):
                logits = _random_logits(g, n * R, V, dtype)
                position = torch.tensor([generated])
                values, tokens = search.candidates(logits.clone(), position, R)
                expected, expected_tokens, masked = _reference_candidates(search, logits, position, R)
                torch.testing.assert_close(values, expected, rtol=0, atol=1e-5)
                finite = values.isfinite()
                assert finite.any(1).sum() >= n * R // 2  # most rows offer something
                # Each finite candidate is its token at its (masked) log-probability; the tokens are the
                # reference's too, but where bf16 logits tie the order among the tied is topk's own.
                torch.testing.assert_close(masked.gather(1, tokens)[finite], values[finite], rtol=0, atol=1e-5)
                if dtype == torch.float32:
                    assert torch.equal(tokens[finite], expected_tokens[finite])


@pytest.mark.parametrize("V", [7, 3000])
def test_a_search_over_random_logits_equals_the_search_that_ranks_full_log_softmax(monkeypatch, V):
    # Whole searches whose decoder steps give random logits: the step that ranks logits against one whose
    # candidates are the straightforward reference's: the same tokens, scores and log-probabilities.
    from nmtcli.inference import beam
    from nmtcli.model import incremental

    class ReferenceSearch(beam.BeamSearch):
        def candidates(self, logits, generated, R):
            return _reference_candidates(self, logits, generated, R)[:2]

    def random_steps(seed):
        g = torch.Generator().manual_seed(seed)
        return lambda model, tokens, state, project=None: _random_logits(g, *incremental.decode_step(model, tokens, state).shape, torch.float32)

    model = tiny_model(12, vocab_size=V)
    src = _batch(_in_vocabulary(SENTENCES, V))
    results = {}
    for kind in (beam.BeamSearch, ReferenceSearch):
        for prefixes in (None, _in_vocabulary(RANDOM_PREFIXES, V)):
            monkeypatch.setattr(beam, "decode_step", random_steps(3))
            with torch.inference_mode():
                search = kind(model, src, 4, 0.6, 1.0, 4, 3, "gnmt", 2, prefixes)
                results[kind, prefixes is None] = search.run()
    for plain in (True, False):
        ours, reference = results[beam.BeamSearch, plain], results[ReferenceSearch, plain]
        assert [[h.tokens for h in s] for s in ours] == [[h.tokens for h in s] for s in reference]
        for a, b in zip(ours, reference):
            assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-5)
            assert [h.log_prob for h in a] == pytest.approx([h.log_prob for h in b], abs=1e-5)
    # nbest 3 of every sentence; with prefixes none where the prefix holds BOS, or EOS before min_len (2), and
    # the prefix alone where it ends in EOS later: the rules held, and the test compared hypotheses.
    assert [len(s) for s in results[beam.BeamSearch, True]] == [3] * 5
    assert [len(s) for s in results[beam.BeamSearch, False]] == [3, 3, 0, 0, 1]
