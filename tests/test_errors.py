"""Every row of docs/errors.md: a mistake a user (or the machine) can make, and the one line `nmt` says.

Each row runs `nmt` and checks what the table promises: the exit code, that stderr ends with exactly
one `nmt: error: ...` line and holds no traceback, and that this line is the table's message (where `…`
stands for a path, a number or a port that varies). Rows that write also check that nothing written
before was damaged and no temporary file is left behind. `test_the_table_and_the_tests_agree` keeps
docs/errors.md and this file in step.

A row runs `nmt`'s main() in-process (conftest.nmt_in_process: the same exit code, stdout and stderr)
unless what it tests needs a process of its own: a file size limit, a stdout that is /dev/full, an
environment read when the process starts (the Hub's, inductor's, PYTHONPATH), or a server. Those run the
installed command (`Case.process`), and `test_a_row_in_process_is_what_the_installed_command_gives`
runs a sample of the other rows both ways and compares.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import NMT, nmt_in_process

DOCS = Path(__file__).parents[1] / "docs" / "errors.md"
ROWS: dict[str, Callable[[Case], subprocess.CompletedProcess]] = {}


def row(row_id: str):
    """Register the function that makes a row's mistake and runs `nmt`; returns the finished process."""

    def register(make):
        ROWS[row_id] = make
        return make

    return register


@dataclass(frozen=True)
class DocRow:
    exit_code: int
    message: str
    test: str


def doc_rows() -> dict[str, DocRow]:
    """The table of docs/errors.md: | `id` | mistake | example | exit | ``message`` | test |."""
    rows = {}
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        row_id, exit_code, message, test = cells[0].strip("`"), cells[3], cells[4], cells[5]
        assert message.startswith("``") and message.endswith("``"), f"{row_id}: the message cell must be a ``code span``"
        rows[row_id] = DocRow(int(exit_code), message[2:-2].strip(), test)
    return rows


def matches(documented: str, actual: str) -> bool:
    """Whether `actual` is the documented message, each `…` standing for any text."""
    pattern = ".*?".join(re.escape(part) for part in documented.split("…"))
    return re.fullmatch(pattern, actual) is not None


# --- how a row runs ----------------------------------------------------------------------------------


def _file_size_limit(size: int) -> Callable[[], None]:
    """preexec_fn: writes past `size` bytes fail with EFBIG (SIGXFSZ ignored), as a nearly full disk would."""

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return apply


class Case:
    """What a row gets: a scratch dir, the session's fixtures on demand, and `nmt` to run.

    `nmt` runs in-process, or as the installed command when `as_process` is set (to compare the two);
    `process` always runs the installed command.
    """

    def __init__(self, request, tmp_path: Path, as_process: bool = False):
        self.request = request
        self.tmp = tmp_path
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.as_process = as_process

    def fixture(self, name: str):
        return self.request.getfixturevalue(name)

    def copy(self, src: Path, name: str) -> Path:
        dst = self.tmp / name
        shutil.copytree(src, dst)
        return dst

    def write(self, name: str, data: str | bytes) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        return path

    def nmt(self, *args: str, env: dict | None = None, input: str | None = None) -> subprocess.CompletedProcess:
        """`nmt ARGS` in the scratch dir, in-process (stdin empty unless `input` is given)."""
        if self.as_process:
            return self.process(*args, env=env, input=input)
        return nmt_in_process(*args, cwd=self.tmp, input=input if input is not None else "", env=env, check=False)

    def process(self, *args: str, env: dict | None = None, input: str | None = None, file_size: int | None = None,
                stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
        """The installed `nmt ARGS` in a subprocess, writing at most `file_size` bytes a file, its stdout to `stdout`."""
        return subprocess.run(
            [NMT, *args], cwd=self.tmp, input=input if input is not None else "", stdout=stdout, stderr=subprocess.PIPE,
            text=True, env={**os.environ, "COLUMNS": "200", **(env or {})},
            preexec_fn=_file_size_limit(file_size) if file_size is not None else None,
        )


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file under `directory` (hidden ones too) by relative path: compared before and after a failure."""
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def hidden(directory: Path) -> list[str]:
    """Temporary files and dirs nmt would have left (its temporaries all start with a dot)."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


@pytest.fixture(scope="module")
def run_dir(prepared, tmp_path_factory) -> Path:
    """A tiny run with one complete checkpoint (checkpoints/1), trained in-process."""
    from nmtcli.training.settings import train_settings_for
    from nmtcli.training.trainer import Trainer

    run = tmp_path_factory.mktemp("errors-run") / "run"
    config, settings = train_settings_for("tiny", max_steps=1, batch_tokens=300, save_every=1, device="cpu")
    Trainer(run, prepared, config, settings).run()
    return run


TRAIN = ["--preset", "tiny", "--batch-tokens", "300", "--device", "cpu"]  # what run_dir was trained with


@pytest.fixture
def hub():
    from hub_server import FakeHub

    with FakeHub({}) as server:
        yield server


def hub_env(case: Case, endpoint: str) -> dict[str, str]:
    return {"HF_ENDPOINT": endpoint, "HF_HOME": str(case.tmp / "hf-home"), "HF_TOKEN": "", "HF_HUB_DISABLE_IMPLICIT_TOKEN": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def no_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")


def as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


# --- the rows, in the order of the table ---------------------------------------------------------------

@row("usage-unknown-option")
def _(c: Case):
    return c.nmt("translate", "--bogus")


@row("usage-bad-value")
def _(c: Case):
    return c.nmt("translate", "--beam", "four")


@row("usage-missing-argument")
def _(c: Case):
    return c.nmt("push")


@row("usage-unknown-command")
def _(c: Case):
    return c.nmt("frobnicate")


@row("usage-flags-that-cannot-work")
def _(c: Case):
    return c.nmt("translate", "--nbest", "2")


@row("file-missing")
def _(c: Case):
    return c.nmt("translate", "-m", str(c.fixture("random_model")), "-i", "missing.txt")


@row("file-is-a-directory")
def _(c: Case):
    (c.tmp / "corpus.en").mkdir()
    c.write("corpus.de", "ein satz\n")
    return c.nmt("prepare", "--train", "corpus", "--valid", "corpus")


@row("file-unreadable")
def _(c: Case):
    if as_root():
        pytest.skip("running as root, which reads a file whatever its permissions")
    c.write("hyp.txt", "a line\n")
    c.write("ref.txt", "a line\n").chmod(0)
    return c.nmt("score", "hyp.txt", "--ref", "ref.txt")


@row("output-permission-denied")
def _(c: Case):
    if as_root():  # root may write anywhere but where the kernel says no: sysfs has no files to create
        if not Path("/sys/kernel").is_dir():
            pytest.skip("running as root without /sys")
        out = "/sys/out.txt"
    else:
        (c.tmp / "locked").mkdir()
        (c.tmp / "locked").chmod(0o555)
        out = "locked/out.txt"
    return c.nmt("translate", "-m", str(c.fixture("random_model")), "-o", out, input="the dog sees a cat\n")


@row("output-path-blocked")
def _(c: Case):
    c.write("out", "a file where a dir should be\n")
    return c.nmt("translate", "-m", str(c.fixture("random_model")), "-o", "out/translation.txt", input="the dog\n")


@row("parallel-line-counts")
def _(c: Case):
    c.write("train.en", "a\nb\nc\n")
    c.write("train.de", "x\ny\n")
    return c.nmt("prepare", "--train", "train", "--valid", "train", "-s", "en", "-t", "de")


@row("corpus-empty")
def _(c: Case):
    c.write("train.en", "")
    c.write("train.de", "")
    return c.nmt("prepare", "--train", "train", "--valid", "train", "-s", "en", "-t", "de")


@row("corpus-nothing-left-after-cleaning")
def _(c: Case):
    c.write("train.en", "\n \n\n")
    c.write("train.de", "a\n\n \n")
    return c.nmt("prepare", "--train", "train", "--valid", "train", "-s", "en", "-t", "de")


@row("corpus-all-misaligned")
def _(c: Case):
    # Model 1 reads no length: "dog" x i beside "hund" x i explains itself no better than beside "hund" x j.
    c.write("train.en", "".join(" ".join(["dog"] * i) + "\n" for i in range(1, 40)))
    c.write("train.de", "".join(" ".join(["hund"] * i) + "\n" for i in range(1, 40)))
    return c.nmt("prepare", "--train", "train", "--valid", "train", "-s", "en", "-t", "de")


@row("text-not-utf8")
def _(c: Case):
    c.write("train.en", b"good\nbad \xff byte\n")
    c.write("train.de", b"gut\nschlecht\n")
    return c.nmt("prepare", "--train", "train", "--valid", "train", "-s", "en", "-t", "de")


@row("model-config-missing")
def _(c: Case):
    model = c.copy(c.fixture("random_model"), "model")
    (model / "config.json").unlink()
    return c.nmt("translate", "-m", "model", input="the dog\n")


@row("model-config-corrupt")
def _(c: Case):
    model = c.copy(c.fixture("random_model"), "model")
    (model / "config.json").write_bytes((model / "config.json").read_bytes()[:100])  # cut short
    return c.nmt("translate", "-m", "model", input="the dog\n")


@row("model-config-not-nmt")
def _(c: Case):
    model = c.copy(c.fixture("random_model"), "model")
    (model / "config.json").write_text('{"model_type": "marian", "d_model": 512}')
    return c.nmt("translate", "-m", "model", input="the dog\n")


@row("model-weights-missing")
def _(c: Case):
    model = c.copy(c.fixture("random_model"), "model")
    (model / "model.safetensors").unlink()
    return c.nmt("translate", "-m", "model", input="the dog\n")


@row("model-weights-truncated")
def _(c: Case):
    model = c.copy(c.fixture("random_model"), "model")
    data = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[: len(data) // 2])
    return c.nmt("info", "model")


@row("model-weights-corrupt")
def _(c: Case):
    model = c.copy(c.fixture("random_model"), "model")
    (model / "model.safetensors").write_bytes(b"\xff" * 4096)
    return c.nmt("push", "model", "alice/model")  # checked before any contact with the Hub


class _Payload:
    """Unpickling this runs os.mkdir: proof that a pickle was (or was not) loaded."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


@row("model-pickle-only")
def _(c: Case):
    import torch

    model = c.copy(c.fixture("random_model"), "model")
    (model / "model.safetensors").unlink()
    torch.save({"embedding.tokens.weight": _Payload(c.tmp / "pickle-ran")}, model / "pytorch_model.bin")
    result = c.nmt("translate", "-m", "model", input="the dog\n")
    assert not (c.tmp / "pickle-ran").exists()
    return result


@row("average-different-architectures")
def _(c: Case):
    # A copy of the run whose checkpoint says d_ff 256: the config is what averaging compares.
    other = c.copy(c.fixture("run_dir"), "other")
    config = other / "checkpoints" / "1" / "config.json"
    values = json.loads(config.read_text())
    values["model"]["d_ff"] = 256
    config.write_text(json.dumps(values))
    return c.nmt("average", str(c.fixture("run_dir") / "checkpoints" / "1"), "other/checkpoints/1", "-o", "model")


@row("average-different-vocabularies")
def _(c: Case):
    other = c.copy(c.fixture("run_dir"), "other")
    (other / "sentencepiece.model").write_bytes(b"another vocabulary")
    result = c.nmt("average", str(c.fixture("run_dir") / "checkpoints" / "1"), "other/checkpoints/1", "-o", "model")
    assert not (c.tmp / "model").exists()
    return result


@row("checkpoint-truncated")
def _(c: Case):
    run = c.copy(c.fixture("run_dir"), "run")
    weights = run / "checkpoints" / "1" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100_000])
    return c.nmt("average", "run/checkpoints/1", "-o", "model")


@row("resume-changed-shape")
def _(c: Case):
    run = c.copy(c.fixture("run_dir"), "run")
    before = snapshot(run)
    result = c.nmt("train", "--data", str(c.fixture("prepared")), "-o", "run", "--preset", "base", "--device", "cpu")
    assert snapshot(run) == before
    return result


@row("resume-corrupt-trainer-state")
def _(c: Case):
    run = c.copy(c.fixture("run_dir"), "run")
    state = run / "checkpoints" / "1" / "trainer.pt"
    state.write_bytes(state.read_bytes()[:1000])
    return c.nmt("train", "--data", str(c.fixture("prepared")), "-o", "run", *TRAIN, "--max-steps", "2")


@row("hub-id-not-found")
def _(c: Case):
    hub = c.fixture("hub")
    return c.process("pull", "owner/missing", env=hub_env(c, hub.endpoint))


@row("hub-no-network")
def _(c: Case):
    return c.process("translate", "-m", "owner/model", env=hub_env(c, "http://127.0.0.1:9"), input="the dog\n")  # port 9: nothing listens


@row("hub-unsafe-file-name")
def _(c: Case):
    from hub_server import Repo

    hub = c.fixture("hub")
    files = {p.name: p.read_bytes() for p in c.fixture("random_model").iterdir()}
    files["../escaped.model"] = b"written outside the Hub cache"  # matches the *.model pattern of a model dir
    hub.repos["owner/evil"] = Repo(branches={"main": "e" * 40}, commits={"e" * 40: files})
    result = c.process("pull", "owner/evil", "-o", "pulled", env=hub_env(c, hub.endpoint))
    assert not list(c.tmp.rglob("escaped.model")) and not (c.tmp / "pulled").exists()
    return result


@row("no-gpu-translate")
def _(c: Case):
    no_gpu()
    return c.nmt("translate", "-m", str(c.fixture("random_model")), "--device", "cuda", input="the dog\n")


@row("no-gpu-train")
def _(c: Case):
    no_gpu()
    return c.nmt("train", "--data", str(c.fixture("prepared")), "-o", "run", "--preset", "tiny", "--device", "cuda")


@row("cuda-graphs-fp16")
def _(c: Case):
    return c.nmt("train", "--data", str(c.fixture("prepared")), "-o", "run", *TRAIN, "--precision", "fp16", "--cuda-graphs")


@row("compile-unavailable")
def _(c: Case):
    # No C++ compiler: inductor cannot build CPU code (a fresh cache, so nothing compiled before is reused).
    env = {"CXX": str(c.tmp / "no-such-compiler"), "TORCHINDUCTOR_CACHE_DIR": str(c.tmp / "inductor-cache")}
    return c.process("train", "--data", str(c.fixture("prepared")), "-o", "run", *TRAIN, "--max-steps", "1", "--compile", env=env)


@row("gpu-out-of-memory")
def _(c: Case):
    # A CPU has no GPU to fill: the error a GPU raises for a batch that does not fit is injected at step 1.
    return c.nmt("train", "--data", str(c.fixture("prepared")), "-o", "run", *TRAIN, "--max-steps", "2",
                 env={"NMT_TEST_FAULT": "oom:1"})


@row("no-gpu-score")
def _(c: Case):
    no_gpu()
    model = c.copy(c.fixture("random_model"), "model")
    values = json.loads((model / "config.json").read_text())
    values["training"] = {"data_dir": str(c.fixture("prepared"))}  # score translates that data's test split
    (model / "config.json").write_text(json.dumps(values))
    return c.nmt("score", "-m", "model", "--device", "cuda")


@row("out-of-memory-one-line")
def _(c: Case):
    # A GPU running out of memory cannot be produced on demand: NMT_TEST_FAULT makes every batch of more
    # than 0 lines raise torch's OutOfMemoryError, as a full GPU would.
    return c.nmt("translate", "-m", str(c.fixture("random_model")), input="the dog\nthe cat\n",
                 env={"NMT_TEST_FAULT": "oom-above:0"})


@row("score-different-lengths")
def _(c: Case):
    c.write("hyp.txt", "one\ntwo\n")
    c.write("ref.txt", "one\n")
    return c.nmt("score", "hyp.txt", "--ref", "ref.txt")


@row("disk-full-translate-output")
def _(c: Case):
    model = str(c.fixture("random_model"))
    c.write("in.txt", "the dog sees a cat\nthe red car\n")
    c.nmt("translate", "-m", model, "-i", "in.txt", "-o", "out.txt", "--beam", "1")
    before = (c.tmp / "out.txt").read_bytes()
    result = c.process("translate", "-m", model, "-i", "in.txt", "-o", "out.txt", "--beam", "1", file_size=1)
    assert (c.tmp / "out.txt").read_bytes() == before and hidden(c.tmp) == []
    return result


@row("disk-full-stdout")
def _(c: Case):
    with open("/dev/full", "w") as full:  # every write: ENOSPC
        return c.process("translate", "-m", str(c.fixture("random_model")), "--beam", "1", input="the dog sees a cat\n", stdout=full)


@row("disk-full-average")
def _(c: Case):
    model = c.copy(c.fixture("random_model"), "model")  # an earlier model in the place averaging writes to
    before = snapshot(model)
    result = c.process("average", str(c.fixture("run_dir") / "checkpoints" / "1"), "-o", "model", file_size=100_000)
    assert snapshot(model) == before and hidden(c.tmp) == []
    return result


@row("disk-full-checkpoint")
def _(c: Case):
    run = c.copy(c.fixture("run_dir"), "run")
    before = snapshot(run / "checkpoints" / "1")
    # Step 2 writes a checkpoint (--save-every 2) before step 3 would validate; its weights are > 1 MB.
    result = c.process("train", "--data", str(c.fixture("prepared")), "-o", "run", *TRAIN, "--max-steps", "3", "--save-every", "2",
                   file_size=1_000_000)
    assert snapshot(run / "checkpoints" / "1") == before
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["1", "best"]  # no 2, no .tmp-2
    return result


@row("disk-full-prepare")
def _(c: Case):
    train = c.fixture("corpus")["train"]
    largest = max(Path(f"{train}.{lang}").stat().st_size for lang in ("en", "de"))
    # Room for the cleaned text (never longer than its input), not for the ~250 kB sentencepiece model. The language
    # filter stays off: py3langid unpacks its model into a temporary file first, which the limit would stop sooner.
    result = c.process("prepare", "--train", str(train), "--valid", str(c.fixture("corpus")["valid"]), "-o", "data",
                   "--vocab-size", "1000", "--keep-wrong-language", file_size=largest + 1000)
    # what a second run resumes from, and the lock one run at a time holds; no temporary file
    assert hidden(c.tmp / "data") == [".lock", ".work"]
    return result


@row("serve-extra-missing")
def _(c: Case):
    blocked = c.tmp / "blocked"
    blocked.mkdir()
    (blocked / "starlette.py").write_text("raise ImportError('not installed here')\n")  # as if the extra were missing
    return c.process("serve", "-m", str(c.fixture("random_model")), "--port", "0", env={"PYTHONPATH": str(blocked)})


@row("serve-port-in-use")
def _(c: Case):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        return c.process("serve", "-m", str(c.fixture("random_model")), "--port", str(taken.getsockname()[1]))


# --- the tests -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("row_id", list(ROWS))
def test_error_row(row_id, request, tmp_path):
    documented = doc_rows()[row_id]
    result = ROWS[row_id](Case(request, tmp_path))
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("nmt: error: ")]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    assert matches(documented.message, errors[0]), f"\n   docs: {documented.message}\n actual: {errors[0]}"
    assert result.returncode == documented.exit_code, result.stderr


def test_ctrl_c_is_one_line_and_exit_code_130(random_model, tmp_path):
    documented = doc_rows()["interrupted"]
    # SIGINT at its default even where the suite runs as a background job, whose children start with it ignored.
    process = subprocess.Popen([NMT, "translate", "-m", str(random_model), "--window", "1", "--beam", "1"], cwd=tmp_path, text=True,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    process.stdin.write("the dog sees a cat\n")
    process.stdin.flush()
    process.stdout.readline()  # the first line is translated: nmt is waiting for the next one
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr and matches(documented.message, lines[-1]), stderr
    assert process.returncode == documented.exit_code == 130


def test_debug_shows_the_traceback(tmp_path):
    for args, env in ((["--debug", "info", str(tmp_path)], {}), (["info", str(tmp_path)], {"NMT_DEBUG": "1"}),
                      (["--debug", "translate", "--bogus"], {})):
        result = Case(None, tmp_path).nmt(*args, env=env)
        assert "Traceback" in result.stderr, args
        assert result.stderr.strip().splitlines()[-1].startswith("nmt: error: "), args


def test_help_and_bare_groups_still_print_help(tmp_path):
    for args in ([], ["import"]):
        result = Case(None, tmp_path).process(*args)
        assert result.returncode == 2 and "Usage" in result.stdout and "nmt: error" not in result.stderr


# Rows that run in-process, one or more per exit code and kind of command, with stdin, a model, a
# training run and an injected fault among them.
COMPARED_ROWS = ["usage-unknown-option", "usage-flags-that-cannot-work", "file-missing", "model-weights-truncated",
                 "average-different-vocabularies", "gpu-out-of-memory", "out-of-memory-one-line"]


@pytest.mark.slow  # each row runs twice, once as the installed command: ~20 s in all
@pytest.mark.parametrize("row_id", COMPARED_ROWS)
def test_a_row_in_process_is_what_the_installed_command_gives(row_id, request, tmp_path):
    """The rows' in-process runs stand for the installed command: it gives the same exit code, stdout and stderr."""
    in_process = ROWS[row_id](Case(request, tmp_path / "run"))
    as_process = ROWS[row_id](Case(request, tmp_path / "RUN", as_process=True))
    def alike(text: str, run_dir: str) -> str:  # the same but for the scratch dir and the times a progress bar shows
        return re.sub(r"\d+:\d\d:\d\d", "H:MM:SS", text.replace(run_dir, "<tmp>"))

    assert as_process.returncode == in_process.returncode == doc_rows()[row_id].exit_code
    assert alike(as_process.stdout, str(tmp_path / "RUN")) == alike(in_process.stdout, str(tmp_path / "run"))
    assert alike(as_process.stderr, str(tmp_path / "RUN")) == alike(in_process.stderr, str(tmp_path / "run"))


def test_the_table_and_the_tests_agree():
    rows = doc_rows()
    here = {row_id for row_id, r in rows.items() if r.test == "`test_errors.py`"}
    assert here == set(ROWS) | {"interrupted"}, "docs/errors.md rows and the ROWS of test_errors.py differ"
    for row_id, r in rows.items():  # rows tested elsewhere name an existing test
        if r.test != "`test_errors.py`":
            file, _, name = r.test.strip("`").partition("::")
            assert f"def {name}(" in (Path(__file__).parent / file).read_text(), f"{row_id}: {r.test} does not exist"
