"""`nmt serve` as its clients meet it: the real command on a loopback port, spoken to over HTTP.

One server per fixture, shared by the tests of this module (each start imports torch and loads the
model: seconds): `server` serves two tiny random models (en-de, de-en) with small limits; `keyed`
serves one with API keys and a two-second timeout, and is stopped with SIGTERM by the module's last test. NMT_TEST_FAULT=serve-slow-lines lets a line
"<slow SECONDS>" hold its batch that long, which is how the tests keep the model busy on demand.
Every loop here is bounded and every wait has a time-out.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
from pathlib import Path

import pytest
from conftest import NMT, nmt_in_process

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

# A random model writes to the length limit: a limit of source length + 10 keeps its translations short.
SHORT = ["--max-len-b", "10"]
LINES = ["the dog sees a cat", "", "a red car", "the old man reads a book in the garden", "the"]


# --- a server, and talking to it ------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`nmt serve ARGS` on a free loopback port, ready once GET /health answers."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str] | None = None):
        self.port = free_port()
        self.log = open(cwd / f"serve-{self.port}.log", "w+")
        self.process = subprocess.Popen([NMT, "serve", "--port", str(self.port), *args], cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                        env={**os.environ, "COLUMNS": "200", "NMT_TEST_FAULT": "serve-slow-lines", **(env or {})})
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"nmt serve exited {self.process.returncode}:\n{self.output()}")
            try:
                if request(self, "GET", "/health", timeout=2)[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError(f"nmt serve did not answer within 90 s:\n{self.output()}")

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def request(server: Server, method: str, path: str, body: dict | bytes | str | None = None, content_type: str | None = None,
            timeout: float = 60) -> tuple[int, object, dict[str, str]]:
    """(status, the decoded JSON answer or the text, headers); a dict body goes as JSON, a str as a form."""
    headers = {}
    if isinstance(body, dict):
        body, content_type = json.dumps(body).encode(), content_type or "application/json"
    elif isinstance(body, str):
        body, content_type = body.encode(), content_type or "application/x-www-form-urlencoded"
    if content_type:
        headers["Content-Type"] = content_type
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    try:
        connection.request(method, path, body, headers)
        response = connection.getresponse()
        data = response.read().decode("utf-8")
        kind = response.getheader("Content-Type", "")
        return response.status, json.loads(data) if kind.startswith("application/json") else data, dict(response.getheaders())
    finally:
        connection.close()


def translate(server: Server, body, **kw):
    status, answer, _ = request(server, "POST", "/translate", body, **kw)
    assert status == 200, answer
    return answer


def health(server: Server) -> dict:
    return request(server, "GET", "/health")[1]


def wait_until(condition, seconds: float = 10, what: str = "the condition") -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {seconds} s")
        time.sleep(0.02)


def in_thread(function, *args) -> tuple[threading.Thread, queue.Queue]:
    """Run function(*args) in a thread; its result (or exception) arrives in the queue."""
    results: queue.Queue = queue.Queue()

    def run():
        try:
            results.put(function(*args))
        except Exception as e:  # noqa: BLE001 - handed to the test, which re-raises it
            results.put(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, results


def result(results: queue.Queue, timeout: float = 60):
    value = results.get(timeout=timeout)
    if isinstance(value, Exception):
        raise value
    return value


# --- the servers ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(random_model, tmp_path_factory) -> dict[str, Path]:
    """The session's tiny en-de model, and a copy of it that calls itself de-en."""
    root = tmp_path_factory.mktemp("serve-models")
    de_en = root / "tiny-de-en"
    shutil.copytree(random_model, de_en)
    values = json.loads((de_en / "config.json").read_text())
    values["languages"] = {"source": "de", "target": "en"}
    (de_en / "config.json").write_text(json.dumps(values))
    return {"en-de": random_model, "de-en": de_en}


@pytest.fixture(scope="module")
def server(models, tmp_path_factory):
    s = Server(["-m", str(models["en-de"]), "-m", str(models["de-en"]), "--threads", "1", "--max-chars", "2000",
                "--max-lines", "50", "--queue-lines", "64", "--timeout", "30", *SHORT], tmp_path_factory.mktemp("serve"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def keyed(models, tmp_path_factory):
    cwd = tmp_path_factory.mktemp("serve-keyed")
    (cwd / "keys.txt").write_text("# one key a line\nkey-from-file\n\n")
    s = Server(["-m", str(models["en-de"]), "--threads", "1", "--api-key", "key-on-the-command-line", "--api-keys-file", "keys.txt",
                "--timeout", "2", *SHORT], cwd)
    yield s
    s.stop()


def test_models_without_a_pair_or_with_the_same_pair_are_refused_before_loading(models, tmp_path):
    from test_errors import doc_rows, matches

    from nmtcli.errors import NmtError
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.serve.models import load_models

    model = tmp_path / "model"
    shutil.copytree(models["en-de"], model)
    values = json.loads((model / "config.json").read_text())
    del values["languages"]
    (model / "config.json").write_text(json.dumps(values))
    other = tmp_path / "other"
    shutil.copytree(models["en-de"], other)
    for row, dirs in (("serve-no-language-pair", [("model", model)]), ("serve-two-models-one-pair", [("a", models["en-de"]), ("other", other)])):
        with pytest.raises(NmtError) as refused:
            load_models(dirs, "cpu", SearchSettings())
        documented = doc_rows()[row]
        assert matches(documented.message, f"nmt: error: {refused.value}") and refused.value.exit_code == documented.exit_code


# --- the API --------------------------------------------------------------------------------------------


def test_serve_listens_on_loopback_and_lists_each_model_by_its_pair(server, models):
    assert "serving on http://127.0.0.1:" in server.output()
    assert request(server, "GET", "/languages")[1] == [{"code": "de", "name": "German", "targets": ["en"]},
                                                       {"code": "en", "name": "English", "targets": ["de"]}]
    listed = request(server, "GET", "/nmt/models")[1]
    assert [(m["name"], m["source"], m["target"]) for m in listed] == [(str(models["en-de"]), "en", "de"), (str(models["de-en"]), "de", "en")]
    assert listed[0]["scores"]["en-de/test"]["BLEU"]["score"] == 12.3  # its scores.json
    assert health(server)["models"] == ["en-de", "de-en"]


def test_translate_answers_libretranslate_clients_in_json_and_forms(server):
    one = translate(server, {"q": "the dog sees a cat", "source": "en", "target": "de"})
    assert set(one) == {"translatedText"} and isinstance(one["translatedText"], str) and one["translatedText"]
    listed = translate(server, {"q": ["the dog sees a cat", "a red car"], "source": "en", "target": "de", "format": "text"})
    assert listed["translatedText"][0] == one["translatedText"] and len(listed["translatedText"]) == 2
    form = translate(server, urllib.parse.urlencode({"q": "the dog sees a cat", "source": "en", "target": "de"}))
    assert form == one
    boundary = "nmt-test-boundary"
    multipart = "".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
                        for name, value in (("q", "the dog sees a cat"), ("source", "en"), ("target", "de"))) + f"--{boundary}--\r\n"
    assert translate(server, multipart.encode(), content_type=f"multipart/form-data; boundary={boundary}") == one
    alternatives = translate(server, {"q": "the dog sees a cat\na red car", "source": "en", "target": "de", "alternatives": 2})
    assert len(alternatives["alternatives"]) == 2 and all(a.count("\n") == 1 for a in alternatives["alternatives"])
    batch_alternatives = translate(server, {"q": ["a", "b"], "source": "en", "target": "de", "alternatives": 1})
    assert [len(a) for a in batch_alternatives["alternatives"]] == [1, 1]
    auto = translate(server, {"q": "the dog sees a cat", "source": "auto", "target": "de"})  # more in test_serve_clients.py
    assert auto["translatedText"] == one["translatedText"] and auto["detectedLanguage"]["language"] == "en"
    assert request(server, "GET", "/frontend/settings")[1]["charLimit"] == 2000


def test_one_line_out_per_line_in_the_same_as_nmt_translate(server, models, tmp_path):
    """Both endpoints against `nmt translate --output-format json --nbest 2` with the server's settings (beam 4, alpha 0.6, max_len_b 10)."""
    records = [json.loads(line) for line in nmt_in_process(
        "translate", "-m", str(models["en-de"]), "--threads", "1", "--output-format", "json", "--nbest", "2", *SHORT,
        input="\n".join(LINES) + "\n", cwd=tmp_path).stdout.split("\n")[:-1]]
    assert len(records) == len(LINES) and records[1]["nbest"] == []
    best = [r["translation"] for r in records]
    second = [r["nbest"][1]["translation"] if r["nbest"] else "" for r in records]

    answer = translate(server, {"q": "\n".join(LINES), "source": "en", "target": "de", "alternatives": 1})
    assert answer["translatedText"].split("\n") == best and answer["alternatives"][0].split("\n") == second
    assert translate(server, {"q": LINES, "source": "en", "target": "de"})["translatedText"] == best
    assert translate(server, {"q": "\r\n".join(LINES), "source": "en", "target": "de"})["translatedText"] == "\r\n".join(best)  # its own line breaks

    status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES, "source": "en", "target": "de", "nbest": 2})
    assert status == 200 and answer["translations"] == records, answer  # scores and tokens included
    assert answer["model"] == str(models["en-de"]) and answer["settings"]["beam"] == 4


def test_sampling_requests_get_nmt_translates_samples_keyed_within_the_request(server, models, tmp_path):
    """A request's samples are those of `nmt translate --sampling` on its lines alone: lines are numbered within
    their request, whatever else the batch holds."""
    def cli(lines: list[str]) -> list[dict]:
        out = nmt_in_process("translate", "-m", str(models["en-de"]), "--threads", "1", "--output-format", "json", *SHORT,
                             "--sampling", "topk:5", "--temperature", "1.5", "--seed", "3", "--nbest", "2",
                             input="\n".join(lines) + "\n", cwd=tmp_path)
        return [json.loads(line) for line in out.stdout.split("\n")[:-1]]

    body = {"source": "en", "target": "de", "sampling": "topk:5", "temperature": 1.5, "seed": 3, "nbest": 2}
    status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES, **body})
    assert status == 200 and answer["translations"] == cli(LINES), answer
    assert answer["settings"]["sampling"] == "topk:5" and answer["settings"]["seed"] == 3
    assert all(e["score"] == e["log_prob"] for r in answer["translations"] for e in r["nbest"])
    status, tail, _ = request(server, "POST", "/nmt/translate", {"lines": LINES[2:], **body})
    assert status == 200 and tail["translations"] == cli(LINES[2:]) != answer["translations"][2:]


def test_nmt_translate_aligns_and_scores_given_targets_as_nmt_translate_does(server, models, tmp_path):
    """"alignment" and "targets" (forced decoding) against `nmt translate --alignment` and `--forced-decoding`."""
    common = ("translate", "-m", str(models["en-de"]), "--threads", "1", "--output-format", "json", "--alignment", "words", *SHORT)
    records = [json.loads(line) for line in nmt_in_process(*common, input="\n".join(LINES) + "\n", cwd=tmp_path).stdout.splitlines()]
    status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES, "source": "en", "target": "de", "alignment": "words"})
    assert status == 200 and answer["translations"] == records and "alignment" in records[0], answer
    targets = [r["translation"] for r in records]
    (tmp_path / "targets.txt").write_text("\n".join(targets) + "\n")
    scores = [json.loads(line) for line in nmt_in_process(*common, "--forced-decoding", "--target-file", str(tmp_path / "targets.txt"),
                                                          input="\n".join(LINES) + "\n", cwd=tmp_path).stdout.splitlines()]
    status, answer, _ = request(server, "POST", "/nmt/translate", {"lines": LINES, "source": "en", "target": "de", "alignment": "words",
                                                                    "targets": targets})
    assert status == 200 and answer["scores"] == scores and "translations" not in answer, answer
    same = [(s["score"], r["score"]) for s, r in zip(scores, records) if r["tokens"] and s["tokens"] == r["tokens"]]
    assert same and all(a == pytest.approx(b, abs=1e-5) for a, b in same)  # where the text re-encodes to the search's tokens: its score


def test_every_record_has_the_same_keys_an_empty_or_low_confidence_line_too(server):
    """With "alignment", an empty line's record gets "alignment": "" where the others have their links (it had no such
    key); with "min_confidence", a line answered as sent keeps the keys of the record it replaces, emptied (a split
    line's "sentences" and no "tokens", as every split line's record)."""
    body = {"lines": LINES, "source": "en", "target": "de", "alignment": "words"}
    for extra in ({}, {"min_confidence": 1.0}, {"split_sentences": True}, {"split_sentences": True, "min_confidence": 1.0}):
        status, answer, _ = request(server, "POST", "/nmt/translate", {**body, **extra})
        records = answer["translations"]
        assert status == 200 and len(records) == len(LINES) and all(set(r) == set(records[0]) for r in records), (extra, records)
        if "split_sentences" not in extra:
            assert records[1]["alignment"] == "" and all(r["alignment"] for r in records if r["tokens"])
        if "min_confidence" in extra:  # every translated line is below 1
            assert [r["low_confidence"] for r in records] == [bool(line) for line in LINES]
            assert all(r["translation"] == line and r["nbest"] == [] for r, line in zip(records, LINES))


PARAGRAPH = "  Dr. Smith sees the dog at 3 p.m. on Jan. 5. The dog sees a cat!\tA red car?\r\n\r\nthe old man reads a book. \u2028The end.  "


def test_paragraphs_are_translated_sentence_by_sentence_and_joined_with_their_own_whitespace(server):
    """/translate cuts each text into sentences (and at line breaks), translates them together and joins them back
    with the text's own whitespace, byte for byte; an alternative joins each sentence's k-th best. /nmt/translate does
    the same for each line with "split_sentences", a record a line. Both equal the sentences sent one by one."""
    from nmtcli.documents.sentences import join_sentences, sentence_spans

    spans = sentence_spans(PARAGRAPH, "en")
    sentences = [PARAGRAPH[a:b] for a, b in spans]
    assert sentences == ["Dr. Smith sees the dog at 3 p.m. on Jan. 5.", "The dog sees a cat!", "A red car?", "the old man reads a book.", "The end."]
    status, alone, _ = request(server, "POST", "/nmt/translate", {"lines": sentences, "source": "en", "target": "de", "nbest": 2})
    assert status == 200 and all(len(r["nbest"]) == 2 for r in alone["translations"]), alone
    best = join_sentences(PARAGRAPH, spans, [r["translation"] for r in alone["translations"]])
    second = join_sentences(PARAGRAPH, spans, [r["nbest"][1]["translation"] for r in alone["translations"]])
    assert best.startswith("  ") and "\t" in best and "\r\n\r\n" in best and best.endswith(" \u2028" + alone["translations"][4]["translation"] + "  ")

    answer = translate(server, {"q": [PARAGRAPH, "", "a red car"], "source": "en", "target": "de", "alternatives": 1})
    assert answer["translatedText"][:2] == [best, ""] and answer["alternatives"][:2] == [[second], [""]]

    line = PARAGRAPH.replace("\r\n", " ")  # /nmt/translate takes lines
    spans = sentence_spans(line, "en")
    status, split, _ = request(server, "POST", "/nmt/translate", {"lines": [line, "", "a red car"], "source": "en", "target": "de",
                                                                   "nbest": 2, "split_sentences": True})
    assert status == 200 and len(split["translations"]) == 3, split
    record = split["translations"][0]
    assert record["translation"] == join_sentences(line, spans, [r["translation"] for r in alone["translations"]])
    assert [e["translation"] for e in record["nbest"]] == [record["translation"], join_sentences(line, spans, [r["nbest"][1]["translation"] for r in alone["translations"]])]
    assert [(s["source"], s["start"], s["end"], s["tokens"]) for s in record["sentences"]] == [
        (line[a:b], a, b, r["tokens"]) for (a, b), r in zip(spans, alone["translations"])]
    assert record["log_prob"] == pytest.approx(sum(r["log_prob"] for r in alone["translations"]), abs=1e-3)
    assert split["translations"][1] == {"translation": "", "score": None, "log_prob": None, "confidence": None, "nbest": [], "sentences": []}


def test_min_confidence_answers_a_line_below_it_with_its_source_flagged(server):
    body = {"lines": ["a red car", "the dog sees a cat", ""], "source": "en", "target": "de"}
    status, plain, _ = request(server, "POST", "/nmt/translate", body)
    assert status == 200 and all(0 <= r["confidence"] <= 1 for r in plain["translations"][:2])
    least = max(r["confidence"] for r in plain["translations"][:2])  # the first two below it unless they are equal
    status, answer, _ = request(server, "POST", "/nmt/translate", {**body, "min_confidence": least})
    for line, before, after in zip(body["lines"], plain["translations"], answer["translations"]):
        if before["confidence"] is not None and before["confidence"] < least:
            assert after == {"translation": line, "low_confidence": True, "confidence": before["confidence"], "score": before["score"],
                             "log_prob": before["log_prob"], "tokens": [], "nbest": []}
        else:
            assert after == {**before, "low_confidence": False}
    status, refused, _ = request(server, "POST", "/nmt/translate", {**body, "min_confidence": 2})
    assert status == 400 and "min_confidence 2 is out of range" in refused["error"]


def test_a_sentence_too_long_for_the_model_is_truncated_with_a_warning_in_the_servers_log(server):
    """The random model reads 255 tokens: a sentence the splitter cannot cut is truncated, as `nmt translate` does
    (and says: the warning names the sentence's number in the request), and its neighbour is translated whole."""
    long = "It rains. " + "a " * 300 + "end"
    answer = translate(server, {"q": long, "source": "en", "target": "de"})["translatedText"]
    wait_until(lambda: "line 2: 302 tokens, truncated to the model's 255" in server.output(), what="the warning in the log")
    status, alone, _ = request(server, "POST", "/nmt/translate", {"lines": ["It rains.", long[10:]], "source": "en", "target": "de"})
    assert status == 200 and answer == " ".join(r["translation"] for r in alone["translations"])


BAD_REQUESTS = [
    # (what, body, content type, status, the error message holds)
    ("malformed JSON", b'{"q": "x",', "application/json", 400, "malformed JSON"),
    ("JSON that is not an object", b'["x"]', "application/json", 400, "Invalid JSON format"),
    ("empty body", b"", "application/json", 400, "Invalid JSON format"),
    ("no q", {"source": "en", "target": "de"}, None, 400, "Invalid request: missing q parameter"),
    ("empty q", {"q": "", "source": "en", "target": "de"}, None, 400, "Invalid request: missing q parameter"),
    ("q a number", {"q": 5, "source": "en", "target": "de"}, None, 400, "q must be a string or a list of strings"),
    ("q a list with a number", {"q": ["a", 5], "source": "en", "target": "de"}, None, 400, "q must be a string or a list of strings"),
    ("no source", {"q": "a", "target": "de"}, None, 400, "Invalid request: missing source parameter"),
    ("source a list", {"q": "a", "source": ["en"], "target": "de"}, None, 400, "source must be a string"),
    ("unknown source", {"q": "a", "source": "fr", "target": "de"}, None, 400, "fr is not supported"),
    ("unknown pair", {"q": "a", "source": "en", "target": "en"}, None, 400, "English (en) is not available as a target language from English (en)"),
    ("unknown format", {"q": "<b>a</b>", "source": "en", "target": "de", "format": "xml"}, None, 400, "xml format is not supported"),
    ("alternatives not a number", {"q": "a", "source": "en", "target": "de", "alternatives": "two"}, None, 400, "alternatives must be an integer"),
    ("too many alternatives", {"q": "a", "source": "en", "target": "de", "alternatives": 99}, None, 400, "alternatives 99 is out of range"),
    ("invalid UTF-8 in JSON", b'{"q": "caf\xe9", "source": "en", "target": "de"}', "application/json", 400, "not valid UTF-8"),
    ("invalid UTF-8 in a form", b"q=caf%E9&source=en&target=de", "application/x-www-form-urlencoded", 400, "not valid UTF-8"),
    ("a lone surrogate", b'{"q": "a\\ud800b", "source": "en", "target": "de"}', "application/json", 400, "lone surrogate"),
    ("too many characters", {"q": "a" * 2001, "source": "en", "target": "de"}, None, 413, "exceeds text limit (2,000)"),
    ("too many lines", {"q": ["a"] * 51, "source": "en", "target": "de"}, None, 413, "exceeds line limit (50)"),
    ("too many sentences", {"q": "It rains. " * 51, "source": "en", "target": "de"}, None, 413,
     "request (51 sentences) exceeds line limit (50) (each sentence is translated as a line"),
    ("a 10,000-sentence paragraph", {"q": "It rains. " * 10_000, "source": "en", "target": "de"}, None, 413, "exceeds the size limit"),
    ("an enormous body", b"q=" + b"a" * 200_000, "application/x-www-form-urlencoded", 413, "exceeds the size limit"),
    ("another content type", b"q=a", "text/csv", 415, "unsupported Content-Type"),
    ("nmt: no lines", {"text": "a"}, None, 400, "lines must be a non-empty list of strings"),
    ("nmt: a line break", {"lines": ["a\nb"], "source": "en", "target": "de"}, None, 400, "line 1 holds a line break"),
    ("nmt: too many sentences", {"lines": ["It rains. " * 30, "It pours. " * 30], "source": "en", "target": "de", "split_sentences": True},
     None, 413, "request (60 sentences) exceeds line limit (50)"),
    ("nmt: split_sentences not a boolean", {"lines": ["a"], "source": "en", "target": "de", "split_sentences": "yes"}, None, 400,
     "split_sentences must be true or false"),
    ("nmt: split_sentences with a prefix", {"lines": ["a"], "source": "en", "target": "de", "split_sentences": True, "prefix": "ein"},
     None, 400, "split_sentences does not go with prefix"),
    ("nmt: beam 0", {"lines": ["a"], "source": "en", "target": "de", "beam": 0}, None, 400, "beam 0 is out of range (from 1 to 16)"),
    ("nmt: beam true", {"lines": ["a"], "source": "en", "target": "de", "beam": True}, None, 400, "beam must be an integer"),
    ("nmt: nbest over beam", {"lines": ["a"], "source": "en", "target": "de", "beam": 2, "nbest": 3}, None, 400, "nbest 3 is out of range"),
    ("nmt: alpha a string", {"lines": ["a"], "source": "en", "target": "de", "alpha": "0.6"}, None, 400, "alpha must be a number"),
    ("nmt: unknown penalty", {"lines": ["a"], "source": "en", "target": "de", "length_penalty": "x"}, None, 400, "length_penalty must be one of"),
    ("nmt: sampling topk:0", {"lines": ["a"], "source": "en", "target": "de", "sampling": "topk:0"}, None, 400,
     "sampling 'topk:0': K must be a whole number >= 1"),
    ("nmt: sampling foo", {"lines": ["a"], "source": "en", "target": "de", "sampling": "foo"}, None, 400, "sampling 'foo': not one of"),
    ("nmt: sampling with a prefix", {"lines": ["a"], "source": "en", "target": "de", "sampling": "full", "prefix": "ein"}, None, 400,
     "prefix works with beam search, not with sampling"),
    ("nmt: sampling a number", {"lines": ["a"], "source": "en", "target": "de", "sampling": 5}, None, 400, "sampling must be a string"),
    ("nmt: sampling with beam", {"lines": ["a"], "source": "en", "target": "de", "sampling": "full", "beam": 4}, None, 400,
     "beam does not go with sampling"),
    ("nmt: temperature 0", {"lines": ["a"], "source": "en", "target": "de", "sampling": "full", "temperature": 0}, None, 400,
     "temperature must be above 0"),
    ("nmt: seed without sampling", {"lines": ["a"], "source": "en", "target": "de", "seed": 1}, None, 400, "seed applies to sampling only"),
    ("nmt: two models fit", {"lines": ["a"]}, None, 400, "several models fit"),
    ("nmt: unknown alignment", {"lines": ["a"], "source": "en", "target": "de", "alignment": "x"}, None, 400, "alignment must be one of words, pieces"),
    ("nmt: targets for other lines", {"lines": ["a", "b"], "source": "en", "target": "de", "targets": ["x"]}, None, 400, "1 targets for 2 lines"),
    ("nmt: targets with nbest", {"lines": ["a"], "source": "en", "target": "de", "targets": ["x"], "nbest": 2}, None, 400,
     "nbest has no meaning with targets"),
    ("nmt: targets with sampling", {"lines": ["a"], "source": "en", "target": "de", "targets": ["x"], "sampling": "full"}, None, 400,
     "targets (scoring given translations) does not go with prefix or sampling"),
    ("nmt: targets not strings", {"lines": ["a"], "source": "en", "target": "de", "targets": [1]}, None, 400, "targets must be a list of strings"),
]


@pytest.mark.parametrize("what, body, content_type, status, message", BAD_REQUESTS, ids=[r[0] for r in BAD_REQUESTS])
def test_bad_requests_get_a_clear_4xx_in_libretranslates_error_shape(server, what, body, content_type, status, message):
    path = "/nmt/translate" if what.startswith("nmt:") else "/translate"
    got, answer, _ = request(server, "POST", path, body, content_type=content_type)
    assert (got, list(answer)) == (status, ["error"]), answer
    assert message in answer["error"] and "Traceback" not in answer["error"], answer


def test_wrong_methods_and_paths_answer_in_the_error_shape(server):
    assert request(server, "GET", "/translate")[:2] == (405, {"error": "Method Not Allowed"})
    assert request(server, "GET", "/nowhere")[:2] == (404, {"error": "Not Found"})


def test_concurrent_clients_get_their_own_lines_in_order_and_share_batches(server):
    sentences = [f"the {a} {n} sees a {b} cat" for a in ("old", "red", "small", "big") for n in ("dog", "man", "car", "book")
                 for b in ("green", "dark")]
    reference = dict(zip(sentences, translate(server, {"q": sentences, "source": "en", "target": "de"})["translatedText"]))
    requests_before = request(server, "GET", "/metrics")[1]

    def client(number: int) -> list[tuple[list[str], list[str]]]:
        done = []
        for turn in range(2):
            lines = [sentences[(number * 7 + turn * 3 + k) % len(sentences)] for k in range(1 + (number + turn) % 3)]
            done.append((lines, translate(server, {"q": lines, "source": "en", "target": "de"})["translatedText"]))
        return done

    clients = [in_thread(client, n) for n in range(32)]
    answers = [pair for _, results in clients for pair in result(results)]
    assert len(answers) == 64
    for lines, translated in answers:
        assert translated == [reference[line] for line in lines]
    shared = metric(request(server, "GET", "/metrics")[1], "nmt_batch_requests_bucket", 'le="1"')
    total = metric(request(server, "GET", "/metrics")[1], "nmt_batch_requests_count")
    assert total - shared > metric(requests_before, "nmt_batch_requests_count") - metric(requests_before, "nmt_batch_requests_bucket", 'le="1"'), \
        "no batch held the lines of more than one request"


def metric(text: str, name: str, labels: str = "") -> float:
    for line in text.splitlines():
        if line.startswith(name) and labels in line:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name}{{{labels}}} in /metrics")


def test_metrics_count_requests_lines_tokens_latency_and_batches(server):
    translate(server, {"q": "the dog\nthe cat", "source": "en", "target": "de"})
    status, text, headers = request(server, "GET", "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
    assert metric(text, "nmt_requests_total", 'endpoint="/translate",status="200"') >= 1
    assert metric(text, "nmt_lines_total") >= 2 and metric(text, "nmt_output_tokens_total") > 0
    assert metric(text, "nmt_request_duration_seconds_count") >= 1 and metric(text, "nmt_batch_lines_count") >= 1
    assert metric(text, "nmt_request_duration_seconds_bucket", 'le="+Inf"') == metric(text, "nmt_request_duration_seconds_count")
    for line in text.splitlines():  # every sample line: name{labels} value
        assert line.startswith("#") or re.fullmatch(r'[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? [0-9.e+-]+', line), line


def send_and_leave(server: Server, body: dict) -> socket.socket:
    """A client that sends a request and will never read the answer (close the socket to leave)."""
    data = json.dumps(body).encode()
    client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    client.sendall(b"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                   + f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    return client


def test_a_full_queue_answers_429_and_a_client_that_leaves_frees_its_place(server):
    busy = in_thread(translate, server, {"q": "<slow 2>", "source": "en", "target": "de"})[1]  # holds the model
    wait_until(lambda: health(server)["translating_lines"] == 1, what="the slow batch starting")
    waiting = send_and_leave(server, {"q": ["the dog"] * 40, "source": "en", "target": "de"})
    wait_until(lambda: health(server)["queued_lines"] == 40, what="40 lines queued")
    status, answer, headers = request(server, "POST", "/translate", {"q": ["the cat"] * 40, "source": "en", "target": "de"})
    assert status == 429 and answer["error"].startswith("Slowdown: 40 lines are waiting") and headers["retry-after"] == "1"
    waiting.close()  # the client goes away: its 40 lines leave the queue at once
    wait_until(lambda: health(server)["queued_lines"] == 0, what="the queue emptying")
    accepted = in_thread(translate, server, {"q": ["the cat"] * 40, "source": "en", "target": "de"})[1]
    assert result(busy)["translatedText"] is not None
    assert len(result(accepted)["translatedText"]) == 40
    assert metric(request(server, "GET", "/metrics")[1], "nmt_requests_total", 'endpoint="/translate",status="499"') >= 1


# --- keys, time-outs, shutdown ---------------------------------------------------------------------------


def test_api_keys_from_the_command_line_or_a_file_are_required(keyed):
    body = {"q": "the dog", "source": "en", "target": "de"}
    assert request(keyed, "POST", "/translate", body)[:2] == (400, {"error": "Please contact the server operator to get an API key (send it as api_key)"})
    assert request(keyed, "POST", "/translate", {**body, "api_key": "wrong"})[:2] == (403, {"error": "Invalid API key"})
    assert request(keyed, "POST", "/translate", {**body, "api_key": 7})[:2] == (403, {"error": "Invalid API key"})
    assert request(keyed, "POST", "/translate", {**body, "api_key": "key-on-the-command-line"})[0] == 200
    assert request(keyed, "POST", "/translate", urllib.parse.urlencode({**body, "api_key": "key-from-file"}))[0] == 200
    assert request(keyed, "POST", "/nmt/translate", {"lines": ["a"], "api_key": "wrong"})[0] == 403
    assert request(keyed, "POST", "/detect", {"q": "the dog"})[0] == 400 and request(keyed, "POST", "/detect", {"q": "the dog", "api_key": "wrong"})[0] == 403
    assert request(keyed, "POST", "/detect", {"q": "the dog", "api_key": "key-from-file"})[0] == 200
    assert request(keyed, "GET", "/languages")[0] == 200 and health(keyed)["key_required"] is True
    assert request(keyed, "GET", "/frontend/settings")[1]["keyRequired"] is True


def test_a_request_that_times_out_answers_503_and_leaves_the_queue(keyed):
    body = {"source": "en", "target": "de", "api_key": "key-from-file"}
    slow = in_thread(request, keyed, "POST", "/translate", {**body, "q": "<slow 2.5>"})[1]  # 2.5 s against a 2 s time-out
    wait_until(lambda: health(keyed)["translating_lines"] == 1, what="the slow batch starting")
    started = time.monotonic()
    status, answer, _ = request(keyed, "POST", "/translate", {**body, "q": "the dog"})  # waits behind it, and gives up
    assert (status, answer["error"][:30]) == (503, "Timed out after 2 s waiting fo") and time.monotonic() - started < 2.4
    assert health(keyed)["queued_lines"] == 0
    assert result(slow)[0] == 503
    wait_until(lambda: health(keyed)["translating_lines"] == 0, what="the slow batch ending")
    assert request(keyed, "POST", "/translate", {**body, "q": "the dog"})[0] == 200  # the model is free again


# --- the page --------------------------------------------------------------------------------------------


class Chromium:
    """Headless Chromium driven through the DevTools protocol over a pipe (--remote-debugging-pipe): JSON
    messages, each ended by a NUL byte, written to its fd 3 and read from its fd 4."""

    def __init__(self, binary: str, profile: Path):
        to_browser, self._to_browser = os.pipe()
        self._from_browser, from_browser = os.pipe()
        # Moved above fd 4 first, so that placing one on fd 3 or 4 in the child cannot overwrite the other.
        to_browser, from_browser = (_above_4(fd) for fd in (to_browser, from_browser))

        def pipes_on_3_and_4() -> None:  # in the child, before exec; dup2 makes them inheritable (the originals are not)
            os.dup2(to_browser, 3)
            os.dup2(from_browser, 4)

        self.process = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "--window-size=1100,700"],
            close_fds=False, preexec_fn=pipes_on_3_and_4, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser)
        os.close(from_browser)
        self.answers: queue.Queue = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        with os.fdopen(self._from_browser, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                buffer += chunk
                *messages, buffer = buffer.split(b"\0")
                for message in messages:
                    decoded = json.loads(message)
                    if "id" in decoded:
                        self.answers.put(decoded)

    def call(self, method: str, session: str | None = None, **params):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params, **({"sessionId": session} if session else {})}
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            answer = self.answers.get(timeout=30)
            if answer["id"] == self.next_id:
                if "error" in answer:
                    raise AssertionError(f"{method}: {answer['error']}")
                return answer["result"]

    def close(self) -> None:
        os.close(self._to_browser)
        self.process.terminate()
        self.process.wait(timeout=30)


def _above_4(fd: int) -> int:
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if found := shutil.which(name):
            return found
    pytest.skip("no Chromium installed (apt-get install chromium) to load the page in")


def test_the_page_translates_in_a_real_browser(server, models, tmp_path):
    status, html, headers = request(server, "GET", "/")
    assert status == 200 and "connect-src 'self'" in headers["content-security-policy"]
    assert not re.search(r"""(src|href|url)\s*[=(]\s*["']?(https?:)?//""", html), "the page fetches something from elsewhere"
    chromium = Chromium(browser(), tmp_path / "profile")
    try:
        target = chromium.call("Target.createTarget", url=f"http://127.0.0.1:{server.port}/")["targetId"]
        session = chromium.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]

        def evaluate(expression: str):
            return chromium.call("Runtime.evaluate", session, expression=expression, returnByValue=True)["result"].get("value")

        wait_until(lambda: evaluate("document.body && document.body.dataset.ready") == "yes", 30, "the page loading its models")
        assert evaluate("[...document.querySelectorAll('#from option')].map(o => o.value)") == ["auto", "en", "de"]
        assert evaluate("[...document.querySelectorAll('#to option')].map(o => o.textContent)") == ["German (de)"]
        assert str(models["en-de"]) in evaluate("document.getElementById('model').textContent")
        assert evaluate("document.getElementById('scores').textContent").count("12.3") == 1
        # A line of two sentences: the page asks for them to be split, as /translate splits them.
        evaluate("document.getElementById('source').value = 'the dog sees a cat. a red car sees the dog?\\na red car'; document.getElementById('go').click()")
        wait_until(lambda: evaluate("document.getElementById('target').textContent"), 30, "the translation appearing")
        expected = translate(server, {"q": "the dog sees a cat. a red car sees the dog?\na red car", "source": "en", "target": "de"})["translatedText"]
        assert evaluate("document.getElementById('target').textContent") == expected

        def choose(select: str, value: str) -> None:
            evaluate(f"document.getElementById('{select}').value = '{value}'; document.getElementById('{select}').dispatchEvent(new Event('change'))")

        choose("from", "de")
        assert evaluate("[...document.querySelectorAll('#to option')].map(o => o.value)") == ["en"]
        assert str(models["de-en"]) in evaluate("document.getElementById('model').textContent")
        # "Detect language": the text's language from /detect, shown, and its model used.
        choose("from", "auto")
        assert evaluate("[...document.querySelectorAll('#to option')].map(o => o.value)") == ["de", "en"]
        choose("to", "de")
        evaluate("document.getElementById('target').textContent = ''; document.getElementById('go').click()")
        wait_until(lambda: evaluate("document.getElementById('target').textContent"), 30, "the translation of detected English")
        assert evaluate("document.getElementById('target').textContent") == expected
        assert evaluate("document.getElementById('detected').textContent").startswith("English (en) detected (")
        assert str(models["en-de"]) in evaluate("document.getElementById('model').textContent")
        choose("to", "en")  # English into English: no model
        evaluate("document.getElementById('go').click()")
        wait_until(lambda: evaluate("document.getElementById('error').textContent"), 30, "the error")
        assert evaluate("document.getElementById('error').textContent") == "this server has no model from English (en) into English (en)"
        choose("to", "de")
        shot = base64.b64decode(chromium.call("Page.captureScreenshot", session, format="png")["data"])
        assert shot.startswith(b"\x89PNG")
        (Path(os.environ.get("NMT_SCREENSHOT_DIR", tmp_path)) / "serve-page.png").write_bytes(shot)  # to look at
    finally:
        chromium.close()


def test_sigterm_answers_the_requests_in_flight_then_stops(keyed):
    """The last test of the module: it stops the `keyed` server for good."""
    in_flight = in_thread(translate, keyed, {"q": "<slow 1>\nthe dog", "source": "en", "target": "de", "api_key": "key-from-file"})[1]
    wait_until(lambda: health(keyed)["translating_lines"] == 2, what="the slow batch starting")
    keyed.process.send_signal(signal.SIGTERM)
    assert len(result(in_flight)["translatedText"].split("\n")) == 2
    assert keyed.process.wait(timeout=30) == 0
    with pytest.raises(OSError):
        request(keyed, "GET", "/health", timeout=2)
    output = keyed.output()
    assert "stopped: the requests in flight were answered" in output and "Traceback" not in output, output
