"""`nmt import marian` against the real thing: transformers' MarianMTModel and MarianTokenizer.

The fixture trains a small swish MarianMTModel for a few hundred steps (so its outputs depend on
the input and end with EOS), saves it with `save_pretrained` beside real sentencepiece models, and
every test compares nmt's import of it with transformers on the same inputs.
"""

from __future__ import annotations

import json
import multiprocessing
import shutil
import signal
from pathlib import Path

import pytest
import torch
from conftest import nmt_in_process

transformers = pytest.importorskip("transformers")

SENTENCES = [
    "the small dog sees a red ball",
    "a king helps the old woman",
    "every young bird knows the letter",
    "the dog",
    "a big red car follows the quiet teacher",
    "the beautiful horse carries a cold apple",
    "xyz Wörter, die keiner kennt",
]
MAX_NEW_TOKENS = 30  # transformers counts EOS among the new tokens; nmt's a*|x|+b limit does not


@pytest.fixture(scope="module")
def imported(marian_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("imported") / "model"
    nmt_in_process("import", "marian", str(marian_dir), "-o", str(out))
    return out


@pytest.fixture(scope="module")
def hf(marian_dir):
    model = transformers.MarianMTModel.from_pretrained(marian_dir).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(marian_dir)
    return model, tokenizer


def _generate(hf, **kwargs) -> list[list[int]]:
    model, tokenizer = hf
    enc = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    # OPUS-MT's generation_config.json forbids the pad token (bad_words_ids); nmt never emits it either.
    out = model.generate(**enc, max_new_tokens=MAX_NEW_TOKENS, do_sample=False, bad_words_ids=[[pad]], **kwargs)
    result = []
    for row in out.tolist():
        tokens = row[1:]  # drop the decoder start token
        result.append(tokens[: tokens.index(eos)] if eos in tokens else tokens)
    return result


def _nmt_tokens(model_dir, hf, beam: int, **settings) -> list[list[int]]:
    """nmt's search on the imported model, fed the ids MarianTokenizer makes (tokenization has its own test)."""
    from nmtcli.inference.beam import beam_search
    from nmtcli.inference.greedy import greedy_search
    from nmtcli.model.checkpoint import load_model

    model, _ = load_model(model_dir)
    _, tokenizer = hf
    src = tokenizer(SENTENCES, return_tensors="pt", padding=True).input_ids
    if beam == 1:
        hyps = greedy_search(model, src, max_len_a=0, max_len_b=MAX_NEW_TOKENS - 1)
    else:
        hyps = beam_search(model, src, beam=beam, max_len_a=0, max_len_b=MAX_NEW_TOKENS - 1, **settings)
    return [h[0].tokens for h in hyps]


def test_import_records_marian_switches_and_files(imported, marian_dir):
    values = json.loads((imported / "config.json").read_text())
    hf_config = json.loads((marian_dir / "config.json").read_text())
    m = values["model"]
    assert (m["activation"], m["positions"], m["final_logits_bias"], m["norm"]) == ("swish", "sines_first", True, "post")
    assert m["bos_id"] == m["pad_id"] == hf_config["pad_token_id"] and m["eos_id"] == 0
    assert values["tokenizer"]["kind"] == "marian" and values["languages"] == {"source": "en", "target": "de"}
    for name in ("source.spm", "target.spm", "vocab.json"):
        assert (imported / name).read_bytes() == (marian_dir / name).read_bytes()
    info = json.loads(nmt_in_process("info", str(imported), "--json").stdout)
    # transformers stores both sinusoid tables as parameters and the logits bias as a buffer; nmt the reverse.
    theirs = sum(p.numel() for p in transformers.MarianMTModel.from_pretrained(marian_dir).parameters())
    assert info["parameters"] == theirs - 2 * hf_config["max_position_embeddings"] * hf_config["d_model"] + hf_config["vocab_size"]


def test_tokenizer_matches_marian_tokenizer(imported, hf):
    from nmtcli.inference.tokenizer import load_tokenizer

    values = json.loads((imported / "config.json").read_text())
    ours = load_tokenizer(imported, values)
    _, tokenizer = hf
    theirs = tokenizer(SENTENCES).input_ids
    assert [ids + [values["model"]["eos_id"]] for ids in ours.encode(SENTENCES)] == theirs
    with tokenizer.as_target_tokenizer() if hasattr(tokenizer, "as_target_tokenizer") else _nothing():
        target_ids = tokenizer(text_target=["der hund klein ein ball rot sieht"]).input_ids[0][:-1]
    assert ours.decode(target_ids) == tokenizer.decode(target_ids, skip_special_tokens=True) == "der hund klein ein ball rot sieht"
    with_unknown = target_ids[:2] + [values["model"]["unk_id"]] + target_ids[2:]  # <unk> is dropped, as there
    assert ours.decode(with_unknown) == tokenizer.decode(with_unknown, skip_special_tokens=True) == "der hund klein ein ball rot sieht"


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_logits_match_marian_within_1e_4(imported, hf):
    from nmtcli.model.checkpoint import load_model

    model, tokenizer = hf
    ours, _ = load_model(imported)
    enc = tokenizer(SENTENCES, text_target=[s.replace("the", "der") for s in SENTENCES], return_tensors="pt", padding=True)
    start = torch.full((len(SENTENCES), 1), model.config.decoder_start_token_id)
    decoder_in = torch.cat([start, enc["labels"][:, :-1]], dim=1)  # padded rows: pad is also the start token
    with torch.no_grad():
        theirs = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, decoder_input_ids=decoder_in).logits
        mine = ours(enc.input_ids, decoder_in)
    real = enc["labels"] != model.config.pad_token_id  # positions that predict a real target token
    assert theirs.shape == mine.shape
    assert (theirs - mine)[real].abs().max().item() < 1e-4
    assert theirs[real].abs().max().item() > 1.0  # the comparison is not between two near-zero tensors


def test_greedy_output_equals_generate_num_beams_1(imported, hf):
    theirs = _generate(hf, num_beams=1)
    assert _nmt_tokens(imported, hf, beam=1) == theirs
    assert len({tuple(t) for t in theirs}) >= 5 and all(0 < len(t) < MAX_NEW_TOKENS for t in theirs[:6])
    # The command line gives the same text, line for line.
    _, tokenizer = hf
    text = nmt_in_process("translate", "-m", str(imported), "--beam", "1", "--max-len-a", "0", "--max-len-b", str(MAX_NEW_TOKENS - 1),
                   input="\n".join(SENTENCES) + "\n").stdout.splitlines()
    assert text == [tokenizer.decode(t, skip_special_tokens=True) for t in theirs]


@pytest.fixture(scope="module")
def source_pieces_model(marian_dir, tmp_path_factory):
    """The fixture model made to emit pieces only source.spm knows: their output biases raised by 8.

    OPUS-MT's joint vocabulary holds both sides' pieces, so a real model emits such pieces (a name
    copied through, a rare word); this one emits them mid-sentence, at word starts and inside words.
    """
    import sentencepiece

    out = tmp_path_factory.mktemp("source-pieces") / marian_dir.name
    shutil.copytree(marian_dir, out)
    vocab = json.loads((out / "vocab.json").read_text())
    target = sentencepiece.SentencePieceProcessor(model_file=str(out / "target.spm"))
    source_only = {i for piece, i in vocab.items() if piece not in ("</s>", "<unk>", "<pad>") and target.piece_to_id(piece) == target.unk_id()}
    model = transformers.MarianMTModel.from_pretrained(marian_dir)
    with torch.no_grad():
        model.final_logits_bias[0, sorted(source_only)] += 8.0
    model.save_pretrained(out)
    return out, source_only


def test_pieces_only_the_source_model_knows_come_out_as_marian_tokenizer_writes_them(source_pieces_model, tmp_path):
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator
    from nmtcli.interop.marian import import_marian

    model_dir, source_only = source_pieces_model
    hf = transformers.MarianMTModel.from_pretrained(model_dir).eval(), transformers.MarianTokenizer.from_pretrained(model_dir)
    theirs = _generate(hf, num_beams=1)
    emitted = [i for ids in theirs[:2] for i in ids if i in source_only]
    assert len(emitted) >= 3 and any(not hf[1].convert_ids_to_tokens(i).startswith("\u2581") for i in emitted)
    import_marian(str(model_dir), tmp_path / "model")
    assert _nmt_tokens(tmp_path / "model", hf, beam=1) == theirs
    # What `nmt translate --beam 1` writes, text in and text out.
    translator = Translator(tmp_path / "model", settings=SearchSettings(beam=1, max_len_a=0, max_len_b=MAX_NEW_TOKENS - 1))
    text = list(translator.translate(SENTENCES))
    assert text == [hf[1].decode(t, skip_special_tokens=True) for t in theirs]
    assert "\u2581" not in "".join(text)


def _power_score(hf, i: int, ids: list[int], alpha: float) -> float:
    """transformers' model's log P(ids + EOS | sentence i) / (|ids| + 1)^alpha: what both searches rank by."""
    model, tokenizer = hf
    enc = tokenizer(SENTENCES[i : i + 1], return_tensors="pt")
    target = [*ids, model.config.eos_token_id]
    with torch.no_grad():
        log_probs = model(**enc, decoder_input_ids=torch.tensor([[model.config.decoder_start_token_id, *ids]])).logits.log_softmax(-1)[0]
    return sum(log_probs[t, y].item() for t, y in enumerate(target)) / len(target) ** alpha


@pytest.mark.parametrize("alpha", [1.0, 0.6])
def test_beam_output_equals_generate_num_beams_4_with_power_penalty(imported, hf, alpha):
    # transformers' default early stopping is a heuristic that can stop before the best hypothesis is found; "never"
    # is closer to the exact search nmt runs, but not exact either: where the two differ, nmt's translation must score
    # at least as well as transformers' (sentencepiece 0.2.3's fixture model repeats itself on one sentence, where
    # generate returned 28 tokens scoring -1.0331 and nmt 25 tokens scoring -1.0238). Its length penalty is |Y|^alpha
    # with EOS counted.
    theirs = _generate(hf, num_beams=4, length_penalty=alpha, early_stopping="never")
    mine = _nmt_tokens(imported, hf, beam=4, alpha=alpha, length_penalty="power")
    same = 0
    for i, (a, b) in enumerate(zip(mine, theirs)):
        same += a == b
        assert a == b or _power_score(hf, i, a, alpha) >= _power_score(hf, i, b, alpha) - 1e-5, (i, a, b)
    assert same >= len(SENTENCES) - 1, f"{same} of {len(SENTENCES)} the same: the searches differ more than at a tie"


def test_a_marian_model_with_a_shallower_decoder_imports_with_both_depths(marian_dir, tmp_path):
    # A distilled student's shape (Bergamot's are deeper in the encoder): the fixture's model with its decoder cut to one
    # layer. Before decoder_layers the import refused it (encoder_layers differs from decoder_layers).
    model = transformers.MarianMTModel.from_pretrained(marian_dir).eval()
    tokenizer = transformers.MarianTokenizer.from_pretrained(marian_dir)
    model.model.decoder.layers = model.model.decoder.layers[:1]
    model.config.decoder_layers = 1
    shallow = tmp_path / "shallow"
    shutil.copytree(marian_dir, shallow)
    model.save_pretrained(shallow)
    done = nmt_in_process("import", "marian", str(shallow), "-o", str(tmp_path / "model"))
    m = json.loads((tmp_path / "model" / "config.json").read_text())["model"]
    assert (m["layers"], m["decoder_layers"]) == (2, 1) and "2+1 layers" in done.stderr
    theirs = _generate((model, tokenizer), num_beams=1)
    assert len({tuple(t) for t in theirs}) >= 3  # outputs depend on the input: the comparison means something
    assert _nmt_tokens(tmp_path / "model", (model, tokenizer), beam=1) == theirs


def test_import_of_an_incomplete_dir_is_a_one_line_error(marian_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(marian_dir, broken)
    (broken / "vocab.json").unlink()
    result = nmt_in_process("import", "marian", str(broken), "-o", str(tmp_path / "out"), check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("nmt: error: ") and "vocab.json" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out" / "config.json").exists()


def test_import_reads_pytorch_model_bin_without_unpickling_code(marian_dir, tmp_path, hf):
    from safetensors.torch import load_file

    legacy = tmp_path / "legacy"
    shutil.copytree(marian_dir, legacy)
    torch.save(load_file(str(legacy / "model.safetensors")), legacy / "pytorch_model.bin")
    (legacy / "model.safetensors").unlink()
    nmt_in_process("import", "marian", str(legacy), "-o", str(tmp_path / "out"))
    assert _nmt_tokens(tmp_path / "out", hf, beam=1) == _generate(hf, num_beams=1)

    class Payload:  # a pickle that would run code when loaded without weights_only
        def __reduce__(self):
            return (print, ("executed",))

    torch.save({"model.shared.weight": Payload()}, legacy / "pytorch_model.bin")
    result = nmt_in_process("import", "marian", str(legacy), "-o", str(tmp_path / "evil"), check=False)
    assert result.returncode == 1 and "executed" not in result.stdout
    assert "nmt: error: cannot read" in result.stderr


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())} if directory.is_dir() else {}


@pytest.fixture(scope="module")
def forkserver():
    """Processes forked from a fresh interpreter that has only imported nmt: a try takes a fraction of a second.

    Forking pytest itself is not safe once torch's and tqdm's threads run (a lock one of them holds
    stays held in the child forever); a new interpreter per try would import torch each time.
    """
    context = multiprocessing.get_context("forkserver")
    # torch._dynamo is imported on first use of a meta-device tensor (the model card counts parameters
    # so), which takes seconds: once in the server, not in every child.
    context.set_forkserver_preload(["marian_fixture", "nmtcli.interop.marian", "nmtcli.hub", "pyarrow", "torch._dynamo"])
    return context


def _import_killed_after(forkserver, renames: int, marian_dir: Path, out: Path) -> bool:
    """Import in a child that NMT_TEST_FAULT SIGKILLs after `renames` files are renamed into place.

    Returns False when the import finished first. The kill is a real SIGKILL: no `finally` and no
    cleanup runs.
    """
    from marian_fixture import import_with_fault

    child = forkserver.Process(target=import_with_fault, args=(str(marian_dir), str(out), f"kill-after-rename:{renames}"))
    child.start()
    child.join()
    assert child.exitcode in (0, -signal.SIGKILL), f"the import failed in the child (exit code {child.exitcode})"
    return child.exitcode != 0


def test_an_import_killed_at_any_point_leaves_nothing_loadable_and_a_rerun_completes(marian_dir, forkserver, tmp_path, monkeypatch):
    from safetensors.torch import load_file, save_file

    from nmtcli.cli.common import MODELS_ROOT, default_model_dir
    from nmtcli.errors import NmtError
    from nmtcli.interop.marian import import_marian
    from nmtcli.model.checkpoint import load_model

    # The dir holds an earlier import of a model of the same shape: new weights under its config.json would load.
    other = tmp_path / "other"
    shutil.copytree(marian_dir, other)
    weights = load_file(str(other / "model.safetensors"))
    weights["final_logits_bias"] += 1.0
    save_file(weights, str(other / "model.safetensors"), metadata={"format": "pt"})
    import_marian(str(other), tmp_path / "previous" / marian_dir.name)
    import_marian(str(marian_dir), tmp_path / "expected" / marian_dir.name)
    previous, expected = _files(tmp_path / "previous" / marian_dir.name), _files(tmp_path / "expected" / marian_dir.name)
    assert previous["model.safetensors"] != expected["model.safetensors"]

    monkeypatch.chdir(tmp_path)
    out = MODELS_ROOT / marian_dir.name
    renames = 0
    while True:
        renames += 1
        shutil.rmtree(MODELS_ROOT, ignore_errors=True)
        out.mkdir(parents=True)
        for name, content in previous.items():
            (out / name).write_bytes(content)
        if not _import_killed_after(forkserver, renames, marian_dir, out.resolve()):
            break
        left = _files(out)
        if "config.json" in left:  # the old model untouched, or the new one whole
            assert left in (previous, expected), f"killed after {renames} renames"
        else:
            with pytest.raises(NmtError, match="has no config.json"):
                load_model(out)
        # The hidden dir the import was staging in is never the default model, even when it is complete.
        try:
            assert default_model_dir() == out and left in (previous, expected)
        except NmtError as e:
            assert "no model found" in e.message
        import_marian(str(marian_dir), out)  # the re-run completes
        assert _files(out) == expected
    # Killed after each file was staged and after each was moved in; then it ran to the end.
    assert renames == 2 * len(expected) + 1


def test_a_glossary_term_the_vocabulary_cannot_spell_comes_out_as_written(imported):
    # target.spm has no "Ω" nor "€": the term is text put into the translation, never <unk> pieces, and nothing is
    # refused halfway through (the check ran only when a line holding the term came, after earlier windows were written).
    from nmtcli import Translator

    translator = Translator.load(imported, device="cpu")
    lines = ["the small dog sees a red ball", "a king helps the old woman"]
    [plain_first, plain_second] = translator.translate(lines)
    first, second = translator.translate(lines, glossary={"dog": "Ωmega€"})
    assert first.text.count("Ωmega€") == 1 and "⁇" not in first.text and "<unk>" not in first.text
    assert second.text == plain_second.text  # no term: as without a glossary
    scored = translator.score([lines[0]], [first.text])[0]
    assert first.score == pytest.approx(scored.score, abs=1e-3)  # the model's score of what was written (its <unk> included)


def test_nmt_serve_puts_in_its_own_glossary_s_term_the_vocabulary_cannot_spell(imported):
    # Before, every request batched with a line holding such a term failed (500) where docs/serving.md promised 400.
    from test_prefix import _post_all

    from nmtcli.inference.glossary import glossary_of
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator
    from nmtcli.serve.app import ServeConfig, create_app
    from nmtcli.serve.models import ServedModel

    settings = SearchSettings(beam=2)
    config = ServeConfig(search=settings, glossaries=(("en", "de", glossary_of({"dog": "Ωmega€"})),))
    app = create_app([ServedModel("opus", "en", "de", Translator(imported, settings=settings))], config)
    (s1, termed), (s2, other) = _post_all(app, "/translate", [{"q": SENTENCES[0], "source": "en", "target": "de"},
                                                              {"q": SENTENCES[1], "source": "en", "target": "de"}])
    assert (s1, s2) == (200, 200) and "Ωmega€" in termed["translatedText"] and "Ωmega€" not in other["translatedText"]
