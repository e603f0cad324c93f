"""`nmt score --compat paper`: the paper's tokenized, compound-split BLEU, as tensor2tensor's get_ende_bleu.sh.

The expected strings and numbers below are what Moses' own scripts printed (tokenizer.perl and
multi-bleu.perl as of June 2017, `perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`), and the BLEU
values are also derived by hand in the comments. Set MOSES_SCRIPTS to the `scripts/` dir of a
mosesdecoder checkout from before November 2018 (commit 9fc964d changed how tokenizer.perl splits a
final period; the paper's BLEU predates it) to compare against those scripts on the demo corpus too.
"""

from __future__ import annotations

import json
import lzma
import math
import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from sacrebleu.metrics import BLEU

from nmtcli.errors import NmtError
from nmtcli.scoring import PAPER_BLEU, moses_tokenize, multi_bleu, paper_bleu, split_compounds

# tokenizer.perl -l de (2017) and the ##AT## split, line by line.
GERMAN = {
    "Der Fahrer-Schutz ist gut.": "Der Fahrer ##AT##-##AT## Schutz ist gut .",
    '"Ja", sagte er, "das kostet 5,- Euro & mehr."': "&quot; Ja &quot; , sagte er , &quot; das kostet 5 , - Euro &amp; mehr . &quot;",
    # A sentence-final number with a dot stays whole in German (an ordinal); tokenizer.perl split it from November 2018 on.
    "Das neue iPhone 5.": "Das neue iPhone 5.",
    "Die E-Mail-Adresse (z.B. a@b.de) gilt ab 1. Januar.": "Die E ##AT##-##AT## Mail ##AT##-##AT## Adresse ( z.B. a @ b.de ) gilt ab 1. Januar .",
    "Er kam um 8.30 Uhr - pünktlich!": "Er kam um 8.30 Uhr - pünktlich !",
    "": "",
}


def test_moses_tokenization_and_compound_splitting_match_get_ende_bleu():
    tokenized = moses_tokenize(list(GERMAN), "de")
    assert [split_compounds(line) for line in tokenized] == list(GERMAN.values())
    assert tokenized[0] == "Der Fahrer-Schutz ist gut ."  # the tokenizer itself keeps hyphenated words (no -a)


def test_compound_split_matches_perl_substitution_without_overlaps():
    # perl's s///g resumes after each match: in a-b-c the "b" is used up, so b-c stays joined.
    assert split_compounds("a-b-c") == "a ##AT##-##AT## b-c"
    assert split_compounds("E-Mail-Adresse") == "E ##AT##-##AT## Mail ##AT##-##AT## Adresse"
    assert split_compounds("Süd-Ost") == "Süd ##AT##-##AT## Ost"
    assert split_compounds("-x x- a - b --") == "-x x- a - b --"  # a hyphen needs a non-space on both sides


def test_multi_bleu_equals_the_hand_computed_value():
    hyp = ["the cat sat on a mat", "a b c d"]
    ref = ["the cat sat on the mat", "a b c d e f g h"]
    # matches / hypothesis n-grams, both lines: 1-grams 5+4 of 6+4, 2-grams 3+3 of 5+3, 3-grams 2+2 of 4+2,
    # 4-grams 1+1 of 3+1; 10 hypothesis tokens for 14 reference tokens: BP = exp(1 - 14/10).
    result = multi_bleu(hyp, ref)
    assert result.precisions == (9 / 10, 6 / 8, 4 / 6, 2 / 4)
    assert (result.hyp_len, result.ref_len) == (10, 14)
    assert result.brevity_penalty == pytest.approx(math.exp(-0.4), abs=1e-15)
    assert result.bleu == pytest.approx(math.exp(-0.4) * (9 / 10 * 6 / 8 * 4 / 6 * 2 / 4) ** 0.25, abs=1e-15)
    # multi-bleu.perl printed: BLEU = 46.17, 90.0/75.0/66.7/50.0 (BP=0.670, ratio=0.714, hyp_len=10, ref_len=14)
    assert f"{100 * result.bleu:.2f}" == "46.17"
    # Clipping: "the" appears twice in the reference, so 4 of them in the hypothesis count twice.
    assert multi_bleu(["the the the the"], ["the cat the"]).precisions[0] == 2 / 4


def test_one_precision_of_zero_makes_the_score_zero():
    # No smoothing: no 4-gram matches, so BLEU is 0 although 3 of 4 words are right (multi-bleu: BLEU = 0.00).
    result = multi_bleu(["a b c e"], ["a b c d"])
    assert result.precisions == (3 / 4, 2 / 3, 1 / 2, 0.0)
    assert result.bleu == 0.0
    assert multi_bleu([""], ["a b"]).bleu == 0.0  # an empty hypothesis (multi-bleu.perl would divide by zero)


def test_multi_bleu_agrees_with_sacrebleu_on_pretokenized_text():
    rng = random.Random(0)
    words = "der die das ein eine ist war nicht und oder mit von zu auf".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 25))) for _ in range(200)]
    hyps = [" ".join(w for w in ref.split() if rng.random() > 0.2) for ref in refs]
    theirs = BLEU(tokenize="none", smooth_method="none", force=True).corpus_score(hyps, [refs])
    assert 100 * multi_bleu(hyps, refs).bleu == pytest.approx(theirs.score, rel=1e-12)


def test_compound_splitting_changes_the_score():
    hyp, ref = ["Das ist ein Fahrer-Schutzsystem."], ["Das ist ein Fahrer-Schutz-System."]
    # Whole words: no 4-gram matches, BLEU 0 (multi-bleu.perl: 0.00, 80.0/50.0/33.3/0.0).
    assert multi_bleu(moses_tokenize(hyp, "de"), moses_tokenize(ref, "de")).bleu == 0.0
    # Split: "Fahrer ##AT##-##AT##" now matches (multi-bleu.perl: 48.35, 85.7/66.7/60.0/50.0, BP=0.751).
    paper = paper_bleu(hyp, ref, "de")
    expected = math.exp(1 - 9 / 7) * (6 / 7 * 4 / 6 * 3 / 5 * 2 / 4) ** 0.25
    assert paper.score == pytest.approx(100 * expected, abs=1e-12)
    assert paper.formatted.split(" = ", 1)[1].startswith("48.35 85.7/66.7/60.0/50.0 (BP = 0.751 ")
    assert BLEU().corpus_score(hyp, [ref]).score != pytest.approx(paper.score, abs=1)


def test_paper_bleu_refuses_a_language_the_tokenizer_does_not_know():
    with pytest.raises(NmtError, match="does not know the language 'xx'") as error:
        paper_bleu(["a"], ["a"], "xx")
    assert error.value.exit_code == 2


# --- through `nmt score` (in-process) --------------------------------------------------------------

HYP = ["Der Fahrer-Schutz ist gut.", "Das ist ein Fahrer-Schutzsystem für alle Autos."]
REF = ["Der Fahrer-Schutz ist sehr gut.", "Das ist ein Fahrer-Schutz-System für alle Autos."]


@pytest.fixture
def files(tmp_path) -> dict[str, Path]:
    (tmp_path / "hyp.de").write_text("\n".join(HYP) + "\n")
    (tmp_path / "ref.de").write_text("\n".join(REF) + "\n")
    return {"hyp": tmp_path / "hyp.de", "ref": tmp_path / "ref.de"}


def test_paper_line_says_what_it_is(files, nmt_main):
    result = nmt_main("score", str(files["hyp"]), "--ref", str(files["ref"]), "--compat", "paper")
    # Tokenized and split, line 1 has 7 tokens against 8 ("sehr" missing): 7/7 unigrams, 5/6 bigrams, 3/5
    # trigrams, 2/4 4-grams. Line 2, 10 against 12 ("Schutzsystem" for "Schutz ##AT##-##AT## System"):
    # 9/10, 7/9, 5/8, 3/7. multi-bleu.perl printed BLEU = 56.78, 94.1/80.0/61.5/45.5 (BP=0.838, ratio=0.850).
    expected = math.exp(1 - 20 / 17) * (16 / 17 * 12 / 15 * 8 / 13 * 5 / 11) ** 0.25
    assert f"{100 * expected:.2f}" == "56.78"
    assert result.stdout == (
        "BLEU (paper: moses -l de, compound-split, multi-bleu) = 56.78 94.1/80.0/61.5/45.5 "
        "(BP = 0.838 ratio = 0.850 hyp_len = 17 ref_len = 20)\n"
    )
    assert "Moses-tokenized as de (the suffix of ref.de)" in result.stderr
    assert "not comparable with sacreBLEU" in result.stderr


def test_both_conventions_in_one_json_and_they_differ_on_hyphenated_text(files, nmt_main):
    result = nmt_main("score", str(files["hyp"]), "--ref", str(files["ref"]), "--compat", "sacrebleu,paper", "--json")
    scores = json.loads(result.stdout)["scores"]
    assert [s["name"] for s in scores] == ["BLEU", "chrF2", PAPER_BLEU]
    sacre, paper = scores[0], scores[2]
    assert paper["score"] == pytest.approx(paper_bleu(HYP, REF, "de").score, abs=1e-12)
    assert abs(paper["score"] - sacre["score"]) > 1
    assert paper["signature"].startswith("nrefs:1|case:mixed|tok:moses-de|compound:atat|smooth:none")
    # The default stays sacreBLEU's, unchanged.
    default = nmt_main("score", str(files["hyp"]), "--ref", str(files["ref"]), "--json")
    assert json.loads(default.stdout)["scores"] == scores[:2]


def test_target_language_comes_from_the_flag_when_the_suffix_is_not_one(files, tmp_path, nmt_main):
    plain = tmp_path / "ref.txt"
    shutil.copy(files["ref"], plain)
    refused = nmt_main("score", str(files["hyp"]), "--ref", str(plain), "--compat", "paper", check=False)
    assert refused.returncode == 2
    assert "nmt: error: --compat paper needs the target language" in refused.stderr and "--target-lang" in refused.stderr
    given = nmt_main("score", str(files["hyp"]), "--ref", str(plain), "--compat", "paper", "-t", "de")
    assert given.stdout == nmt_main("score", str(files["hyp"]), "--ref", str(files["ref"]), "--compat", "paper").stdout


@pytest.mark.parametrize("args, message", [
    (["--compat", "tokenized"], "unknown --compat 'tokenized'"),
    (["--compat", "paper", "--metrics", "chrf"], "--compat paper scores BLEU only"),
    (["--compat", "paper", "-t", "german"], "does not know the language 'german'"),
])
def test_bad_compat_flags_exit_2_with_one_line(files, args, message, nmt_main):
    result = nmt_main("score", str(files["hyp"]), "--ref", str(files["ref"]), *args, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("nmt: error: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_scoring_a_model_records_paper_bleu_beside_sacrebleus(random_model, prepared, tmp_path, nmt_main):
    model = tmp_path / "model"
    shutil.copytree(random_model, model)
    config = json.loads((model / "config.json").read_text())
    # The prepared data with its test split cut to 20 lines: a random model writes every line to the length limit.
    data = shutil.copytree(prepared, tmp_path / "data")
    for lang in ("en", "de"):
        (data / f"test.{lang}").write_text("".join((prepared / f"test.{lang}").read_text().splitlines(keepends=True)[:20]))
    config["training"] = {"data_dir": str(data)}
    (model / "config.json").write_text(json.dumps(config))
    result = nmt_main("score", "-m", str(model), "--compat", "paper", "--device", "cpu")
    assert result.stdout.startswith("BLEU (paper: moses -l de, compound-split, multi-bleu) = ")
    assert "Moses-tokenized as de (the model's target language)" in result.stderr
    recorded = json.loads((model / "scores.json").read_text())["en-de/test"]
    assert list(recorded) == ["BLEU", "chrF2", PAPER_BLEU]  # sacreBLEU's earlier scores are kept
    assert recorded["BLEU"]["score"] == 12.3
    assert recorded[PAPER_BLEU]["signature"].startswith("nrefs:1|case:mixed|tok:moses-de|compound:atat")


@pytest.mark.skipif(not os.environ.get("MOSES_SCRIPTS"), reason="set MOSES_SCRIPTS to a 2017 mosesdecoder scripts/ dir")
def test_paper_bleu_equals_moses_scripts_on_the_demo_corpus(tmp_path):
    scripts = Path(os.environ["MOSES_SCRIPTS"])
    demo = Path(__file__).parents[1] / "nmtcli" / "data" / "demo" / "demo.en-de.tsv.xz"
    refs = [line.split("\t")[2] for line in lzma.open(demo, "rt", encoding="utf-8").read().splitlines()]
    rng = random.Random(1)
    hyps = [" ".join(w for w in ref.split() if rng.random() > 0.15) for ref in refs]

    def perl(lines: list[str]) -> Path:
        tokenized = subprocess.run(["perl", str(scripts / "tokenizer" / "tokenizer.perl"), "-q", "-l", "de"],
                                   input="\n".join(lines) + "\n", capture_output=True, text=True, check=True).stdout
        split = subprocess.run(["perl", "-ple", r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g"],
                               input=tokenized, capture_output=True, text=True, check=True).stdout
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.txt"
        path.write_text(split)
        return path

    ref_file, hyp_file = perl(refs), perl(hyps)
    theirs = subprocess.run(["perl", str(scripts / "generic" / "multi-bleu.perl"), str(ref_file)], stdin=hyp_file.open(),
                            capture_output=True, text=True, check=True).stdout
    ours = paper_bleu(hyps, refs, "de")
    r = multi_bleu(hyp_file.read_text().splitlines(), ref_file.read_text().splitlines())
    assert theirs.startswith(f"BLEU = {100 * r.bleu:.2f}, " + "/".join(f"{100 * p:.1f}" for p in r.precisions))
    assert ours.score == 100 * r.bleu
