"""`nmt export ctranslate2` and `nmt translate --engine ctranslate2` against the native engine (`nmt` in-process)."""

from __future__ import annotations

import json

import pytest
from conftest import nmt_in_process

pytest.importorskip("ctranslate2")

LINES = [
    "the small dog sees a red ball",
    "",
    "a king helps the old woman",
    "every young bird knows the letter",
    "the dog",
    "a big red car follows the quiet teacher",
    "xyz Wörter, die keiner kennt",
]
TEXT = "\n".join(LINES) + "\n"


def _native(model_dir, *flags):
    return nmt_in_process("translate", "-m", str(model_dir), *flags, input=TEXT).stdout


def _ct2(ct2_dir, *flags):
    return nmt_in_process("translate", "--engine", "ctranslate2", "-m", str(ct2_dir), *flags, input=TEXT).stdout


def test_greedy_output_equals_native_engine_on_a_random_model(random_model, tmp_path):
    out = tmp_path / "ct2"
    assert nmt_in_process("export", "ctranslate2", str(random_model), str(out)).stdout.strip() == str(out)
    assert {"model.bin", "nmt.json", "sentencepiece.model"} <= {p.name for p in out.iterdir()}
    meta = json.loads((out / "nmt.json").read_text())
    assert meta["format"] == "nmt-ctranslate2" and "ctranslate2" in meta["versions"]
    native = _native(random_model, "--beam", "1", "--max-len-b", "20")
    assert _ct2(out, "--beam", "1", "--max-len-b", "20") == native
    assert len(native.splitlines()) == len(LINES) and native.splitlines()[1] == ""


def test_a_student_with_a_shallower_decoder_exports_and_translates_as_the_native_engine(random_student, tmp_path):
    # 3 encoder layers, 1 decoder layer: CTranslate2 builds each stack at its own depth from num_layers=(3, 1).
    from nmtcli.model.checkpoint import load_model

    model, _ = load_model(random_student)
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (3, 1)
    out = tmp_path / "ct2"
    nmt_in_process("export", "ctranslate2", str(random_student), str(out))
    native = _native(random_student, "--beam", "1", "--max-len-b", "20")
    assert len(set(native.splitlines())) >= 5  # outputs depend on the input: the comparison means something
    assert _ct2(out, "--beam", "1", "--max-len-b", "20") == native
    flags = ("--beam", "4", "--length-penalty", "power", "--alpha", "1", "--max-len-b", "20")
    assert _ct2(out, *flags) == _native(random_student, *flags)


def test_imported_marian_model_exports_with_its_switches(marian_dir, tmp_path):
    # swish, sines-first positions, the logits bias and the pad-token decoder start all reach CTranslate2.
    nmt_in_process("import", "marian", str(marian_dir), "-o", str(tmp_path / "model"))
    nmt_in_process("export", "ctranslate2", str(tmp_path / "model"), str(tmp_path / "ct2"))
    native = _native(tmp_path / "model", "--beam", "1")
    assert len(set(native.splitlines())) >= 5  # outputs depend on the input: the comparison means something
    assert _ct2(tmp_path / "ct2", "--beam", "1") == native
    # int8 weights change the numbers a little, never the one-line-per-line contract.
    nmt_in_process("export", "ctranslate2", str(tmp_path / "model"), str(tmp_path / "int8"), "--quantization", "int8")
    assert len(_ct2(tmp_path / "int8", "--beam", "4", "--length-penalty", "power").splitlines()) == len(LINES)


def test_engine_errors_are_one_line(random_model, tmp_path):
    out = tmp_path / "ct2"
    nmt_in_process("export", "ctranslate2", str(random_model), str(out))
    again = nmt_in_process("export", "ctranslate2", str(random_model), str(out), check=False)
    assert again.returncode == 1 and "already exists (pass --force" in again.stderr
    nmt_in_process("export", "ctranslate2", str(random_model), str(out), "--force")
    gnmt = nmt_in_process("translate", "--engine", "ctranslate2", "-m", str(out), input=TEXT, check=False)
    assert gnmt.returncode == 1 and gnmt.stderr.strip().endswith("(pass --length-penalty power, or --beam 1)")
    not_ct2 = nmt_in_process("translate", "--engine", "ctranslate2", "-m", str(random_model), input=TEXT, check=False)
    assert "is not a CTranslate2 model written by nmt" in not_ct2.stderr and "Traceback" not in not_ct2.stderr


def test_the_python_api_opens_an_export_and_names_the_native_engine_for_what_it_cannot_do(random_model, tmp_path):
    """Translator.load(..., engine="ctranslate2"): the engine contract (inference/engine.py) on an exported dir, its
    translations those of `nmt translate --engine ctranslate2`; n-best lists, scores and HTML are the native engine's."""
    from nmtcli import NmtError, NotAvailable, Translator
    from nmtcli.inference.engine import Engine

    out = tmp_path / "ct2"
    nmt_in_process("export", "ctranslate2", str(random_model), str(out))
    ct2 = Translator.load(out, device="cpu", engine="ctranslate2")
    assert isinstance(ct2.engine, Engine) and ct2.engine.name == "ctranslate2" and ct2.source_language == "en"
    results = ct2.translate(LINES, beam=1, max_len_b=20)
    assert [t.text for t in results] == _ct2(out, "--beam", "1", "--max-len-b", "20").splitlines()
    assert results[1].text == "" and results[0].score is None and results[0].confidence is None
    with pytest.raises(NmtError, match=r"power length penalty \|Y\|\^alpha only"):
        ct2.translate(LINES)
    with pytest.raises(NmtError, match=r"returns the best translation only \(use the native engine for n-best lists\)"):
        ct2.translate(LINES, beam=2, nbest=2, length_penalty="power")
    with pytest.raises(NotAvailable, match="the ctranslate2 engine cannot score given translations"):
        ct2.score(LINES[:1], ["x"])
    with pytest.raises(NmtError, match="use the native engine for HTML"):
        ct2.translate_html("<p>the dog</p>", beam=1)
    with pytest.raises(NmtError, match="is not a CTranslate2 model written by nmt"):
        Translator.load(random_model, engine="ctranslate2")
    with pytest.raises(NmtError, match="unknown engine 'onnx'"):
        Translator.load(out, engine="onnx")


def test_the_coverage_penalty_reaches_ctranslate2s_search(random_model, tmp_path):
    """CTranslate2 adds GNMT's coverage penalty during its search: a large beta changes which translations win."""
    out = tmp_path / "ct2"
    nmt_in_process("export", "ctranslate2", str(random_model), str(out))
    flags = ("--beam", "4", "--length-penalty", "power", "--alpha", "1", "--max-len-b", "20")
    plain, covered = _ct2(out, *flags).splitlines(), _ct2(out, *flags, "--coverage-penalty", "5").splitlines()
    assert len(plain) == len(covered) == len(LINES) and covered[1] == ""
    assert plain != covered and _ct2(out, *flags, "--coverage-penalty", "0").splitlines() == plain


def test_a_calibrated_brevity_penalty_is_warned_of_at_export_and_a_weight_is_refused_by_ctranslate2(random_model, tmp_path):
    """CTranslate2's search has no brevity penalty: exporting a model that records one says so, and asking for one is an error."""
    import shutil

    from nmtcli.training.average import record_search

    model, out = tmp_path / "model", tmp_path / "ct2"
    shutil.copytree(random_model, model)
    record_search(model, {"brevity_penalty": 4.0, "length_ratio": 1.0})
    done = nmt_in_process("export", "ctranslate2", str(model), str(out))
    assert "brevity penalty 4, which CTranslate2 does not have" in done.stderr
    refused = nmt_in_process("translate", "--engine", "ctranslate2", "-m", str(out), "--beam", "1", "--brevity-penalty", "2",
                             input=TEXT, check=False)
    assert refused.returncode == 1 and "CTranslate2 has no brevity penalty" in refused.stderr and "Traceback" not in refused.stderr
    assert _ct2(out, "--beam", "1", "--brevity-penalty", "0") == _ct2(out, "--beam", "1")
    plain = nmt_in_process("export", "ctranslate2", str(random_model), str(tmp_path / "plain"))
    assert "brevity penalty" not in plain.stderr


def test_exporting_a_model_with_a_shortlist_says_the_export_leaves_it_out(random_model, tmp_path):
    import shutil

    import torch

    from nmtcli.inference.shortlist import Shortlist

    model = tmp_path / "model"
    shutil.copytree(random_model, model)
    Shortlist(torch.full((1000, 2), -1), torch.arange(10), {}).save(model)
    done = nmt_in_process("export", "ctranslate2", str(model), str(tmp_path / "ct2"))
    assert "has a lexical shortlist, which the export leaves out: CTranslate2 searches the whole vocabulary" in " ".join(done.stderr.split())
    assert not list((tmp_path / "ct2").glob("shortlist*"))
