"""GNMT's coverage penalty (`--coverage-penalty`, inference/coverage.py): the beam's hypotheses reranked by
log P / lp + beta * sum_i log(min(attention on source token i, 1)), through the API, the CLI and the server."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import torch_threads
from nmtcli.inference.coverage import FLOOR, coverage_penalty

LINES = [f"the {word} sees a dog number {i}" + " and a cat" * (i % 4) for i, word in enumerate(["man", "woman", "child"] * 6)]


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield


def test_the_penalty_counts_each_source_token_up_to_one_and_leaves_out_eos_and_a_language_tag():
    # rows: target positions (the last predicts EOS); columns: 3 source tokens, then the source's EOS
    attention = torch.tensor([[0.4, 0.1, 0.0, 0.5],
                              [0.3, 0.2, 0.0, 0.5],
                              [0.1, 0.2, 0.0, 0.7]])
    # token 0: 0.8; token 1: 0.5; token 2: never attended -> the floor; EOS's 1.7 not counted
    assert coverage_penalty(attention, 0.5) == pytest.approx(0.5 * (math.log(0.8) + math.log(0.5) + math.log(FLOOR)))
    # first=1: token 0 is a language tag, left out
    assert coverage_penalty(attention, 0.5, first=1) == pytest.approx(0.5 * (math.log(0.5) + math.log(FLOOR)))
    assert coverage_penalty(attention, 0.0) == 0.0
    # a token attended to with more than 1 in all costs nothing, as one with exactly 1
    assert coverage_penalty(torch.tensor([[0.9, 0.1], [0.6, 0.4]]), 2.0) == 0.0


def test_the_beams_hypotheses_are_reranked_by_the_penalty_computed_from_the_models_attention(random_model):
    from nmtcli import Translator
    from nmtcli.inference.alignment import DEFAULT_HEADS, alignment_text
    from nmtcli.inference.penalties import lp
    from nmtcli.inference.forced import force_ids

    translator = Translator.load(random_model, device="cpu")
    plain = translator.translate(LINES, beam=4, nbest=4, max_len_a=0, max_len_b=12)
    beta = 2.0
    # with alignments: they are read from the attention the penalty read, each hypothesis's own after the reranking
    covered = translator.translate(LINES, beam=4, nbest=4, max_len_a=0, max_len_b=12, coverage_penalty=beta, alignment="pieces")
    assert translator.translate(LINES, beam=4, nbest=4, max_len_a=0, max_len_b=12, coverage_penalty=0) == plain
    engine = translator.engine
    ids = {piece: i for i, piece in enumerate(engine.pieces)}
    sources = engine.tokenizer.encode(LINES)
    changed = 0
    for source, before, after in zip(sources, plain, covered):
        # the same hypotheses, reranked: each one's score is now log P / lp + cp, best first
        assert sorted(h.text for h in before.nbest) == sorted(h.text for h in after.nbest)
        targets = [[ids[p] for p in h.tokens] for h in after.nbest]
        forced = force_ids(engine.model, [source] * len(targets), targets, 4096, engine.device, torch.no_grad, DEFAULT_HEADS, print,
                           log_probs=False)
        for h, f, tokens in zip(after.nbest, forced, targets):
            expected = h.log_prob / lp(len(tokens) + 1, 0.6) + coverage_penalty(f.attention, beta)
            assert h.score == pytest.approx(expected, abs=1e-4)
            assert h.alignment == alignment_text(f.attention, [engine.pieces[t] for t in source], h.tokens, "pieces")
        assert [h.score for h in after.nbest] == sorted((h.score for h in after.nbest), reverse=True)
        assert after.text == after.nbest[0].text
        changed += after.text != before.text
    assert changed > 0  # beta 2 on an untrained model's attention moves some lines' choice


def test_the_cli_and_the_api_take_the_penalty_and_refuse_a_negative_one_or_sampling(random_model, nmt_main):
    from nmtcli import Translator
    from nmtcli.errors import NmtError

    text = "\n".join(LINES) + "\n"
    flags = ("translate", "-m", str(random_model), "--threads", "1", "--max-len-a", "0", "--max-len-b", "12")
    out = nmt_main(*flags, "--coverage-penalty", "2", input=text).stdout.splitlines()
    translator = Translator.load(random_model, device="cpu")
    assert out == [t.text for t in translator.translate(LINES, max_len_a=0, max_len_b=12, coverage_penalty=2.0)]
    assert len(out) == len(LINES)
    refused = nmt_main(*flags, "--coverage-penalty", "-1", input=text, check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    refused = nmt_main(*flags, "--coverage-penalty", "0.5", "--sampling", "full", input=text, check=False)
    assert refused.returncode == 2 and "ranks a beam search's hypotheses" in refused.stderr and "Traceback" not in refused.stderr
    refused = nmt_main(*flags, "--coverage-penalty", "inf", input=text, check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    for value in (-0.5, "0.2", True, math.inf, math.nan, 11.0):
        with pytest.raises(NmtError):
            translator.translate(LINES[:1], coverage_penalty=value)
    # greedy search has one hypothesis: nothing to rerank, and the same output
    assert translator.translate(LINES, beam=1, coverage_penalty=1.0) == translator.translate(LINES, beam=1)


def test_a_server_applies_its_own_penalty_and_a_request_may_ask_for_another(random_model, tmp_path):
    from nmtcli import Translator
    from test_serve import Server, request, translate

    translator = Translator.load(random_model, device="cpu")
    expected = {beta: [t.text for t in translator.translate(LINES[:6], max_len_a=0, max_len_b=12, coverage_penalty=beta)]
                for beta in (0.0, 2.0)}
    assert expected[0.0] != expected[2.0]
    server = Server(["-m", str(random_model), "--threads", "1", "--max-len-a", "0", "--max-len-b", "12", "--coverage-penalty", "2"], tmp_path)
    try:
        assert translate(server, {"q": LINES[:6], "source": "en", "target": "de"})["translatedText"] == expected[2.0]
        status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES[:6], "coverage_penalty": 0})
        assert status == 200 and [r["translation"] for r in answer["translations"]] == expected[0.0], answer
        assert "coverage_penalty" not in answer["settings"]
        status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES[:6]})
        assert status == 200 and answer["settings"]["coverage_penalty"] == 2.0
        assert [r["translation"] for r in answer["translations"]] == expected[2.0]
        status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES[:1], "coverage_penalty": -1})
        assert status == 400 and "coverage_penalty" in answer["error"], answer
        status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES[:1], "sampling": "full", "coverage_penalty": 1})
        assert status == 400 and "coverage_penalty does not go with sampling" in answer["error"], answer
    finally:
        server.stop()
