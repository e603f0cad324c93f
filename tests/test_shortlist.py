"""Lexical shortlists (inference/shortlist.py, `nmt shortlist`): what they list, that a search over one is the search over
the vocabulary restricted to each sentence's own list, and what a user sees of them."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
import torch
from conftest import nmt_in_process
from safetensors.torch import save_file

from nmtcli.errors import NmtError
from nmtcli.inference import shortlist as shortlists
from nmtcli.inference.settings import SearchSettings
from nmtcli.inference.shortlist import Shortlist, learn, load
from nmtcli.inference.translator import Translator
from nmtcli.model.checkpoint import SHORTLIST_FILE

PER_PIECE, FREQUENT = 6, 20  # small lists: the tests' model has 1,000 pieces, and a batch must decode over fewer


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def listed(trained_model, prepared, tmp_path_factory):
    """A copy of the tests' model with a shortlist `nmt shortlist` learnt from its training data; the command's output."""
    model = tmp_path_factory.mktemp("shortlist") / "model"
    shutil.copytree(trained_model, model)
    result = nmt_in_process("shortlist", str(model), "--data", str(prepared), "--per-piece", str(PER_PIECE), "--frequent", str(FREQUENT),
                            "--device", "cpu")
    return model, result


def test_learn_lists_each_source_pieces_translation_first():
    rng = np.random.default_rng(0)
    fillers = np.arange(5, 10)  # target pieces every sentence has (articles, punctuation): the frequent ones
    pairs = []
    for _ in range(3000):
        source = rng.choice(np.arange(10, 60), size=rng.integers(2, 8), replace=False)
        target = np.concatenate([source[::-1] + 100, rng.choice(fillers, size=2)])  # each source piece s is target piece s + 100
        pairs.append((source, rng.permutation(target)))
    shortlist = learn(iter(pairs), 200, per_piece=3, frequent=5)
    assert shortlist.table.shape == (200, 3)
    assert torch.equal(shortlist.table[10:60, 0], torch.arange(110, 160))  # its translation, first
    assert bool((shortlist.table[60:] == -1).all()) and bool((shortlist.table[:10] == -1).all())  # pieces never seen as a source
    assert set(fillers.tolist()) <= set(shortlist.always.tolist())
    assert shortlist.info["pairs"] == 3000 and shortlist.info["learnt_from"] == 3000


def test_a_sentence_lists_its_pieces_translations_its_own_pieces_the_frequent_ones_and_its_prefix():
    table = torch.full((50, 2), -1)
    table[10] = torch.tensor([30, 31])
    table[11, 0] = 32
    shortlist = Shortlist(table, torch.tensor([5, 6]), {})
    src = torch.tensor([[10, 3, 0], [11, 12, 3]])  # right-padded with PAD (0), which is none of its pieces
    first, second = (set(ids.tolist()) for ids in shortlist.lists(src, [[40], []], (3, 1), 0))
    assert first == {30, 31, 5, 6, 3, 1, 10, 40}
    assert second == {32, 5, 6, 3, 1, 11, 12}


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_shortlist_of_every_piece_searches_exactly_as_the_whole_vocabulary(trained_model, corpus, monkeypatch, precision):
    """The restricted projection, its columns and masks, EOS, banned pieces and prefixes: with every piece listed, beam
    (n-best, prefixes) and greedy search give the same translations and scores as without a shortlist."""
    monkeypatch.setattr(shortlists, "WORTH", 1.01)  # a list of the whole vocabulary is not worth it, but must be right
    translator = Translator(trained_model, "cpu", precision=precision)
    lines = lines_of(Path(f"{corpus['test']}.en"))[:40]
    prefixes = ["die" if i % 3 == 0 else "" for i in range(len(lines))]
    everything = Shortlist(torch.full((translator.model.config.vocab_size, 1), -1), torch.arange(translator.model.config.vocab_size), {})
    for settings in (SearchSettings(beam=4, nbest=2), SearchSettings(beam=1)):
        translator.shortlist = None
        full = translator.translate_lines(lines, settings, prefixes)
        translator.shortlist = everything
        short = translator.translate_lines(lines, settings, prefixes)
        assert [[h.text for h in hyps] for hyps in short] == [[h.text for h in hyps] for hyps in full]
        assert np.allclose([h.score for hyps in short for h in hyps], [h.score for hyps in full for h in hyps], atol=1e-4)


def test_each_sentence_is_searched_over_its_own_list_alone_or_in_any_batch(listed, corpus):
    model, _ = listed
    translator = Translator(model, "cpu")
    assert translator.shortlist is not None
    lines = lines_of(Path(f"{corpus['test']}.en"))[:60]
    batched = translator.translate_lines(lines, SearchSettings(beam=4))
    alone = [translator.translate_lines([line], SearchSettings(beam=4))[0] for line in lines]
    assert [h[0].text for h in batched] == [h[0].text for h in alone]
    assert np.allclose([h[0].score for h in batched], [h[0].score for h in alone], atol=1e-4)
    for line, hyps in zip(lines, batched):
        src = torch.tensor([translator.tokenizer.encode([line])[0] + [translator.model.config.eos_id]])
        own = set(translator.shortlist.lists(src, (), (translator.model.config.eos_id, translator.model.config.unk_id))[0].tolist())
        pieces = {translator.pieces.index(p) for p in hyps[0].tokens}
        assert pieces <= own, (line, pieces - own)
    vocabulary = translator.model.config.vocab_size
    sizes = [len(set(translator.shortlist.lists(torch.tensor([translator.tokenizer.encode([line])[0]]))[0].tolist())) for line in lines]
    assert max(sizes) < vocabulary / 4  # each sentence's list is a small part of the vocabulary


def test_nmt_shortlist_checks_itself_and_translate_uses_it_unless_told_not_to(listed, corpus):
    model, result = listed
    assert result.returncode == 0, result.stderr
    assert "validation (200 lines): BLEU" in result.stderr and (model / SHORTLIST_FILE).is_file()
    info = load(model, 1000).info
    full, short = info["valid_bleu"]
    assert info["per_piece"] == PER_PIECE and info["frequent"] == FREQUENT and info["valid_lines"] == 200
    assert short >= full - 2.0  # the lexicon task: Model 1 lists every word's translation
    shown = nmt_in_process("info", str(model))
    assert "shortlist" in shown.stdout and f"{PER_PIECE} pieces a source piece" in shown.stdout
    source = Path(f"{corpus['test']}.en").read_text(encoding="utf-8")
    references = lines_of(Path(f"{corpus['test']}.de"))
    on = nmt_in_process("translate", "-m", str(model), "--device", "cpu", input=source).stdout.splitlines()
    off = nmt_in_process("translate", "-m", str(model), "--device", "cpu", "--no-shortlist", input=source).stdout.splitlines()
    plain = Translator(model, "cpu", SearchSettings(shortlist=False))
    assert off == [hyps[0].text for hyps in plain.translate_lines(source.splitlines())]  # --no-shortlist: the whole vocabulary
    assert len(on) == len(off) == len(references)
    on_bleu, off_bleu = (sacrebleu.corpus_bleu(h, [references]).score for h in (on, off))
    assert on_bleu >= off_bleu - 2.0 and on_bleu > 80


def test_nmt_score_scores_the_translations_a_user_gets_and_the_whole_vocabulary_s_apart(listed, prepared, tmp_path):
    import json

    from nmtcli.data.prepare import reference_lines

    model = tmp_path / "model"
    shutil.copytree(listed[0], model)  # its scores.json is written: the module's model stays as it was
    sources, references = reference_lines(prepared, "test", "en"), reference_lines(prepared, "test", "de")
    for flags in ([], ["--no-shortlist"]):
        scored = nmt_in_process("score", "-m", str(model), "--device", "cpu", "--json", *flags)
        assert scored.returncode == 0, scored.stderr
        bleu = next(x["score"] for x in json.loads(scored.stdout)["scores"] if x["name"] == "BLEU")
        translated = nmt_in_process("translate", "-m", str(model), "--device", "cpu", *flags, input="\n".join(sources) + "\n")
        assert bleu == pytest.approx(sacrebleu.corpus_bleu(translated.stdout.splitlines(), [references]).score, abs=1e-9)
    recorded = json.loads((model / "scores.json").read_text())
    name = next(iter(recorded)).removesuffix(" (no shortlist)")
    assert set(recorded) == {name, f"{name} (no shortlist)"}  # the whole vocabulary's score beside, not over, the user's


def test_a_shortlist_for_another_model_or_damaged_is_one_line(listed, prepared, marian_dir, tmp_path):
    model, _ = listed
    other = tmp_path / "other"
    shutil.copytree(model, other)
    moved = load(other, 1000)
    moved.info["vocabulary"] = {"sentencepiece.model": "0" * 64}  # learnt for another vocabulary of as many pieces
    moved.save(other)
    result = nmt_in_process("translate", "-m", str(other), "--device", "cpu", input="a dog\n", check=False)
    assert result.returncode != 0 and "another vocabulary" in result.stderr and "Traceback" not in result.stderr
    damaged = tmp_path / "damaged"
    shutil.copytree(model, damaged)
    data = (damaged / SHORTLIST_FILE).read_bytes()
    (damaged / SHORTLIST_FILE).write_bytes(data[: len(data) // 2])
    result = nmt_in_process("translate", "-m", str(damaged), "--device", "cpu", input="a dog\n", check=False)
    assert result.returncode != 0 and "not a readable shortlist" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "shortlist.safetensors is not a readable shortlist" in nmt_in_process("info", str(damaged)).stdout
    imported = tmp_path / "imported"
    nmt_in_process("import", "marian", str(marian_dir), "-o", str(imported))
    result = nmt_in_process("shortlist", str(imported), "--data", str(prepared), check=False)
    assert result.returncode != 0 and "was not prepared with the vocabulary" in result.stderr
    assert not (imported / SHORTLIST_FILE).exists()


def test_a_batch_whose_lists_cover_most_of_the_vocabulary_still_searches_each_sentence_over_its_own(listed, corpus, monkeypatch):
    """Where a batch's union of lists is too large to be worth gathering, the search projects onto the whole vocabulary
    (for_batch's fallback), but each sentence stays masked to its own list: it translates as it does alone."""
    model, _ = listed
    translator = Translator(model, "cpu", SearchSettings(batch_tokens=10_000))  # the 20 lines in one batch
    cfg = translator.model.config
    lines = lines_of(Path(f"{corpus['test']}.en"))[:20]
    encoded = [translator.tokenizer.encode([line])[0] + [cfg.eos_id] for line in lines]
    own = [translator.shortlist.lists(torch.tensor([ids]), (), (cfg.eos_id, cfg.unk_id))[0] for ids in encoded]
    single, union = max(len(set(ids.tolist())) for ids in own), len(set(torch.cat(own).tolist()))
    assert single < union
    monkeypatch.setattr(shortlists, "WORTH", (single + union) / 2 / cfg.vocab_size)  # alone restricted, the batch falls back
    batch = torch.tensor([ids + [cfg.pad_id] * (max(map(len, encoded)) - len(ids)) for ids in encoded])
    assert len(shortlists.for_batch(translator.model, translator.shortlist, batch, None)) == cfg.vocab_size
    assert len(shortlists.for_batch(translator.model, translator.shortlist, batch[:1, : len(encoded[0])], None)) < cfg.vocab_size
    for settings in (SearchSettings(beam=4), SearchSettings(beam=1)):
        batched = translator.translate_lines(lines, settings)
        alone = [translator.translate_lines([line], settings)[0] for line in lines]
        assert [h[0].text for h in batched] == [h[0].text for h in alone]
        assert np.allclose([h[0].score for h in batched], [h[0].score for h in alone], atol=1e-4)


def test_serve_no_shortlist_holds_for_both_endpoints(listed, corpus):
    """`nmt serve --no-shortlist`: /translate and /nmt/translate both search the whole vocabulary (/nmt/translate had made
    its own settings from the request and searched over the shortlist again). A score tells them apart: the softmax over
    a list gives each translation a little more probability than over the whole vocabulary."""
    from test_prefix import _post_all

    from nmtcli.serve.app import ServeConfig, create_app
    from nmtcli.serve.models import ServedModel

    model, _ = listed
    lines = lines_of(Path(f"{corpus['test']}.en"))[:12]
    whole = SearchSettings(shortlist=False)
    translator = Translator(model, "cpu", whole)
    expected = [hyps[0] for hyps in translator.translate_lines(lines, whole)]
    listed_scores = [hyps[0].score for hyps in Translator(model, "cpu").translate_lines(lines)]
    assert not np.allclose([h.score for h in expected], listed_scores, atol=1e-3)
    answers = [_post_all(create_app([ServedModel("tiny", "en", "de", translator)], ServeConfig(search=whole)), path, [body])[0]
               for path, body in (("/translate", {"q": lines, "source": "en", "target": "de"}), ("/nmt/translate", {"lines": lines}))]
    (status, libre), (nmt_status, records) = answers
    assert status == nmt_status == 200
    assert libre["translatedText"] == [h.text for h in expected]
    assert [r["translation"] for r in records["translations"]] == [h.text for h in expected]
    assert np.allclose([r["score"] for r in records["translations"]], [h.score for h in expected], atol=1e-4)


def _tensors(table, always, metadata: dict | None = None):
    info = {"format": shortlists.FORMAT, "info": "{}"} if metadata is None else metadata
    return lambda path: save_file({"table": table, "always": always}, str(path), info)


V = 1000
BAD_FILES = {
    "zero bytes": (lambda path: path.write_bytes(b""), "is not a readable shortlist (Error while deserializing header"),
    "other tensors": (lambda path: save_file({"weight": torch.zeros(2)}, str(path)), "is not a readable shortlist (File does not contain tensor table)"),
    "metadata not JSON": (_tensors(torch.zeros(V, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
                                   {"format": shortlists.FORMAT, "info": "{nope"}), "is not a readable shortlist (Expecting"),
    "no format": (_tensors(torch.zeros(V, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), {}), "is not an nmt shortlist"),
    "a float table": (_tensors(torch.full((V, 2), 1.5), torch.zeros(1)), "is not an nmt shortlist"),
    "a table of another vocabulary size": (_tensors(torch.zeros(100, 2, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)),
                                           "was made for a vocabulary of 100 pieces, but the model has 1,000"),
    "ids past the vocabulary": (_tensors(torch.full((V, 2), V + 5, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)),
                                "lists ids outside the model's vocabulary of 1,000 pieces"),
    "negative ids": (_tensors(torch.full((V, 2), -7, dtype=torch.int32), torch.tensor([-2], dtype=torch.int32)),
                     "lists ids outside the model's vocabulary of 1,000 pieces"),
    "a directory": (lambda path: path.mkdir(), "is not a file"),
    "a link to nothing": (lambda path: path.symlink_to(path.parent / "gone"), "is not a file"),
}


@pytest.mark.parametrize("what", BAD_FILES)
def test_a_damaged_or_foreign_shortlist_file_is_refused_in_one_line_that_says_what_is_wrong(what, tmp_path):
    make, expected = BAD_FILES[what]
    make(tmp_path / SHORTLIST_FILE)
    with pytest.raises(NmtError) as refused:
        load(tmp_path, V)
    assert refused.value.message.startswith(f"{tmp_path / SHORTLIST_FILE} {expected}") and "\n" not in str(refused.value)


def test_nmt_info_says_why_translate_refuses_a_shortlist_and_shows_odd_records_without_failing(listed, tmp_path):
    model, _ = listed
    for name, make in (("ids", _tensors(torch.full((V, 2), V, dtype=torch.int32), torch.zeros(1, dtype=torch.int32))),
                       ("odd", _tensors(torch.full((V, 2), -1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
                                        {"format": shortlists.FORMAT, "info": '{"valid_bleu": [1], "valid_lines_per_s": "x"}'}))):
        shutil.copytree(model, tmp_path / name)
        make(tmp_path / name / SHORTLIST_FILE)
    shown = nmt_in_process("info", str(tmp_path / "ids"))
    assert "shortlist.safetensors lists ids outside the model's vocabulary of 1,000 pieces" in " ".join(shown.stdout.split())
    refused = nmt_in_process("translate", "-m", str(tmp_path / "ids"), "--device", "cpu", input="a dog\n", check=False)
    assert refused.returncode == 1 and "lists ids outside the model's vocabulary" in refused.stderr and "Traceback" not in refused.stderr
    odd = nmt_in_process("info", str(tmp_path / "odd"))
    assert odd.returncode == 0 and "Traceback" not in odd.stderr and "shortlist" in odd.stdout


def test_nmt_shortlist_replaces_a_damaged_file_and_says_what_it_lacks_before_learning(listed, prepared, tmp_path):
    """A damaged shortlist stands in the way of neither `--no-shortlist` nor the `nmt shortlist` that replaces it (whose
    check had loaded the model dir's present file and failed on it); a data dir without the validation split the check
    needs, or a model that is no local dir, is refused before the learning, and nothing is written."""
    model, _ = listed
    damaged = tmp_path / "damaged"
    shutil.copytree(model, damaged)
    (damaged / SHORTLIST_FILE).write_bytes(b"\0" * 64)
    assert nmt_in_process("translate", "-m", str(damaged), "--device", "cpu", "--no-shortlist", input="a dog\n").stdout.strip()
    no_valid = tmp_path / "data"
    shutil.copytree(prepared, no_valid)
    (no_valid / "valid.en").unlink()
    refused = nmt_in_process("shortlist", str(damaged), "--data", str(no_valid), check=False)
    assert refused.returncode == 1 and "has no valid split (valid.en)" in refused.stderr and "learnt from" not in refused.stderr
    assert (damaged / SHORTLIST_FILE).read_bytes() == b"\0" * 64
    remade = nmt_in_process("shortlist", str(damaged), "--data", str(prepared), "--per-piece", str(PER_PIECE), "--frequent", str(FREQUENT),
                            "--device", "cpu")
    assert remade.returncode == 0 and load(damaged, V).info["valid_lines"] == 200
    hub = nmt_in_process("shortlist", "alice/tiny-en-de", "--data", str(prepared), check=False)
    assert hub.returncode == 1 and "alice/tiny-en-de is not a model dir" in hub.stderr and "nmt pull" in hub.stderr


def test_a_search_given_step_graphs_decodes_over_the_whole_vocabulary_even_where_they_are_off(listed, corpus):
    """A GPU's graphed beam search does without the shortlist; so must the same search once its graphs have turned
    themselves off (a failed capture), or its lines would translate one way or the other by what befell the graphs."""
    from nmtcli.inference.batches import _pad
    from nmtcli.inference.beam import beam_search
    from nmtcli.inference.graphs import StepGraphs

    model, _ = listed
    translator = Translator(model, "cpu")
    src = _pad(translator.model, translator.tokenizer.encode(lines_of(Path(f"{corpus['test']}.en"))[:8]), torch.device("cpu"))
    off = StepGraphs()
    off.enabled = False
    whole, short = beam_search(translator.model, src), beam_search(translator.model, src, shortlist=translator.shortlist)
    graphed = beam_search(translator.model, src, graphs=off, shortlist=translator.shortlist)
    assert [h[0].tokens for h in graphed] == [h[0].tokens for h in whole]
    assert np.allclose([h[0].score for h in graphed], [h[0].score for h in whole], atol=1e-5)
    assert not np.allclose([h[0].score for h in short], [h[0].score for h in whole], atol=1e-3)


def test_a_multilingual_model_s_shortlist_serves_the_directions_it_was_learnt_for(m2m100_dirs, tmp_path):
    """A shortlist learnt from en->de pairs lists German pieces: an imported M2M-100 translating into French with it would
    search for French among them. It records its direction, and the model's other directions search the whole vocabulary."""
    pytest.importorskip("transformers")
    from corpus import write_corpus

    model, data = tmp_path / "m2m100", tmp_path / "data"
    nmt_in_process("import", "m2m100", str(m2m100_dirs["m2m100"]), "-o", str(model))
    corpus = write_corpus(tmp_path / "corpus", {"train": 300, "valid": 20}, seed=5)
    nmt_in_process("prepare", "--vocab-from", str(model), "-s", "en", "-t", "de", "--train", str(corpus["train"]), "--valid",
                   str(corpus["valid"]), "--max-ratio", "3", "-o", str(data))
    made = nmt_in_process("shortlist", str(model), "--data", str(data), "--device", "cpu")
    assert "validation (20 lines)" in made.stderr
    lines = lines_of(Path(f"{corpus['valid']}.en"))[:6]
    settings = SearchSettings(beam=2, max_len_a=0, max_len_b=12)
    into_german = Translator(model, "cpu", settings, languages=("en", "de"))
    assert into_german.shortlist is not None and into_german.shortlist.info["directions"] == ["en-de"]
    tag = into_german.tokenizer.languages["de"]
    assert all(hyps[0].tokens[0] == tag for hyps in into_german._translate_window(list(enumerate(lines, 1))))  # the tag is forced in
    into_french = into_german.with_languages("en", "fr")  # `nmt serve`'s way to another direction
    assert into_french.shortlist is None and Translator(model, "cpu", settings, languages=("en", "fr")).shortlist is None
    whole = Translator(model, "cpu", replace(settings, shortlist=False), languages=("en", "fr"))
    assert list(into_french.translate(lines)) == list(whole.translate(lines))
    assert into_french.with_languages("en", "de").shortlist is into_german.shortlist


def test_a_killed_chunked_translation_resumes_only_with_the_shortlist_it_started_with(listed, corpus, tmp_path):
    """A shortlist added or deleted between a kill and the resume would join lines searched two ways: the resume is
    refused; with --no-shortlist the added file changes nothing, and the job resumes (it had been refused: the shortlist
    counted among the weights)."""
    from conftest import run_nmt

    model, _ = listed
    bare = tmp_path / "model"
    shutil.copytree(model, bare, ignore=shutil.ignore_patterns(SHORTLIST_FILE))
    source = tmp_path / "in.en"
    source.write_text("\n".join(lines_of(Path(f"{corpus['test']}.en"))[:30]) + "\n", encoding="utf-8")
    out = tmp_path / "out.de"
    args = ("translate", "-m", str(bare), "-i", str(source), "-o", str(out), "--chunk-lines", "10", "--threads", "1")
    killed = run_nmt(*args, env={"NMT_TEST_FAULT": "kill-after-chunk:1"}, check=False)
    assert killed.returncode == -9 and not out.exists()
    shutil.copy(model / SHORTLIST_FILE, bare / SHORTLIST_FILE)
    refused = run_nmt(*args, check=False)
    assert refused.returncode == 2 and "another translation" in refused.stderr
    resumed = run_nmt(*args, "--no-shortlist")
    assert "10 of 30 lines already translated" in resumed.stderr
    whole = Translator(bare, "cpu", SearchSettings(shortlist=False))
    assert lines_of(out) == list(whole.translate(lines_of(source)))
    out.unlink()
    run_nmt(*args, env={"NMT_TEST_FAULT": "kill-after-chunk:1"}, check=False)  # with the shortlist this time
    (bare / SHORTLIST_FILE).unlink()
    assert run_nmt(*args, check=False).returncode == 2


def test_a_model_averaged_over_a_dir_keeps_a_shortlist_of_its_vocabulary_and_drops_another_s(listed, trained_run, tmp_path):
    """`nmt average -o DIR` replaces a model dir's files and keeps the others: a shortlist learnt for the vocabulary of
    the model it replaced (which `nmt translate` would refuse) goes; one of the same vocabulary stays, and is said to."""
    model, _ = listed
    same, other = tmp_path / "same", tmp_path / "other"
    for d in (same, other):
        shutil.copytree(model, d)
    foreign = load(other, V)
    foreign.info["vocabulary"] = {"sentencepiece.model": "0" * 64}
    foreign.save(other)
    kept = nmt_in_process("average", str(trained_run), "--last", "1", "-o", str(same), "--no-calibrate")
    assert f"kept {same / SHORTLIST_FILE}" in " ".join(kept.stderr.split()) and load(same, V) is not None
    dropped = nmt_in_process("average", str(trained_run), "--last", "1", "-o", str(other), "--no-calibrate")
    assert f"removed {other / SHORTLIST_FILE}" in " ".join(dropped.stderr.split()) and not (other / SHORTLIST_FILE).exists()
    assert nmt_in_process("translate", "-m", str(other), "--device", "cpu", input="a dog\n").stdout.strip()
