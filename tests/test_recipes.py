"""`nmt prepare NAME`: recipes, the Hub download (against a loopback Hub), resume, corruption, the demo corpus."""

from __future__ import annotations

import json
import lzma
import os
import random
import signal
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest
from conftest import NMT, nmt_forked
from corpus import parquet_bytes, sentence_pair
from hub_server import FakeHub, Repo

from nmtcli.data.cleaning import TextFilter

REPO = "wmt/wmt14"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
TRAIN_FILES = [f"de-en/train-0000{i}-of-00003.parquet" for i in range(3)]
VALID_FILE = "de-en/validation-00000-of-00001.parquet"
TEST_FILE = "de-en/test-00000-of-00001.parquet"
HF_PIECE = 10 * 1024 * 1024  # huggingface_hub writes downloads to disk in pieces of this size
# Small vocabulary and chunks so that the whole pipeline takes seconds on a CPU.
FAST = ["--vocab-size", "600", "--chunk-pairs", "50"]


def _pairs(rng: random.Random, n: int) -> list[tuple[str, str]]:
    """n distinct pairs (the flaws each test needs are added on purpose)."""
    pairs: dict[tuple[str, str], None] = {}
    while len(pairs) < n:
        pairs[sentence_pair(rng)] = None
    return list(pairs)


@pytest.fixture(scope="module")
def wmt_files() -> dict[str, bytes]:
    """The layout of `wmt/wmt14` (config de-en) with small synthetic contents and real-world flaws."""
    rng = random.Random(14)
    train = _pairs(rng, 9000)
    train[10] = ("", "ein leerer satz")  # empty side
    train[11] = ("the dog sees\na cat", "der hund\nkatze sieht")  # a line break inside a sentence
    train[20:30] = train[100:110]  # ten exact duplicates
    parts = [train[:3000], train[3000:6000], train[6000:]]
    valid, test = _pairs(rng, 3000), _pairs(rng, 3003)  # newstest2013 and newstest2014 sizes
    test[5] = ("the child sees\r\nthe tree", "das kind\nbaum sieht")
    files = {name: parquet_bytes(part, padding=HF_PIECE + 500_000 if i == 1 else 0) for i, (name, part) in enumerate(zip(TRAIN_FILES, parts))}
    files[VALID_FILE] = parquet_bytes(valid)
    files[TEST_FILE] = parquet_bytes(test)
    return files


def wmt_hub(files: dict[str, bytes]) -> FakeHub:
    """The loopback Hub serving `files` as the dataset repo REPO at COMMIT."""
    hub = FakeHub()
    hub.datasets[REPO] = Repo.at(COMMIT, files)
    return hub


def hub_env(hub: FakeHub | None, home: Path, **extra: str) -> dict[str, str]:
    env = {"HF_HOME": str(home), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1", "HF_TOKEN": "", **extra}
    env["HF_ENDPOINT"] = hub.endpoint if hub else "http://127.0.0.1:9"  # port 9: nothing listens
    return env


def data_files(directory: Path) -> dict[str, bytes]:
    """Every prepared file but the manifest (whose `created`/`seconds` differ from run to run)."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file() and p.name != "manifest.json"}


@pytest.fixture(scope="module")
def reference(wmt_files, tmp_path_factory) -> Path:
    """An uninterrupted `nmt prepare wmt14-en-de` against the loopback Hub."""
    root = tmp_path_factory.mktemp("reference")
    with wmt_hub(wmt_files) as hub:
        nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=root, env=hub_env(hub, root / "hf"))
    return root / "data" / "wmt14-en-de"


def test_list_shows_every_recipe_with_size_source_and_license(nmt_main):
    out = nmt_main("prepare", "--list").stdout
    for name in ("wmt14-en-de", "wmt14-de-en", "wmt14-en-fr", "demo"):
        assert name in out
    assert "4.5M" in out and "wmt/wmt14" in out and "BSD" in out


def test_wmt14_prepares_end_to_end_from_the_hub(reference, wmt_files):
    manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["name"] == "wmt14-en-de" and manifest["recipe"]["name"] == "wmt14-en-de"
    assert (manifest["source_lang"], manifest["target_lang"]) == ("en", "de")
    assert manifest["source"]["repo"] == REPO and manifest["source"]["commit"] == COMMIT
    import hashlib

    assert manifest["source"]["files"][TRAIN_FILES[1]] == hashlib.sha256(wmt_files[TRAIN_FILES[1]]).hexdigest()
    train = manifest["splits"]["train"]
    assert train["input_pairs"] == 9000
    steps = {f["filter"]: (f["before"], f["after"]) for f in train["filters"]}
    assert steps["empty"] == (9000, 8999)
    assert steps["duplicate"][0] - steps["duplicate"][1] == 10
    assert train["pairs"] == steps["ratio"][1] == manifest["splits"]["train"]["pairs"]
    assert [f["filter"] for f in train["filters"]] == ["empty", "long_word", "non_alphabetic", "url_mismatch", "number_mismatch", "copy",
                                                       "wrong_language", "duplicate", "short_copy", "misaligned", "too_long", "ratio"]
    assert manifest["splits"]["valid"]["pairs"] == 3000
    assert manifest["splits"]["test"]["lines"] == 3003
    assert set(manifest["files"]) >= {"sentencepiece.model", "train.en.bin", "train.de.idx", "valid.en.bin", "test.en", "test.de"}
    assert manifest["versions"]["pyarrow"] and manifest["versions"]["huggingface_hub"]
    assert not (reference / ".work").exists()
    # The references: every line of newstest2014, in order, one line each (a line break in a sentence is a space).
    test_de = (reference / "test.de").read_text(encoding="utf-8").split("\n")
    assert len(test_de) == 3004 and test_de[-1] == ""
    assert test_de[5] == "das kind baum sieht"
    assert (reference / "test.en").read_text(encoding="utf-8").split("\n")[5] == "the child sees the tree"


def test_a_finished_prepare_reruns_in_seconds_without_downloading(reference, wmt_files, tmp_path):
    import shutil

    work = tmp_path / "w"
    shutil.copytree(reference.parent.parent, work)
    with wmt_hub(wmt_files) as hub:
        started = time.time()
        result = nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=work, env=hub_env(hub, work / "hf"))
        assert time.time() - started < 30
        assert hub.downloads() == []  # the cache answered; only HEADs
    assert "already prepared" in result.stderr
    assert data_files(work / "data" / "wmt14-en-de") == data_files(reference)


def test_the_same_inputs_give_byte_identical_data_whatever_the_chunks_and_workers(reference, wmt_files, tmp_path):
    # The reference encoded 50-pair chunks in-process; this run encodes 7,000-pair chunks in a pool of 2 workers.
    with wmt_hub(wmt_files) as hub:
        nmt_forked("prepare", "wmt14-en-de", "--vocab-size", "600", "--chunk-pairs", "7000", "--workers", "2", cwd=tmp_path, env=hub_env(hub, tmp_path / "hf"))
    assert data_files(tmp_path / "data" / "wmt14-en-de") == data_files(reference)


def _start(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([NMT, *args], cwd=cwd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_killed_mid_download_keeps_finished_files_and_gives_identical_output(reference, wmt_files, tmp_path):
    with wmt_hub(wmt_files) as hub:
        env = hub_env(hub, tmp_path / "hf")
        hub.stall_after[TRAIN_FILES[1]] = HF_PIECE + 1000
        process = _start(["prepare", "wmt14-en-de", *FAST], tmp_path, env)
        assert hub.stalled.wait(120), "the download never started"
        deadline = time.time() + 30
        # The first piece reaches the disk in several writes: wait until all of it is there.
        while not [p for p in (tmp_path / "hf").rglob("*.incomplete") if p.stat().st_size >= HF_PIECE]:
            assert time.time() < deadline, "the first piece never reached the disk"
            time.sleep(0.05)
        process.kill()
        process.wait()
        [partial] = list((tmp_path / "hf").rglob("*.incomplete"))
        assert partial.stat().st_size == HF_PIECE
        os.utime(partial, (time.time() - 7200, time.time() - 7200))  # a leftover from two hours ago
        nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=tmp_path, env=env)
        # huggingface_hub 2.x restarts a file whose process was killed; the finished one is kept.
        assert hub.gets(TRAIN_FILES[0]) == [None]
        assert hub.gets(TRAIN_FILES[1]) == [None, None]
        assert not partial.exists()  # the stale leftover was cleaned up
    assert data_files(tmp_path / "data" / "wmt14-en-de") == data_files(reference)


def test_a_dropped_connection_resumes_with_a_range_request(reference, wmt_files, tmp_path):
    with wmt_hub(wmt_files) as hub:
        hub.drop_after[TRAIN_FILES[1]] = HF_PIECE + 1000
        nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=tmp_path, env=hub_env(hub, tmp_path / "hf"))
        assert hub.gets(TRAIN_FILES[1]) == [None, f"bytes={HF_PIECE}-"]
    assert data_files(tmp_path / "data" / "wmt14-en-de") == data_files(reference)


def test_killed_mid_encoding_resumes_and_gives_identical_output(reference, wmt_files, tmp_path):
    with wmt_hub(wmt_files) as hub:
        env = hub_env(hub, tmp_path / "hf")
        out = tmp_path / "data" / "wmt14-en-de"
        process = _start(["prepare", "wmt14-en-de", *FAST], tmp_path, env)
        deadline = time.time() + 120
        while not list(out.glob(".work/encode-*/train-000020.npz")):
            assert process.poll() is None and time.time() < deadline, "prepare finished before it could be interrupted"
            time.sleep(0.002)
        process.send_signal(signal.SIGKILL)
        process.wait()
        assert not (out / "train.en.bin").exists() and not (out / "manifest.json").exists()
        done = sorted(p.name for p in out.glob(".work/encode-*/train-*.npz"))
        assert len(done) >= 21
        before = len(hub.requests)
        nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=tmp_path, env=env)
        assert hub.downloads(since=before) == []  # nothing downloaded twice
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stages"] == {"text": "reused", "sentencepiece": "reused", "encode": "resumed"}
    assert manifest["resumed_chunks"] == len(done)
    assert data_files(out) == data_files(reference)


def test_a_corrupt_download_is_detected_and_fetched_again(reference, wmt_files, tmp_path):
    with wmt_hub(wmt_files) as hub:
        env = hub_env(hub, tmp_path / "hf")
        hub.corrupt[VALID_FILE] = 1
        nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=tmp_path, env=env)
        assert len(hub.gets(VALID_FILE)) == 2
        assert data_files(tmp_path / "data" / "wmt14-en-de") == data_files(reference)

        # A blob damaged in the cache afterwards is caught on the next run, too.
        blob = next(p for p in (tmp_path / "hf").rglob("blobs/*") if p.read_bytes() == wmt_files[TEST_FILE])
        blob.write_bytes(blob.read_bytes()[:-100])
        (tmp_path / "data" / "wmt14-en-de" / "manifest.json").unlink()
        nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=tmp_path, env=env)
        assert len(hub.gets(TEST_FILE)) == 2
    assert data_files(tmp_path / "data" / "wmt14-en-de") == data_files(reference)


def test_a_file_that_stays_corrupt_is_a_one_line_error(wmt_files, tmp_path):
    with wmt_hub(wmt_files) as hub:
        hub.corrupt[TEST_FILE] = 2
        result = nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=tmp_path, env=hub_env(hub, tmp_path / "hf"), check=False)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith(f"nmt: error: {REPO}: {TEST_FILE} is corrupt even after downloading it again")
    assert "Traceback" not in result.stderr


def test_offline_mode_uses_the_cache_and_says_what_is_missing(reference, wmt_files, tmp_path):
    result = nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=tmp_path, env=hub_env(None, tmp_path / "hf", HF_HUB_OFFLINE="1"), check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "not in the Hub cache and HF_HUB_OFFLINE is set" in result.stderr
    with wmt_hub(wmt_files) as hub:  # fill the cache
        nmt_forked("prepare", "wmt14-en-de", *FAST, "-o", "first", cwd=tmp_path, env=hub_env(hub, tmp_path / "hf"))
    nmt_forked("prepare", "wmt14-en-de", *FAST, cwd=tmp_path, env=hub_env(None, tmp_path / "hf", HF_HUB_OFFLINE="1"))
    assert data_files(tmp_path / "data" / "wmt14-en-de") == data_files(reference)


# `nmt` with huggingface_hub's waits between retries skipped: it retries a refused connection five times,
# waiting 1 + 2 + 4 + 8 + 8 s, and no setting turns that off. The attempts still happen, against a port
# that refuses them; the process reads its environment at start-up as the installed `nmt` does.
NMT_WITHOUT_RETRY_WAITS = ("import types, huggingface_hub.utils._http as http\n"
                           "http.time = types.SimpleNamespace(sleep=lambda seconds: None)\n"
                           "from nmtcli.cli import main\n"
                           "main()\n")


def test_an_unreachable_hub_is_a_one_line_error(tmp_path):
    result = subprocess.run([sys.executable, "-c", NMT_WITHOUT_RETRY_WAITS, "prepare", "wmt14-en-de"], cwd=tmp_path, capture_output=True,
                            text=True, env={**os.environ, "COLUMNS": "200", **hub_env(None, tmp_path / "hf")})
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("nmt: error: cannot download wmt/wmt14: de-en/train-00000-of-00003.parquet: http://127.0.0.1:9 cannot be reached")


def test_an_unknown_revision_is_a_one_line_error(wmt_files, tmp_path):
    with wmt_hub(wmt_files) as hub:
        result = nmt_forked("prepare", "wmt14-en-de", "--revision", "v9", cwd=tmp_path, env=hub_env(hub, tmp_path / "hf"), check=False)
    assert result.returncode == 1 and "nmt: error: wmt/wmt14 has no revision v9" in result.stderr


def test_the_other_direction_and_a_pinned_revision(wmt_files, tmp_path):
    with wmt_hub(wmt_files) as hub:
        nmt_forked("prepare", "wmt14-de-en", *FAST, "--revision", COMMIT, cwd=tmp_path, env=hub_env(hub, tmp_path / "hf"))
    out = tmp_path / "data" / "wmt14-de-en"
    manifest = json.loads((out / "manifest.json").read_text())
    assert (manifest["source_lang"], manifest["target_lang"]) == ("de", "en")
    assert manifest["source"]["revision"] == COMMIT
    assert manifest["settings"]["source_lang"] == "de"
    assert (out / "train.de.bin").is_file() and (out / "test.en").is_file()


def test_en_fr_finds_its_files_by_listing_the_repository(tmp_path):
    rng = random.Random(3)
    files = {
        "fr-en/train-00000-of-00002.parquet": parquet_bytes(_pairs(rng, 400), "en", "fr"),
        "fr-en/train-00001-of-00002.parquet": parquet_bytes(_pairs(rng, 400), "en", "fr"),
        "fr-en/validation-00000-of-00001.parquet": parquet_bytes(_pairs(rng, 50), "en", "fr"),
        "fr-en/test-00000-of-00001.parquet": parquet_bytes(_pairs(rng, 60), "en", "fr"),
        "de-en/test-00000-of-00001.parquet": b"not this one",
    }
    with wmt_hub(files) as hub:
        nmt_forked("prepare", "wmt14-en-fr", *FAST, cwd=tmp_path, env=hub_env(hub, tmp_path / "hf"))
        assert not hub.gets("de-en/test-00000-of-00001.parquet")
    manifest = json.loads((tmp_path / "data" / "wmt14-en-fr" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["input_pairs"] == 800
    # Offline, the listing comes from the cache.
    nmt_forked("prepare", "wmt14-en-fr", *FAST, "-o", "offline", cwd=tmp_path, env=hub_env(None, tmp_path / "hf", HF_HUB_OFFLINE="1"))
    assert data_files(tmp_path / "offline") == data_files(tmp_path / "data" / "wmt14-en-fr")
    assert sorted(manifest["source"]["files"]) == sorted(n for n in files if n.startswith("fr-en/"))
    assert manifest["splits"]["test"]["lines"] == 60


def test_demo_is_shipped_with_its_license_and_prepares_offline(tmp_path):
    demo = resources.files("nmtcli.data").joinpath("demo")
    lines = lzma.decompress(demo.joinpath("demo.en-de.tsv.xz").read_bytes()).decode("utf-8").splitlines()
    pairs = [tuple(line.split("\t")[1:]) for line in lines]
    assert len(set(pairs)) == len(pairs) >= 5000
    assert {line.split("\t")[0] for line in lines} == {"train", "valid", "test"}
    assert "BSD-3-Clause" in demo.joinpath("PROVENANCE.md").read_text(encoding="utf-8")

    result = nmt_forked("prepare", "demo", cwd=tmp_path, env=hub_env(None, tmp_path / "hf", HF_HUB_OFFLINE="1"))
    out = tmp_path / "data" / "demo"
    manifest = json.loads((out / "manifest.json").read_text())
    test_split = [p for line, p in zip(lines, pairs) if line.startswith("test\t")]
    assert manifest["splits"]["train"]["input_pairs"] == len(pairs) - 1000
    assert (out / "test.de").read_text(encoding="utf-8").splitlines() == [de for _, de in test_split]
    assert manifest["vocab_size"] == 4000
    text_filter = TextFilter("en", "de")  # the default text filters: 15 of the 4,228 pairs are dropped (docs/data.md)
    train_pairs = [p for line, p in zip(lines, pairs) if line.startswith("train\t") and text_filter.reason(*p) is None]
    steps = {f["filter"]: (f["before"], f["after"]) for f in manifest["splits"]["train"]["filters"]}
    assert steps["short_copy"] == (len(train_pairs), len(train_pairs) - 1)  # "Dr" -> "Dr.": no other pair's target has "Dr"
    assert steps["misaligned"][0] == steps["short_copy"][1] and 0 < len(train_pairs) - steps["misaligned"][1] < 0.1 * len(train_pairs)
    assert manifest["vocabulary"] == {"asked": 4000, "by": "recipe", "training_pairs": steps["misaligned"][1]}
    assert "vocabulary: 4,000 pieces (the demo recipe's)" in result.stderr
    assert "train:" in result.stderr
    # The recipe's plain ratio 3.0 (no --ratio-slack): the data the quickstart's numbers were measured on.
    assert manifest["settings"]["ratio_slack"] == 0 and manifest["splits"]["train"]["dropped"] == {
        "ratio": 18, "misaligned": 301, "copy": 1, "short_copy": 1, "non_alphabetic": 1, "number_mismatch": 8, "url_mismatch": 1,
        "wrong_language": 4}


def test_recipe_and_file_arguments_are_checked(tmp_path, nmt_main):
    for args, message in (
        (["prepare", "wmt15-xx"], "nmt: error: no recipe named 'wmt15-xx'"),
        (["prepare", "demo", "--train", "x", "--valid", "y"], "nmt: error: both a corpus name"),
        (["prepare"], "nmt: error: nothing to prepare"),
        (["prepare", "demo", "-s", "fr"], "nmt: error: demo translates en->de, not -s fr"),
    ):
        result = nmt_main(*args, cwd=tmp_path, check=False)
        assert result.returncode == 1 and result.stderr.strip().splitlines()[-1].startswith(message), result.stderr
