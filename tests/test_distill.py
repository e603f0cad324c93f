"""Large files translated in chunks (nmtcli/bulk.py: resumable, shared among ranks), `--closest-to`, and `nmt distill`."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import NMT, nmt_in_process, run_nmt


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


@pytest.fixture(scope="module")
def sources(corpus, tmp_path_factory) -> Path:
    """230 test sources, with an empty line, a CRLF line and one of invalid UTF-8 among them."""
    path = tmp_path_factory.mktemp("bulk") / "in.en"
    lines = Path(f"{corpus['test']}.en").read_bytes().split(b"\n")[:200]
    lines[7], lines[60], lines[133] = b"", lines[60] + b"\r", b"bad \xff byte"
    path.write_bytes(b"\n".join(lines + lines[:30]) + b"\n")
    return path


@pytest.fixture(scope="module")
def whole(trained_model, sources) -> str:
    """The same file translated in one piece (stdin to stdout)."""
    return run_nmt("translate", "-m", str(trained_model), "--threads", "1", input=sources.read_bytes()).stdout.decode("utf-8")


def test_chunked_translation_writes_what_one_piece_writes(trained_model, sources, whole, tmp_path):
    out = tmp_path / "out.de"
    result = nmt_in_process("translate", "-m", str(trained_model), "-i", str(sources), "-o", str(out), "--chunk-lines", "64", "--threads", "1")
    assert out.read_text(encoding="utf-8") == whole
    assert len(lines_of(out)) == 230 and lines_of(out)[7] == ""
    assert not (tmp_path / "out.de.parts").exists()
    assert "line 134: invalid UTF-8 replaced" in result.stderr  # numbered in the file, not in its chunk
    assert "230 lines, sha256" in result.stderr


def test_a_killed_translation_resumes_from_its_chunks(trained_model, sources, whole, tmp_path):
    out = tmp_path / "out.de"
    args = ("translate", "-m", str(trained_model), "-i", str(sources), "-o", str(out), "--chunk-lines", "50", "--threads", "1")
    # Renames: job.json, then each chunk's text and record; the 4th is chunk 1's text, killed before its record.
    killed = run_nmt(*args, env={"NMT_TEST_FAULT": "kill-after-rename:4"}, check=False)
    assert killed.returncode == -9 and not out.exists()
    parts = sorted(p.name for p in (tmp_path / "out.de.parts").iterdir())
    assert parts == ["000000.json", "000000.txt", "000001.txt", "job.json", "lock"]
    again = run_nmt(*args)
    assert "resuming" in again.stderr and "50 of 230 lines already translated" in again.stderr
    assert "translated 180 line(s)" in again.stderr
    assert out.read_text(encoding="utf-8") == whole


def test_a_chunk_cut_short_or_damaged_is_translated_again(trained_model, sources, whole, tmp_path):
    out = tmp_path / "out.de"
    args = ("translate", "-m", str(trained_model), "-i", str(sources), "-o", str(out), "--chunk-lines", "100", "--threads", "1")
    run_nmt(*args, env={"NMT_TEST_FAULT": "kill-after-rename:6"}, check=False)  # chunks 0 and 1 done
    parts = tmp_path / "out.de.parts"
    (parts / "000001.txt").write_text("cut\n")  # a text that is not its record's (a disk that lost it)
    record = json.loads((parts / "000000.json").read_text())
    (parts / "000000.txt").write_bytes(b"x" * record["bytes"])  # the size right, the contents wrong: found when joining
    failed = run_nmt(*args, check=False)
    assert failed.returncode == 1 and "chunk 0" in failed.stderr and "damaged" in failed.stderr
    assert "Traceback" not in failed.stderr and not out.exists()
    run_nmt(*args)
    assert out.read_text(encoding="utf-8") == whole


def test_a_resumed_translation_refuses_other_settings(trained_model, sources, tmp_path):
    out = tmp_path / "out.de"
    args = ("translate", "-m", str(trained_model), "-i", str(sources), "-o", str(out), "--chunk-lines", "50", "--threads", "1")
    run_nmt(*args, env={"NMT_TEST_FAULT": "kill-after-rename:3"}, check=False)
    other = run_nmt(*args, "--beam", "2", check=False)
    assert other.returncode == 2
    assert other.stderr.strip().splitlines()[-1].startswith("nmt: error: ") and "another translation" in other.stderr
    assert (tmp_path / "out.de.parts" / "000000.txt").exists()  # nothing lost


def test_two_ranks_write_what_one_process_writes(trained_model, sources, whole, tmp_path):
    out = tmp_path / "out.de"
    result = subprocess.run([NMT, "translate", "-m", str(trained_model), "-i", str(sources), "-o", str(out), "--chunk-lines", "40",
                             "--gpus", "2", "--device", "cpu"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "starting 2 ranks" in result.stderr and "by 2 ranks" in result.stderr
    assert out.read_text(encoding="utf-8") == whole


def test_forced_scores_in_chunks_are_the_scores_in_one_piece(trained_model, corpus, tmp_path):
    src, tgt = f"{corpus['test']}.en", f"{corpus['test']}.de"
    args = ("translate", "-m", str(trained_model), "--forced-decoding", "-i", src, "--target-file", tgt, "--threads", "1")
    one = nmt_in_process(*args).stdout
    nmt_in_process(*args, "-o", str(tmp_path / "scores"), "--chunk-lines", "32")
    assert (tmp_path / "scores").read_text() == one and len(one.splitlines()) == 200


def test_closest_to_keeps_the_nbest_translation_of_best_chrf(trained_model, corpus, tmp_path):
    from sacrebleu.metrics import CHRF

    src, ref = tmp_path / "in.en", tmp_path / "ref.de"
    src.write_text("".join(lines_of(Path(f"{corpus['test']}.en"))[i] + "\n" for i in range(40)), encoding="utf-8")
    # References that are not the model's best: each line's words reversed, so the closest is often another of the n-best.
    ref.write_text("".join(" ".join(reversed(line.split())) + "\n" for line in lines_of(Path(f"{corpus['test']}.de"))[:40]), encoding="utf-8")
    nbest = [json.loads(line)["nbest"] for line in nmt_in_process(
        "translate", "-m", str(trained_model), "-i", str(src), "--beam", "4", "--nbest", "4", "--output-format", "json").stdout.splitlines()]
    picked = lines_of(tmp_path / "out.de") if nmt_in_process(
        "translate", "-m", str(trained_model), "-i", str(src), "-o", str(tmp_path / "out.de"), "--beam", "4", "--nbest", "4",
        "--closest-to", str(ref)) else None
    chrf = CHRF()
    for hyps, reference, chosen in zip(nbest, lines_of(ref), picked):
        scores = [chrf.sentence_score(h["translation"], [reference]).score for h in hyps]
        assert chosen == hyps[scores.index(max(scores))]["translation"]
    assert sum(chosen != hyps[0]["translation"] for hyps, chosen in zip(nbest, picked)) > 0  # not merely the best
    refused = nmt_in_process("translate", "-m", str(trained_model), "-i", str(src), "--closest-to", str(ref), check=False)
    assert refused.returncode == 2 and "--nbest" in refused.stderr


# --- nmt distill ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_corpus(corpus, tmp_path_factory) -> Path:
    """300 training pairs, 30 validation and 30 test pairs of the session's corpus: a distillation in seconds."""
    root = tmp_path_factory.mktemp("distill-corpus")
    for split, count in (("train", 300), ("valid", 30), ("test", 30)):
        for lang in ("en", "de"):
            lines = lines_of(Path(f"{corpus[split]}.{lang}"))[:count]
            (root / f"{split}.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return root


def distill_args(teacher: Path, corpus: Path, out: Path, *more: str) -> list[str]:
    return ["distill", "-m", str(teacher), "--train", str(corpus / "train"), "--valid", str(corpus / "valid"), "--test",
            str(corpus / "test"), "--preset", "tiny", "--max-steps", "6", "--beam", "4", "--nbest", "4", "--chunk-lines", "128",
            "--device", "cpu", "-o", str(out), *more]


@pytest.fixture(scope="module")
def distilled(trained_model, small_corpus, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A distillation of the defaults into OUT, and a copy of it (its run dir left out) in OUT/../uninterrupted: the
    tests after test_distill_again_skips_what_is_done_and_redoes_what_changed find OUT changed (--drop-worst 10,
    --warmup 3), the copy as the defaults left it."""
    import shutil

    out = tmp_path_factory.mktemp("distill") / "work"
    result = nmt_in_process(*distill_args(trained_model, small_corpus, out))
    shutil.copytree(out, out.parent / "uninterrupted", ignore=shutil.ignore_patterns("run"))
    return out, result


def test_distill_runs_every_stage_and_reports(distilled, trained_model):
    out, result = distilled
    for command in ("$ nmt translate -m", "--closest-to", "$ nmt translate --forced-decoding", "$ nmt prepare --train",
                    "--vocab-from", "$ nmt train --data", "$ nmt average", "$ nmt shortlist"):
        assert command in result.stdout + result.stderr
    assert len(lines_of(out / "teacher" / "train.de")) == 300
    assert len(lines_of(out / "kept.en")) == len(lines_of(out / "kept.de")) == 285  # 5% of 300 dropped
    dropped = [json.loads(line) for line in (out / "dropped.jsonl").read_text(encoding="utf-8").split("\n")[:-1]]
    scores = [d["score"] for d in dropped]
    sources = lines_of(out / "distilled.en")
    assert all(d["source"] in sources for d in dropped) and not any(d["source"] in lines_of(out / "kept.en") for d in dropped)
    kept_scores = sorted(float(s) for s in lines_of(out / "teacher" / "scores.txt"))[15:]
    assert len(dropped) == 15 and scores == sorted(scores) and max(scores) <= min(kept_scores)
    report = json.loads((out / "report.json").read_text())
    assert [(r["model"], r["precision"], r["shortlist"]) for r in report["models"]] == [
        ("teacher", "fp32", False), ("student", "fp32", False), ("student", "int8", False), ("student", "int8", True)]
    assert report["int8_student_vs_teacher_1_thread"] == round(report["models"][3]["lines_per_s_1"] / report["models"][0]["lines_per_s_1"], 2)
    assert report["models"][0]["bleu"] > 50  # the teacher, on its own task
    assert report["lines_translated"] == 300 and report["lines_kept"] == 285
    assert all(r["lines_per_s_1"] > 0 and r["mb"] > 0 for r in report["models"])
    assert set(report["stages"]) == {"translate", "join", "score", "filter", "prepare", "train", "average", "shortlist"}  # those before it
    assert (out / "model" / "shortlist.safetensors").is_file()
    manifest = json.loads((out / "data" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["input_pairs"] == 285 and manifest["vocab_from"]["model"] == str(trained_model)
    # each target is the teacher's translation of its own source: the misaligned filter has nothing to find (as for
    # back-translated pairs), and dropped some 5% of them by chance
    assert manifest["settings"]["drop_misaligned"] is False and "misaligned" not in manifest["splits"]["train"]["dropped"]
    assert json.loads((out / "model" / "config.json").read_text())["model"]["vocab_size"] == \
        json.loads((trained_model / "config.json").read_text())["model"]["vocab_size"]


def test_distill_again_skips_what_is_done_and_redoes_what_changed(distilled, trained_model, small_corpus):
    out, _ = distilled
    again = nmt_in_process(*distill_args(trained_model, small_corpus, out))
    assert again.stderr.count("done already") == 9
    changed = nmt_in_process(*distill_args(trained_model, small_corpus, out, "--drop-worst", "10"))
    assert changed.stderr.count("done already") == 3  # translate, join, score; the filter onwards again
    assert len(lines_of(out / "kept.en")) == 270
    assert "starts again" in changed.stderr  # the student learns from the new data from scratch
    assert "resuming from" not in changed.stderr
    warmer = nmt_in_process(*distill_args(trained_model, small_corpus, out, "--drop-worst", "10", "--warmup", "3"))
    assert warmer.stderr.count("done already") == 5  # to the prepared data; another schedule: the student starts again
    assert "starts again" in warmer.stderr and "--warmup 3" in warmer.stdout + warmer.stderr
    # tiny's 200-step warmup is longer than --max-steps 6: `nmt train` says so, and not of a warmup of 3
    assert "--max-steps 6 ends inside the 200-step warmup" in changed.stderr and "ends inside" not in warmer.stderr
    assert json.loads((out / "run" / "config.json").read_text())["training"]["warmup"] == 3
    settled = nmt_in_process(*distill_args(trained_model, small_corpus, out, "--drop-worst", "10", "--warmup", "3"))
    assert settled.stderr.count("done already") == 9
    # tiny is pre-norm: a post-norm student is another student, trained from the start
    post = nmt_in_process(*distill_args(trained_model, small_corpus, out, "--drop-worst", "10", "--warmup", "3", "--norm", "post"))
    assert post.stderr.count("done already") == 5 and "starts again" in post.stderr and "--norm post" in post.stdout + post.stderr
    assert json.loads((out / "run" / "config.json").read_text())["model"]["norm"] == "post"
    assert json.loads((out / "model" / "config.json").read_text())["model"]["norm"] == "post"


# (stage, the rename after which it is killed), before the stage's record in stages.json (its last rename): translate
# and score after their first chunk, join and filter between their files, prepare after its text stage, average among
# the renames of the model dir; train after best/ and before its one checkpoint (tiny saves every 50 steps, the student
# trains 6: it starts again, nothing to resume), shortlist and report after their one file (done but not recorded).
KILLS = [("translate", 4), ("join", 1), ("score", 4), ("filter", 2), ("prepare", 8), ("train", 4), ("average", 5),
         ("shortlist", 1), ("report", 1)]


@pytest.mark.slow
def test_distill_killed_in_every_stage_finishes_with_the_student_of_an_uninterrupted_run(distilled, trained_model, small_corpus, tmp_path):
    out = distilled[0].parent / "uninterrupted"  # (distilled[0] itself an earlier test has distilled again with other flags)
    work = tmp_path / "work"
    args = distill_args(trained_model, small_corpus, work)
    said = {}
    for stage, renamed in KILLS:
        killed = run_nmt(*args, env={"NMT_TEST_FAULT": f"kill-in-stage:{stage}:{renamed}"}, check=False)
        assert killed.returncode == -9, f"{stage}: {killed.stderr[-2000:]}"
        done = json.loads((work / "stages.json").read_text()) if (work / "stages.json").exists() else {}
        assert stage not in done and all(name in done for name, _ in KILLS[:KILLS.index((stage, renamed))])
        said[stage] = killed.stderr
    assert "128 of 300 lines already translated" in said["join"]  # the translation resumed from the chunk it had done
    assert "128 of 300 lines already scored" in said["filter"]  # and the scores
    finished = run_nmt(*args)
    assert finished.stderr.count("done already") == len(KILLS) - 1  # each stage was done once, the report again
    for name in ("teacher/train.de", "distilled.en", "distilled.de", "teacher/scores.txt", "kept.en", "kept.de", "dropped.jsonl",
                 "data/train.en.bin", "data/train.de.bin", "model/model.safetensors"):
        assert (work / name).read_bytes() == (out / name).read_bytes(), name
    assert json.loads((work / "data" / "manifest.json").read_text())["stages"]["text"] == "reused"  # prepare resumed
    from safetensors.numpy import load_file

    lists = [load_file(w / "model" / "shortlist.safetensors") for w in (out, work)]  # (its metadata holds the check's lines/s)
    assert lists[0].keys() == lists[1].keys() and all((lists[0][k] == lists[1][k]).all() for k in lists[0])
    configs = [json.loads((w / "model" / "config.json").read_text()) for w in (out, work)]
    assert configs[1]["training"].pop("data_dir") == str(work / "data") and configs[0]["training"].pop("data_dir") == str(distilled[0] / "data")
    assert configs[0] == configs[1]
    reports = [json.loads((w / "report.json").read_text()) for w in (out, work)]
    assert [[(m["bleu"], m["chrf"]) for m in r["models"]] for r in reports][0] == [[(m["bleu"], m["chrf"]) for m in r["models"]] for r in reports][1]
    assert reports[1]["lines_kept"] == 285 and reports[1]["student_steps"] == 6


@pytest.mark.slow
def test_distill_with_a_reverse_model_drops_by_dual_conditional_cross_entropy(trained_model, reverse_model, small_corpus, tmp_path):
    import shutil

    import numpy as np

    work = tmp_path / "work"
    reverse = tmp_path / "reverse"
    shutil.copytree(reverse_model, reverse)
    result = nmt_in_process(*distill_args(trained_model, small_corpus, work, "--reverse-model", str(reverse)))
    both = result.stdout + result.stderr
    assert "--alpha 1 --brevity-penalty 0 -o" in both  # pure cross-entropies, the teacher's too
    assert "$ nmt translate --forced-decoding -m " + str(reverse) + " -s de -t en" in both
    h_f = -np.array([float(x) for x in lines_of(work / "teacher" / "scores.txt")])
    h_b = -np.array([float(x) for x in lines_of(work / "reverse" / "scores.txt")])
    dual = np.abs(h_f - h_b) + (h_f + h_b) / 2
    dropped = [json.loads(line) for line in lines_of(work / "dropped.jsonl")]
    worst = sorted(range(300), key=lambda i: (-dual[i], i))[:15]
    sources = lines_of(work / "distilled.en")
    assert [d["source"] for d in dropped] == [sources[i] for i in worst]
    assert [d["cross_entropy"] for d in dropped] == [round(float(dual[i]), 4) for i in worst]
    assert lines_of(work / "kept.en") == [s for i, s in enumerate(sources) if i not in worst]
    assert "dual conditional cross-entropy above" in result.stderr
    # Another reverse model (here: the same weights, written again): its scores and the filter onwards again.
    (reverse / "model.safetensors").write_bytes((reverse / "model.safetensors").read_bytes())
    again = nmt_in_process(*distill_args(trained_model, small_corpus, work, "--reverse-model", str(reverse)))
    assert again.stderr.count("done already") == 3 and "starts again" in again.stderr
    refused = nmt_in_process(*distill_args(trained_model, small_corpus, tmp_path / "other", "--reverse-model", str(trained_model)), check=False)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].endswith("translates en->de, not de->en (give a model that translates de->en)")
    assert not (tmp_path / "other").exists()


def test_distill_refuses_bad_input_in_one_line(trained_model, small_corpus, tmp_path):
    def refused(*args: str) -> str:
        result = nmt_in_process(*args, check=False)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        return result.stderr.strip().splitlines()[-1]

    assert "translates en->de" in refused(*distill_args(trained_model, small_corpus, tmp_path / "a"), "-s", "fr")
    (tmp_path / "empty.en").write_text("")
    (tmp_path / "empty.de").write_text("")
    empty = distill_args(trained_model, small_corpus, tmp_path / "b")
    empty[empty.index("--train") + 1] = str(tmp_path / "empty")
    assert "is empty" in refused(*empty)
    assert "not a model dir" in refused(*distill_args(small_corpus, small_corpus, tmp_path / "c"))
    (tmp_path / "short.en").write_text("a\nb\n")
    (tmp_path / "short.de").write_text("a\n")
    short = distill_args(trained_model, small_corpus, tmp_path / "d")
    short[short.index("--valid") + 1] = str(tmp_path / "short")
    assert "has 2 lines but" in refused(*short)
    # the student's flags, refused as `nmt train` refuses them, before the teacher translates anything
    assert "--norm must be 'post' or 'pre', not 'mid'" in refused(*distill_args(trained_model, small_corpus, tmp_path / "e"), "--norm", "mid")
    assert "unknown preset 'tiny11'" in refused(*distill_args(trained_model, small_corpus, tmp_path / "e"), "--preset", "tiny11")
    assert "--max-time 'soon' is not a duration" in refused(*distill_args(trained_model, small_corpus, tmp_path / "e"), "--max-time", "soon")
    assert not (tmp_path / "e").exists()


@pytest.mark.slow
def test_distill_from_an_imported_opus_mt_teacher(marian_dir, small_corpus, tmp_path):
    """An OPUS-MT-shaped teacher (random weights, transformers' layout) through every stage."""
    nmt_in_process("import", "marian", str(marian_dir), "-o", str(tmp_path / "teacher"))
    result = nmt_in_process(*distill_args(tmp_path / "teacher", small_corpus, tmp_path / "work"), "--drop-worst", "0")
    report = json.loads((tmp_path / "work" / "report.json").read_text())
    assert report["lines_kept"] == 300 and "teacher and student on the test split" in result.stderr
    assert (tmp_path / "work" / "model" / "shortlist.safetensors").is_file() and report["models"][-1]["shortlist"]  # of Marian's pieces
    manifest = json.loads((tmp_path / "work" / "data" / "manifest.json").read_text())
    assert manifest["vocab_from"]["kind"] == "marian"  # the teacher's own per-side tokenizers encoded the student's data
    tokenizer = [name for name in ("source.spm", "target.spm", "vocab.json") if (tmp_path / "teacher" / name).exists()]
    assert tokenizer == ["source.spm", "target.spm", "vocab.json"]
    for name in tokenizer:  # the student reads and writes text as its teacher does
        assert (tmp_path / "work" / "model" / name).read_bytes() == (tmp_path / "teacher" / name).read_bytes()


def test_what_would_lose_or_mix_lines_is_refused_in_one_line(trained_model, sources, tmp_path):
    from nmtcli.bulk import Job
    from nmtcli.errors import NmtError

    def refused(*args: str) -> str:
        result = nmt_in_process("translate", "-m", str(trained_model), *args, check=False)
        assert result.returncode == 2 and "Traceback" not in result.stderr
        return result.stderr.strip().splitlines()[-1]

    copy = tmp_path / "same.en"
    copy.write_bytes(sources.read_bytes())
    assert "is a file this command reads" in refused("-i", str(copy), "-o", str(copy))
    assert copy.read_bytes() == sources.read_bytes()
    utf16 = tmp_path / "utf16.en"
    utf16.write_bytes("the dog\nthe cat\n".encode("utf-16"))
    assert "is UTF-16" in refused("-i", str(utf16), "-o", str(tmp_path / "u.de"))
    utf16.write_text("the dog\nthe cat\n", encoding="utf-8")  # converted, as the error says: the same command now works
    assert nmt_in_process("translate", "-m", str(trained_model), "-i", str(utf16), "-o", str(tmp_path / "u.de")).returncode == 0
    assert len(lines_of(tmp_path / "u.de")) == 2
    stdin = nmt_in_process("translate", "-m", str(trained_model), input="the dog\nthe cat\n".encode("utf-16"), check=False)
    assert stdin.returncode == 2 and "is UTF-16" in stdin.stderr.decode()
    (tmp_path / "r.de").write_text("one\n")
    assert "--closest-to" in refused("-i", str(sources), "--nbest", "2", "--closest-to", str(tmp_path / "r.de"))
    stray = tmp_path / "x.de.parts"
    stray.mkdir()
    (stray / "000000.txt").write_text("from another job\n")
    assert "no job.json" in refused("-i", str(sources), "-o", str(tmp_path / "x.de"))
    held = Job([sources], tmp_path / "y.de", {"model": "a"}, 50)  # holds y.de.parts' lock, as a running command does
    with pytest.raises(NmtError, match="another command is writing"):
        Job([sources], tmp_path / "y.de", {"model": "a"}, 50)
    assert held.mine()


def test_distill_reruns_a_stage_whose_input_changed_and_refuses_a_foreign_record(trained_model, small_corpus, tmp_path):
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus, corpus)
    out = tmp_path / "work"
    args = distill_args(trained_model, corpus, out, "--max-steps", "2")
    nmt_in_process(*args)
    lines = lines_of(corpus / "train.en")
    lines[0] = "der hund sieht die katze"  # the training sources edited
    (corpus / "train.en").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    again = nmt_in_process(*args)
    assert again.stderr.count("done already") == 0 and lines_of(out / "distilled.en")[0] == lines[0]
    for foreign in ("[1, 2]", '{"translate": {"seconds": "x", "args": []}}'):
        (out / "stages.json").write_text(foreign)
        result = nmt_in_process(*args, check=False)
        assert result.returncode == 1 and "is not the record of nmt distill's stages" in result.stderr and "Traceback" not in result.stderr


def test_a_translation_cut_short_is_not_mixed_into_one_of_new_input(trained_model, small_corpus, tmp_path):
    """Killed in the teacher's translation (chunk 0 done), then a training source changes: the stage starts over
    instead of refusing the chunks of its earlier attempt."""
    import shutil

    corpus = tmp_path / "corpus"
    shutil.copytree(small_corpus, corpus)
    out = tmp_path / "work"
    args = distill_args(trained_model, corpus, out, "--max-steps", "2")
    # Renames: attempts.json, job.json, then chunk 0's text and record; killed after chunk 0.
    killed = run_nmt(*args, env={"NMT_TEST_FAULT": "kill-after-rename:4"}, check=False)
    assert killed.returncode == -9 and (out / "teacher" / "train.de.parts" / "000000.json").exists()
    lines = lines_of(corpus / "train.en")
    (corpus / "train.en").write_text("".join(line + "\n" for line in ["the dog sees a cat", *lines[1:]]), encoding="utf-8")
    again = run_nmt(*args)
    assert "resuming" not in again.stderr and len(lines_of(out / "teacher" / "train.de")) == 300
    assert lines_of(out / "distilled.en")[0] == "the dog sees a cat"


def test_one_piece_writes_wait_for_no_chunked_run_and_references_match_the_input(trained_model, sources, tmp_path):
    from nmtcli.bulk import Job

    held = Job([sources], tmp_path / "out.de", {"model": "a"}, 50)  # a chunked translation into out.de, running
    busy = nmt_in_process("translate", "-m", str(trained_model), "-o", str(tmp_path / "out.de"), input="the dog\n", check=False)
    assert busy.returncode == 2 and "another command is writing" in busy.stderr and held.mine()
    refs = tmp_path / "refs.de"
    refs.write_text("der hund\nzu viel\n")
    longer = nmt_in_process("translate", "-m", str(trained_model), "--nbest", "2", "--closest-to", str(refs), input="the dog\n", check=False)
    assert longer.returncode == 2 and "--closest-to has more lines than the input" in longer.stderr
