"""`nmt import m2m100` and `nmt import nllb` against the real thing: transformers' M2M100ForConditionalGeneration
with M2M100Tokenizer and with NllbTokenizer, and `nmt translate --target-lang` on what they import.

The fixture (tests/m2m100_fixture.py) trains a tiny random M2M-100 a few steps and saves it with `save_pretrained`
beside a real sentencepiece model, with M2M100Tokenizer and (its rows renumbered) with NllbTokenizer; and every test compares nmt's import of
it with transformers on the same inputs: the ids the tokenizer makes, the logits, and `generate`'s output ids
(greedy and beam 4) for two target languages.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from conftest import nmt_in_process, torch_threads

transformers = pytest.importorskip("transformers")

from test_marian import SENTENCES  # noqa: E402 - the same lines as the Marian import is checked on

MAX_NEW_TOKENS = 24  # transformers counts the target tag and EOS among the new tokens; nmt's a*|x|+b limit counts the tag only
# en->de is the direction the fixture trained; en->fr's tag the model never saw in training (greedy reaches the limit there).
KINDS = {"m2m100": [("en", "de"), ("en", "fr")], "nllb": [("eng_Latn", "deu_Latn"), ("eng_Latn", "fra_Latn")]}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one thread is fastest, and on a loaded machine many times faster than two."""
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def originals(m2m100_dirs):
    return m2m100_dirs


@pytest.fixture(scope="module")
def imported(originals, tmp_path_factory):
    out = tmp_path_factory.mktemp("imported")
    for kind, path in originals.items():
        nmt_in_process("import", kind, str(path), "-o", str(out / kind))
    return {kind: out / kind for kind in KINDS}


@pytest.fixture(scope="module")
def hf(originals):
    return {kind: (transformers.M2M100ForConditionalGeneration.from_pretrained(path).eval(), transformers.AutoTokenizer.from_pretrained(path))
            for kind, path in originals.items()}


def _tag_id(tokenizer, code: str) -> int:
    return tokenizer.get_lang_id(code) if hasattr(tokenizer, "get_lang_id") else tokenizer.convert_tokens_to_ids(code)


def _generate(model, tokenizer, source: str, target: str, **kwargs) -> list[list[int]]:
    """transformers' output ids, the decoder start dropped, cut at EOS: the target tag first."""
    tokenizer.src_lang = source
    enc = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    pad, eos = model.config.pad_token_id, model.config.eos_token_id
    # nmt never emits pad; at its length limit it ends the line with EOS, as forced_eos_token_id does
    out = model.generate(**enc, forced_bos_token_id=_tag_id(tokenizer, target), max_new_tokens=MAX_NEW_TOKENS, do_sample=False,
                         bad_words_ids=[[pad]], forced_eos_token_id=eos, **kwargs)
    rows = [row[1:] for row in out.tolist()]
    return [row[: row.index(eos)] if eos in row else row for row in rows]


def _nmt(model_dir, source: str, target: str, beam: int, **settings):
    """nmt's Translator on the imported model, text in: each line's ids (the target tag first) and its text."""
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator

    search = SearchSettings(beam=beam, max_len_a=0, max_len_b=MAX_NEW_TOKENS - 1, **settings)
    translator = Translator(model_dir, settings=search, languages=(source, target))
    hyps = translator._translate_window(list(enumerate(SENTENCES, 1)))
    return [h[0].tokens for h in hyps], list(translator.translate(SENTENCES))


@pytest.mark.parametrize("kind", KINDS)
def test_import_records_the_fairseq_switches_languages_and_licence(imported, originals, kind):
    values = json.loads((imported[kind] / "config.json").read_text())
    m = values["model"]
    assert (m["norm"], m["positions"], m["position_offset"], m["activation"], m["scale_embedding"], m["final_logits_bias"]) == \
        ("pre", "fairseq", 2, "relu", True, False)
    assert m["language_tags"] and m["bos_id"] == m["eos_id"] == 2 and m["pad_id"] == 1
    assert values["languages"] == {"source": "mul", "target": "mul"} and values["tokenizer"]["kind"] == "multilingual"
    languages = values["tokenizer"]["languages"]
    if kind == "m2m100":
        assert len(languages) == 100 and languages["de"] == "__de__"
    else:
        assert list(languages) == ["eng_Latn", "deu_Latn", "fra_Latn", "spa_Latn", "zho_Hans", "arb_Arab"]
    assert (imported[kind] / "sentencepiece.bpe.model").read_bytes() == (originals[kind] / "sentencepiece.bpe.model").read_bytes()
    info = nmt_in_process("info", str(imported[kind])).stdout
    licence = "cc-by-nc-4.0" if kind == "nllb" else "mit"
    assert values["license"] == licence and f"license        {licence}" in info
    assert ("non-commercial use only" in info) == (kind == "nllb")
    assert ("deu_Latn" if kind == "nllb" else " de ") in info.split("languages")[1]
    assert f'license: "{licence}"' in (imported[kind] / "README.md").read_text()


def test_a_model_with_a_shallower_decoder_imports_with_both_depths(originals, hf, tmp_path):
    # The fixture's M2M-100 with its decoder cut to one layer: each stack at its own depth, the same logits as transformers.
    from nmtcli.model.checkpoint import load_model

    _, tokenizer = hf["m2m100"]
    shallow = transformers.M2M100ForConditionalGeneration.from_pretrained(originals["m2m100"]).eval()
    shallow.model.decoder.layers = shallow.model.decoder.layers[:1]
    shallow.config.decoder_layers = 1
    shutil.copytree(originals["m2m100"], tmp_path / "shallow")
    shallow.save_pretrained(tmp_path / "shallow")
    done = nmt_in_process("import", "m2m100", str(tmp_path / "shallow"), "-o", str(tmp_path / "model"))
    ours, values = load_model(tmp_path / "model")
    assert (values["model"]["layers"], values["model"]["decoder_layers"]) == (2, 1) and "2+1 layers" in done.stderr
    assert (len(ours.encoder.layers), len(ours.decoder.layers)) == (2, 1)
    tokenizer.src_lang = "en"
    enc = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    decoder_in = torch.cat([torch.full((len(SENTENCES), 1), 2), torch.full((len(SENTENCES), 1), _tag_id(tokenizer, "de")),
                            enc.input_ids[:, 1:6]], dim=1)
    with torch.no_grad():
        theirs = shallow(input_ids=enc.input_ids, attention_mask=enc.attention_mask, decoder_input_ids=decoder_in).logits
        mine = ours(enc.input_ids, decoder_in)
    assert (theirs - mine).abs().max().item() < 1e-5 and theirs.abs().max().item() > 1.0


@pytest.mark.parametrize("kind", KINDS)
def test_tokenizer_matches_transformers(imported, hf, kind):
    from nmtcli.inference.tokenizer import load_tokenizer

    _, tokenizer = hf[kind]
    (source, _), _ = KINDS[kind]
    values = json.loads((imported[kind] / "config.json").read_text())
    ours = load_tokenizer(imported[kind], values)
    tokenizer.src_lang = source
    tag = ours.languages[ours.code(source, "source")]
    assert [[tag, *ids, 2] for ids in ours.encode(SENTENCES)] == tokenizer(SENTENCES).input_ids
    assert any(3 in ids for ids in ours.encode(SENTENCES))  # the line with unknown characters has <unk>


@pytest.mark.parametrize("kind", KINDS)
def test_logits_match_transformers_exactly(imported, hf, kind):
    from nmtcli.model.checkpoint import load_model

    model, tokenizer = hf[kind]
    (source, target), _ = KINDS[kind]
    tokenizer.src_lang = source
    enc = tokenizer(SENTENCES, return_tensors="pt", padding=True)
    decoder_in = torch.cat([torch.full((len(SENTENCES), 1), 2), torch.full((len(SENTENCES), 1), _tag_id(tokenizer, target)),
                            enc.input_ids[:, 1:6]], dim=1)
    ours, _ = load_model(imported[kind])
    with torch.no_grad():
        theirs = model(input_ids=enc.input_ids, attention_mask=enc.attention_mask, decoder_input_ids=decoder_in).logits
        mine = ours(enc.input_ids, decoder_in)
    assert (theirs - mine).abs().max().item() < 1e-5 and theirs.abs().max().item() > 1.0


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("kind", KINDS)
def test_translations_equal_generate_with_the_target_tag_forced(imported, hf, kind, beam):
    model, tokenizer = hf[kind]
    for source, target in KINDS[kind]:
        search = {"num_beams": 1} if beam == 1 else {"num_beams": 4, "length_penalty": 1.0, "early_stopping": "never"}
        theirs = _generate(model, tokenizer, source, target, **search)
        if beam > 1:  # at the limit transformers' forced EOS counts log-probability 0, nmt's the model's: beams that reach it rank differently
            assert all(len(t) < MAX_NEW_TOKENS - 1 for t in theirs), "a best hypothesis reached the length limit: not comparable"
        mine, text = _nmt(imported[kind], source, target, beam, **({} if beam == 1 else {"alpha": 1.0, "length_penalty": "power"}))
        assert mine == theirs, f"{kind} {source}->{target}, beam {beam}"
        assert all(ids[0] == _tag_id(tokenizer, target) for ids in theirs)
        assert len({tuple(t) for t in theirs}) >= 2  # outputs depend on the input (NLLB's fixture at beam 4: 2 since the packages of Nov 2026)
        # The text is transformers' decoding without its special tokens (M2M100Tokenizer keeps the tag: dropped here).
        assert text == [tokenizer.decode(t[1:], skip_special_tokens=True) for t in theirs]


def test_translate_takes_iso_codes_writes_the_pair_and_refuses_a_missing_or_unknown_language(imported):
    model = str(imported["nllb"])
    by_code = nmt_in_process("translate", "-m", model, "--target-lang", "deu_Latn", "--beam", "1", "--max-len-b", "10",
                             input="the dog\n\na king\n").stdout
    by_iso = nmt_in_process("translate", "-m", model, "-t", "de", "-s", "en", "--beam", "1", "--max-len-b", "10",
                            "--output-format", "json", input="the dog\n\na king\n").stdout.splitlines()
    records = [json.loads(line) for line in by_iso]
    assert [r["translation"] for r in records] == by_code.splitlines() and records[1]["translation"] == ""
    assert all((r["source_lang"], r["target_lang"]) == ("eng_Latn", "deu_Latn") for r in records)
    assert "deu_Latn" not in " ".join(records[0]["tokens"])  # the tag is not part of the translation

    missing = nmt_in_process("translate", "-m", model, input="the dog\n", check=False)
    assert missing.returncode == 2 and missing.stderr.strip() == (
        f"nmt: error: {model} is multilingual (6 languages): name the language to translate into with --target-lang "
        f"(`nmt info {model}` lists its languages)")
    unknown = nmt_in_process("translate", "-m", model, "-t", "deutsch", input="the dog\n", check=False)
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert f"nmt: error: {model} has no language 'deutsch' (--target-lang); the nearest it has: deu_Latn" in unknown.stderr
    split = nmt_in_process("translate", "-m", model, "-t", "de", "--split-sentences", "--beam", "1", "--max-len-b", "10",
                           "--output-format", "json", input="the dog sees a king. a king helps the dog.\n").stdout
    assert len(json.loads(split)["sentences"]) == 2 and json.loads(split)["target_lang"] == "deu_Latn"
    exported = nmt_in_process("export", "ctranslate2", model, str(imported["nllb"].parent / "ct2"), check=False)
    assert exported.returncode == 1 and "its CTranslate2 export is not available yet" in exported.stderr
    m2m = nmt_in_process("translate", "-m", str(imported["m2m100"]), "-t", "deu_Latn", "-s", "eng", "--beam", "1", "--max-len-b", "10",
                         "--output-format", "json", input="the dog\n").stdout
    assert (json.loads(m2m)["source_lang"], json.loads(m2m)["target_lang"]) == ("en", "de")


def test_finetuning_an_imported_model_keeps_its_vocabulary_and_tags_and_validates_through_them(imported, hf, tmp_path):
    """`nmt prepare --vocab-from` encodes a pair as transformers' tokenizer does for training (the source tag first, the
    labels the target tag first); `nmt train --init` on it validates with the tags (its BLEU is `nmt translate -s -t` +
    `nmt score`'s), and the averaged model dir has the imported tokenizer, tags and licence, and still translates any pair."""
    from corpus import write_corpus

    from nmtcli.data.shards import Shard

    corpus = write_corpus(tmp_path / "corpus", {"train": 200, "valid": 12}, seed=5)
    data = {}
    for kind, (source, target) in (("m2m100", ("en", "de")), ("nllb", ("eng_Latn", "deu_Latn"))):
        data[kind] = tmp_path / f"data-{kind}"
        nmt_in_process("prepare", "--vocab-from", str(imported[kind]), "-s", "en", "-t", "de", "--train", str(corpus["train"]),
                       "--valid", str(corpus["valid"]), "--max-ratio", "3", "-o", str(data[kind]))
        manifest = json.loads((data[kind] / "manifest.json").read_text())
        assert manifest["language_tags"] == {"source": source, "target": target} and manifest["tokenizer"]["kind"] == "multilingual"
        tokenizer = hf[kind][1]
        tokenizer.src_lang, tokenizer.tgt_lang = source, target
        sources, targets = (Path(f"{corpus['valid']}.{side}").read_text().splitlines() for side in ("en", "de"))
        encoded = tokenizer(sources, text_target=targets)
        src, tgt = Shard(data[kind] / "valid.en", manifest["vocab_size"]), Shard(data[kind] / "valid.de", manifest["vocab_size"])
        assert [list(src[i]) + [2] for i in range(len(sources))] == encoded["input_ids"]  # + </s>, which batches add
        assert [list(tgt[i]) + [2] for i in range(len(targets))] == encoded["labels"]
    wrong = nmt_in_process("prepare", "--vocab-from", str(imported["nllb"]), "-s", "en", "-t", "deutsch", "--train", str(corpus["train"]),
                           "--valid", str(corpus["valid"]), "-o", str(tmp_path / "wrong"), check=False)
    assert wrong.returncode == 2 and "has no language 'deutsch' (-t); the nearest it has: deu_Latn" in wrong.stderr
    assert not (tmp_path / "wrong").exists()

    run, model = tmp_path / "run", tmp_path / "finetuned"
    nmt_in_process("train", "--init", str(imported["nllb"]), "--data", str(data["nllb"]), "-o", str(run), "--max-steps", "2",
                   "--valid-every", "2", "--valid-bleu", "12", "--lr", "1e-3", "--device", "cpu")
    nmt_in_process("average", str(run), "--last", "1", "-o", str(model))
    validated = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "valid_bleu" in line][-1]
    # validation searches as the paper does: the model's calibrated brevity penalty (nmt average) left out
    translated = nmt_in_process("translate", "-m", str(model), "-s", "en", "-t", "de", "--brevity-penalty", "0",
                                input=Path(f"{corpus['valid']}.en").read_text()).stdout
    scored = json.loads(nmt_in_process("score", "-", "--ref", f"{corpus['valid']}.de", "--json", input=translated).stdout)
    assert validated["valid_bleu"] == round(scored["scores"][0]["score"], 4)  # metrics.jsonl keeps 4 decimals
    base, tuned = (json.loads((d / "config.json").read_text()) for d in (imported["nllb"], model))
    assert tuned["tokenizer"] == base["tokenizer"] and tuned["model"]["language_tags"] and tuned["license"] == base["license"]
    assert all((model / name).read_bytes() == (imported["nllb"] / name).read_bytes() for name in ("sentencepiece.bpe.model", "vocab.json"))
    french = json.loads(nmt_in_process("translate", "-m", str(model), "-t", "fr", "--output-format", "json", "--max-len-b", "5",
                                       input="the dog\n").stdout)
    assert french["target_lang"] == "fra_Latn" and french["tokens"] and "fra_Latn" not in french["tokens"]


def test_import_of_another_architecture_names_the_importers(originals, tmp_path):
    other = tmp_path / "bert"
    shutil.copytree(originals["m2m100"], other)
    hf_config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**hf_config, "model_type": "bert"}))
    for kind, source in (("m2m100", other), ("nllb", other), ("marian", originals["nllb"])):
        result = nmt_in_process("import", kind, str(source), "-o", str(tmp_path / "out"), check=False)
        error = result.stderr.strip().splitlines()[-1]
        assert result.returncode == 1 and error.startswith("nmt: error: ") and "Traceback" not in result.stderr
        assert all(f"`nmt import {k}`" in error for k in ("marian", "m2m100", "nllb")), error
    wrong = nmt_in_process("import", "m2m100", str(originals["nllb"]), "-o", str(tmp_path / "out"), check=False)
    assert f"run `nmt import nllb {originals['nllb']}`" in wrong.stderr
    assert not (tmp_path / "out" / "config.json").exists()


def test_language_codes_resolve_iso_639_1_and_639_3_through_one_table():
    from nmtcli.inference.language_codes import M2M100_CODES, NLLB_CODES, iso_639_1, nearest, resolve

    assert len(M2M100_CODES) == 100 and len(NLLB_CODES) == 202
    for typed, nllb, m2m100 in [("de", "deu_Latn", "de"), ("deu", "deu_Latn", "de"), ("DE", "deu_Latn", "de"), ("deu_Latn", "deu_Latn", "de"),
                                ("zh", "zho_Hans", "zh"), ("ar", "arb_Arab", "ar"), ("fa", "pes_Arab", "fa"), ("ceb", "ceb_Latn", "ceb"),
                                # BCP 47 (issue 51): a region dropped or naming a script; a script asked for never given another
                                ("pt-BR", "por_Latn", "pt"), ("en-US", "eng_Latn", "en"), ("es-419", "spa_Latn", "es"),
                                ("zh-TW", "zho_Hant", None), ("zh-HK", "zho_Hant", None), ("zh-CN", "zho_Hans", "zh"),
                                ("zh-Hans", "zho_Hans", "zh"), ("zh-Hant", "zho_Hant", None), ("zho_Hant", "zho_Hant", None),
                                ("sr-Latn", None, None)]:
        assert (resolve(typed, NLLB_CODES), resolve(typed, M2M100_CODES)) == (nllb, m2m100), typed
    assert resolve("deutsch", NLLB_CODES) is None and resolve("xx", M2M100_CODES) is None
    assert nearest("deutsch", NLLB_CODES)[0] == "deu_Latn" and nearest("eng_Latm", NLLB_CODES)[0] == "eng_Latn"
    assert (iso_639_1("deu_Latn"), iso_639_1("de"), iso_639_1("arb_Arab"), iso_639_1("ast_Latn")) == ("de", "de", "ar", "ast")


@pytest.mark.parametrize("kind", KINDS)
def test_a_glossary_term_is_put_into_a_multilingual_model_s_translation(imported, kind):
    # The language tags are no words: the term lands among the words, once, and the tag stays first (tokens, score).
    from nmtcli import Translator

    source, target = KINDS[kind][0]
    translator = Translator.load(imported[kind], device="cpu", source_lang=source, target_lang=target)
    [plain] = translator.translate([SENTENCES[0]], max_len_b=MAX_NEW_TOKENS - 1)
    [termed] = translator.translate([SENTENCES[0]], glossary={"dog": "Köter"}, max_len_b=MAX_NEW_TOKENS - 1)
    assert termed.text.count("Köter") == 1 and not termed.text.startswith(("__", "deu_"))
    scored = translator.score([SENTENCES[0]], [termed.text])[0]
    assert termed.log_prob == pytest.approx(scored.log_prob, abs=1e-3) and plain.text != termed.text


def test_a_multilingual_translation_has_one_confidence_whole_or_split_into_sentences(imported):
    # issue 51: the language tag was counted as a token of the whole text's confidence but not of a split one's.
    from nmtcli import Translator

    translator = Translator.load(imported["nllb"], device="cpu", source_lang="eng_Latn", target_lang="deu_Latn")
    [whole] = translator.translate([SENTENCES[0]], max_len_b=MAX_NEW_TOKENS - 1)
    [split] = translator.translate([SENTENCES[0]], split_sentences=True, max_len_b=MAX_NEW_TOKENS - 1)
    assert len(split.sentences) == 1 and split.text == whole.text
    assert split.confidence == pytest.approx(whole.confidence, abs=1e-9)


@pytest.mark.parametrize("kind", KINDS)
def test_a_multilingual_model_s_alignments_and_scores_leave_its_language_tags_out(imported, kind):
    # issue 51: the tags were a word of each side (every alignment position one too far, a target word too many)
    # and a forced score counted the target tag's probability, which the search forces: two confidences a sentence.
    from nmtcli import Translator

    source, target = KINDS[kind][0]
    translator = Translator.load(imported[kind], device="cpu", source_lang=source, target_lang=target)
    [found] = translator.translate([SENTENCES[0]], alignment="words", max_len_b=MAX_NEW_TOKENS - 1)
    [given] = translator.score([SENTENCES[0]], [found.text], alignment="words")
    links = [tuple(map(int, link.split("-"))) for link in found.alignment.split()]
    assert links and max(s for s, _ in links) < len(SENTENCES[0].split()) and max(t for _, t in links) < len(found.text.split())
    [pieces] = translator.translate([SENTENCES[0]], alignment="pieces", max_len_b=MAX_NEW_TOKENS - 1)
    assert max(int(link.split("-")[1]) for link in pieces.alignment.split()) < len(pieces.tokens)
    assert given.alignment == found.alignment and given.tokens == found.tokens and len(given.token_log_probs) == len(given.tokens) + 1
    assert given.score == pytest.approx(found.score, abs=1e-4) and given.confidence == pytest.approx(found.confidence, abs=1e-6)
