"""Forced decoding (`nmt translate --forced-decoding`) and word alignments (`--alignment`): inference/forced.py, alignment.py."""

from __future__ import annotations

import json
import random

import pytest
import torch

from corpus import VERBS, _noun_phrase
from nmtcli.inference.alignment import pharaoh, piece_links, word_of_piece
from nmtcli.inference.beam import beam_search
from nmtcli.inference.penalties import lp
from nmtcli.inference.forced import AttentionHeads, force_batch, force_ids, scored
from nmtcli.inference.greedy import greedy_search
from nmtcli.model.checkpoint import load_model
from nmtcli.model.incremental import decode_step, start_decoding

# Pairs of different lengths (ids without EOS), some target empty: one batch pads them all.
SOURCES = [[5, 17, 42, 8], [9], [100, 200, 300, 400, 500, 600, 7], [11, 12]]
TARGETS = [[33, 44], [], [8, 9, 10, 11, 12, 13], [77]]


@pytest.fixture(scope="module")
def model(random_model):
    return load_model(random_model, torch.device("cpu"))[0]


def stepwise_log_probs(model, source: list[int], target: list[int]) -> list[float]:
    """The reference: log P(y_t | y_<t, x) one position at a time with the search's incremental decoder."""
    cfg = model.config
    with torch.inference_mode():
        memory, src_mask = model.encode(torch.tensor([source + [cfg.eos_id]]))
        state = start_decoding(model, memory, src_mask)
        out, last = [], cfg.bos_id
        for token in target + [cfg.eos_id]:
            log_probs = torch.log_softmax(decode_step(model, torch.tensor([last]), state).float(), dim=-1)
            out.append(float(log_probs[0, token]))
            last = token
    return out


def test_forced_scores_equal_the_incremental_decoders_log_probs_step_by_step(model):
    forced = force_batch(model, SOURCES, TARGETS)
    for source, target, f in zip(SOURCES, TARGETS, forced):
        assert len(f.log_probs) == len(target) + 1  # EOS included
        assert f.log_probs == pytest.approx(stepwise_log_probs(model, source, target), abs=1e-4)


def test_batching_and_padding_do_not_change_scores(model):
    together = force_ids(model, SOURCES, TARGETS, batch_tokens=10_000, device=torch.device("cpu"))
    alone = force_ids(model, SOURCES, TARGETS, batch_tokens=1, device=torch.device("cpu"))  # one pair per batch
    heads = AttentionHeads(layer=1, head=0)
    with_attention = force_ids(model, SOURCES, TARGETS, batch_tokens=10_000, device=torch.device("cpu"), heads=heads)
    for a, b, c in zip(together, alone, with_attention):
        assert a.log_probs == pytest.approx(b.log_probs, abs=1e-5)
        assert a.log_probs == pytest.approx(c.log_probs, abs=1e-5)  # the layer computed in the open is the same layer
    single = force_batch(model, SOURCES[2:3], TARGETS[2:3], heads)[0].attention
    assert torch.allclose(with_attention[2].attention, single, atol=1e-5)
    first = AttentionHeads(layer=0)
    attention_only = force_batch(model, SOURCES, TARGETS, first, log_probs=False)  # stops after layer 0, no projection
    full = force_batch(model, SOURCES, TARGETS, first)
    assert all(a.log_probs == [] and torch.allclose(a.attention, f.attention, atol=1e-6) for a, f in zip(attention_only, full))
    assert with_attention[2].attention.shape == (len(TARGETS[2]) + 1, len(SOURCES[2]) + 1)
    assert torch.allclose(with_attention[2].attention.sum(-1), torch.ones(len(TARGETS[2]) + 1), atol=1e-5)


@pytest.mark.parametrize("penalty", ["gnmt", "power"])
def test_the_beam_searchs_hypotheses_score_what_forced_decoding_gives_them(model, penalty):
    cfg = model.config
    sources = [[5, 17, 42, 8, 99], [9, 10], [100, 200, 300]]
    src = torch.full((3, 6), cfg.pad_id)
    for i, s in enumerate(sources):
        src[i, : len(s) + 1] = torch.tensor(s + [cfg.eos_id])
    alpha = 0.6
    results = beam_search(model, src, beam=4, alpha=alpha, max_len_a=0, max_len_b=8, nbest=4, length_penalty=penalty)
    hyps = [(s, h) for s, hs in zip(sources, results) for h in hs]
    assert len(hyps) >= 9
    forced = force_batch(model, [s for s, _ in hyps], [h.tokens for _, h in hyps])
    for (_, h), f in zip(hyps, forced):
        assert f.log_prob == pytest.approx(h.log_prob, abs=1e-4)
        assert scored(f, [], alpha, penalty).score == pytest.approx(h.score, abs=1e-4)
        assert h.score == pytest.approx(h.log_prob / lp(len(h.tokens) + 1, alpha, penalty), abs=1e-5)
    greedy = [r[0] for r in greedy_search(model, src, max_len_a=0, max_len_b=8)]
    for h, f in zip(greedy, force_batch(model, sources, [h.tokens for h in greedy])):
        assert f.log_prob == pytest.approx(h.log_prob, abs=1e-4)


def test_pieces_map_to_the_whitespace_words_of_the_text():
    source = ["▁The", "▁small", "▁do", "g", "▁sees", "▁", "<0xE2>", "<0x80>", "<0x9C>", "hi", "!"]
    target = ["▁Der", "▁Hund", "▁klein", "▁sieht", "▁", "<0xE2>", "<0x80>", "<0x9C>", "hi", "!"]
    assert word_of_piece(source) == [0, 1, 2, 2, 3, 4, 4, 4, 4, 4, 4]
    assert word_of_piece(["a", "b", "▁c"]) == [0, 0, 1]  # no leading mark: the first piece still starts a word
    links = [(0, 0), (2, 1), (3, 1), (1, 2), (4, 3), (5, 4), (9, 8), (10, 9)]  # (source piece, target piece)
    assert pharaoh(links, source, target, "words") == "0-0 1-2 2-1 3-3 4-4"  # "do"+"g" -> one word; pieces of one word once
    assert pharaoh(links, source, target, "pieces") == "0-0 1-2 2-1 3-1 4-3 5-4 9-8 10-9"


def test_each_target_piece_is_aligned_to_its_most_attended_source_piece_without_eos():
    attention = torch.tensor([[0.1, 0.7, 0.2],  # predicts target 0: source 1
                              [0.2, 0.1, 0.7],  # predicts target 1: source 2 is EOS -> the best other, source 0
                              [0.6, 0.3, 0.1]])  # predicts EOS: not aligned (offset 0); target 1 (offset 1)
    assert piece_links(attention) == [(1, 0), (0, 1)]
    assert piece_links(attention, offset=1) == [(0, 0), (0, 1)]
    assert piece_links(attention[:1]) == [] and piece_links(attention[:, :1]) == []  # empty target or source


def aligned_pair(rng: random.Random) -> tuple[str, str, set[tuple[int, int]]]:
    """A pair of tests/corpus.py's rule (adjectives after their noun, the verb last) and its true word alignment."""
    words_src, words_tgt, links = [], [], set()
    for part in ("subject", "verb", "object"):
        if part == "verb":
            verb = rng.choice(sorted(VERBS))
            words_src.append(verb)
            verb_link = len(words_src) - 1
            continue
        src, tgt = _noun_phrase(rng)
        o, p, adjectives = len(words_src), len(words_tgt), len(src) - 2
        links |= {(o, p), (o + 1 + adjectives, p + 1)} | {(o + 1 + k, p + 2 + k) for k in range(adjectives)}
        words_src += src
        words_tgt += tgt
    words_tgt.append(VERBS[words_src[verb_link]])
    links.add((verb_link, len(words_tgt) - 1))
    return " ".join(words_src), " ".join(words_tgt), links


def test_alignments_of_a_rule_task_are_the_rule(trained_model, nmt_main, tmp_path):
    """The session's model learned tests/corpus.py's reordering: its alignments of given pairs (--forced-decoding
    --alignment) and of its own translations must be the true ones, over 90% of the links."""
    rng = random.Random(7)
    pairs = [aligned_pair(rng) for _ in range(40)]
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s, _, _ in pairs))
    (tmp_path / "tgt.txt").write_text("".join(t + "\n" for _, t, _ in pairs))
    out = nmt_main("translate", "-m", str(trained_model), "-i", str(tmp_path / "src.txt"), "--forced-decoding", "--target-file",
                   str(tmp_path / "tgt.txt"), "--output-format", "json", "--alignment", "words").stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == len(pairs)
    found = [{tuple(map(int, link.split("-"))) for link in r["alignment"].split()} for r in records]
    gold = sum(len(g) for _, _, g in pairs)
    right = sum(len(f & g) for f, (_, _, g) in zip(found, pairs))
    assert right / sum(len(f) for f in found) > 0.9 and right / gold > 0.9
    translated = nmt_main("translate", "-m", str(trained_model), "-i", str(tmp_path / "src.txt"), "--output-format", "json",
                          "--alignment", "words").stdout
    same = [(json.loads(line)["alignment"], r["alignment"]) for line, r, (_, t, _) in zip(translated.splitlines(), records, pairs)
            if json.loads(line)["translation"] == t]
    assert len(same) > 30 and all(a == b for a, b in same)  # a translation equal to the given target: the same links


def test_forced_decoding_writes_one_score_per_pair_as_the_search_ranks(random_model, nmt_main, tmp_path):
    sources = ["the dog sees a cat", "", "a red ball", "every child likes the old tree"]
    targets = ["der hund ein katze sieht", "der hund", "", "jeder kind der baum alt mag"]
    (tmp_path / "tgt.txt").write_text("".join(t + "\n" for t in targets))
    common = ("translate", "-m", str(random_model), "--forced-decoding", "--target-file", str(tmp_path / "tgt.txt"), "--alpha", "1.0")
    text = nmt_main(*common, input="".join(s + "\n" for s in sources)).stdout.splitlines()
    records = [json.loads(line) for line in nmt_main(*common, "--output-format", "json", input="".join(s + "\n" for s in sources)).stdout.splitlines()]
    assert len(text) == len(records) == 4
    for line, r in zip(text, records):
        assert r["length"] == len(r["tokens"]) + 1 == len(r["token_log_probs"])
        assert r["log_prob"] == pytest.approx(sum(r["token_log_probs"]), abs=1e-5)
        assert r["per_token"] == pytest.approx(r["log_prob"] / r["length"], abs=1e-5)
        assert r["score"] == pytest.approx(r["log_prob"] / ((5 + r["length"]) / 6), abs=1e-5)  # gnmt, alpha 1
        assert float(line) == pytest.approx(r["score"], abs=1e-5)
    assert records[2]["tokens"] == [] and records[2]["length"] == 1  # an empty target: P(EOS)


def test_forced_decoding_and_alignment_mistakes_are_one_error_line(random_model, nmt_main, tmp_path):
    from test_finetune import one_error_line

    (tmp_path / "src.txt").write_text("a\nb\nc\n")
    (tmp_path / "tgt.txt").write_text("x\ny\n")
    m = ("translate", "-m", str(random_model))
    line = one_error_line(nmt_main(*m, "-i", str(tmp_path / "src.txt"), "--forced-decoding", "--target-file", str(tmp_path / "tgt.txt"),
                                   check=False), "forced-decoding-line-counts")
    assert "has 2 line(s) but --input" in line and "has 3" in line
    piped = nmt_main(*m, "--forced-decoding", "--target-file", str(tmp_path / "tgt.txt"), "--window", "1", input="a\nb\nc\n", check=False)
    assert piped.returncode == 2 and piped.stderr.strip().splitlines()[-1].startswith("nmt: error: the targets end after line 2 but the input goes on")
    assert len(piped.stdout.splitlines()) == 2  # stdin is checked as it streams: the windows before the end were scored
    cases = {("--alignment", "words"): "--alignment needs --output-format json",
             ("--alignment", "phrases", "--output-format", "json"): "unknown --alignment 'phrases'",
             ("--alignment", "words", "--output-format", "json", "--engine", "ctranslate2"): "--alignment is not available with --engine ctranslate2",
             ("--forced-decoding", "--target-file", str(tmp_path / "tgt.txt"), "--engine", "ctranslate2"): "--forced-decoding is not available with --engine ctranslate2",
             ("--forced-decoding",): "--forced-decoding needs --target-file FILE",
             ("--target-file", str(tmp_path / "tgt.txt")): "--target-file is read only with --forced-decoding",
             ("--forced-decoding", "--target-file", str(tmp_path / "missing.txt")): "missing.txt does not exist",
             ("--forced-decoding", "--target-file", str(tmp_path / "tgt.txt"), "--sampling", "full"): "--forced-decoding does not go with --sampling",
             ("--forced-decoding", "--target-file", str(tmp_path / "tgt.txt"), "--prefix-file", str(tmp_path / "tgt.txt")):
                 "--forced-decoding does not go with --prefix-file"}
    for flags, message in cases.items():
        result = nmt_main(*m, *flags, input="a\n", check=False)
        assert message in one_error_line(result), flags
