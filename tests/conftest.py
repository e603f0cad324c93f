"""Shared fixtures, each made once per test run and shared read-only (a test that changes one copies it first).

- `workspace`: the one `nmt prepare -> nmt train -> nmt average` pipeline of the run, through the
  installed command with the workspace defaults (data/en-de, runs/tiny-en-de, models/tiny-en-de), on the
  synthetic corpus of corpus.py. Each step runs when a test first needs it: `prepared` is its data dir,
  `trained_model` its averaged model (300 tiny CPU steps). test_end_to_end checks what each step said.
- `untrained_model`: the same pipeline stopped after one step, built in-process: the baseline a
  trained model must beat.
- `random_model`: an untrained, seeded tiny model dir made in a second, for what needs a model but not
  a good one.

`run_nmt` runs the installed `nmt` in a subprocess: for exit codes, signals, pipes and start-up.
`nmt_main` (or `nmt_in_process`) runs the same `main()` in this process, with the same stdout, stderr
and exit code, without paying for Python and torch starting again: for everything else.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

if os.environ.get("PYTEST_XDIST_WORKER") is not None:
    # Under pytest-xdist (`make test` runs a worker per CPU) each worker's torch, and each `nmt` it starts, shares
    # the CPUs with the other workers: OpenMP threads that wait for work sleep instead of spinning on a CPU
    # another worker needs (nmtcli/threads.py makes the same choice when it sees other runnable tasks).
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from corpus import write_corpus  # noqa: E402
from forked_nmt import exit_code_of_main  # noqa: E402



def pytest_collection_modifyitems(config, items):
    """The files holding slow tests (the long trainings) first, each file's tests in their order: `make test` runs
    `--dist loadfile`, a worker taking a whole file at a time, and a long file left for the end would have the suite
    wait for it on one worker while the other idles (the suite took 12 minutes so, on 2 cores)."""
    slow = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in slow)


NMT = str(Path(sys.executable).with_name("nmt"))
COLUMNS = "200"  # wide enough that no message is wrapped


def run_nmt(*args: str, cwd: Path | None = None, input: str | bytes | None = None, env: dict | None = None, check: bool = True):
    """Run the installed `nmt` command; returns the CompletedProcess (text mode unless input is bytes)."""
    text = not isinstance(input, bytes)
    result = subprocess.run(
        [NMT, *args], cwd=cwd, input=input, capture_output=True, text=text,
        env={**os.environ, "COLUMNS": COLUMNS, **(env or {})},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"nmt {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


# --- `nmt` in this process ------------------------------------------------------------------------


class _KeptBytes(io.BytesIO):
    """A BytesIO whose contents survive close() (a command may close the stream it was given)."""

    def close(self) -> None:
        self.kept = self.getvalue()
        super().close()

    def value(self) -> bytes:
        return self.kept if self.closed else self.getvalue()


def _as_text(data: bytes) -> str:
    """Decode as subprocess.run(text=True) does: UTF-8 with universal newlines."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=None).read()


def nmt_in_process(*args: str, cwd: Path | None = None, input: str | bytes | None = None, env: dict | None = None,
                   check: bool = True) -> subprocess.CompletedProcess:
    """`nmt ARGS` as run_nmt runs it, but through nmtcli.cli.main in this process.

    The same main() the `nmt` script calls, with stdin (sys.stdin and file descriptor 0), stdout and
    stderr replaced by buffers, the environment, working dir, argv and warning filters of a fresh process,
    and its SystemExit turned into the return code (an uncaught exception prints its traceback and gives
    1, as Python does).
    What the command changes in the process (environment, working dir, torch's thread count, the
    --debug switch) is put back afterwards. Returns a CompletedProcess like run_nmt's.
    """
    from nmtcli.cli import root
    from nmtcli.cli.common import console

    binary = isinstance(input, bytes)
    data = input if binary else (input or "").encode("utf-8")
    stdin = _KeptBytes(data)
    stdout, stderr = _KeptBytes(), _KeptBytes()
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams, saved_argv = (sys.stdin, sys.stdout, sys.stderr), sys.argv
    saved_console = console._width, console._force_terminal, console._color_system
    saved_debug = root._debug["on"]
    torch = sys.modules.get("torch")
    saved_threads = torch.get_num_threads() if torch is not None else None
    code = 0
    # File descriptor 0 too, for what reads /dev/stdin (`nmt score -`).
    stdin_file = tempfile.TemporaryFile()
    stdin_file.write(data)
    stdin_file.seek(0)
    saved_fd0 = os.dup(0)
    os.dup2(stdin_file.fileno(), 0)
    try:
        os.environ.update({"COLUMNS": COLUMNS, **(env or {})})
        if cwd is not None:
            os.chdir(cwd)
        sys.argv = ["nmt", *args]
        sys.stdin = io.TextIOWrapper(stdin, encoding="utf-8")
        sys.stdout = io.TextIOWrapper(stdout, encoding="utf-8", write_through=True)
        sys.stderr = io.TextIOWrapper(stderr, encoding="utf-8", errors="backslashreplace", write_through=True)
        # The console was made when nmtcli was imported, in pytest's environment: as it is made in `nmt`.
        console._width, console._force_terminal, console._color_system = int(COLUMNS), None, None
        root._debug["on"] = bool(os.environ.get("NMT_DEBUG"))  # read once, when `nmt` starts
        with warnings.catch_warnings():
            warnings.resetwarnings()  # a fresh interpreter's filters, printing to stderr
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)
            warnings.showwarning = warnings._showwarning_orig
            code = exit_code_of_main(args)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(ValueError):
                stream.flush()
    finally:
        os.dup2(saved_fd0, 0)
        os.close(saved_fd0)
        stdin_file.close()
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        console._width, console._force_terminal, console._color_system = saved_console
        root._debug["on"] = saved_debug
        if saved_threads is not None and torch.get_num_threads() != saved_threads:
            torch.set_num_threads(saved_threads)
    out, err = stdout.value(), stderr.value()
    result = subprocess.CompletedProcess(["nmt", *args], code, out if binary else _as_text(out), err if binary else _as_text(err))
    if check and code != 0:
        raise AssertionError(f"nmt {' '.join(args)} (in-process) exited {code}:\n{_as_text(err)}")
    return result


def nmt_forked(*args: str, cwd: Path | None = None, input: str | bytes | None = None, env: dict | None = None,
               check: bool = True) -> subprocess.CompletedProcess:
    """`nmt ARGS` as run_nmt runs it, in a fresh process forked from one that has imported torch (forked_nmt.py).

    For commands that need a process of their own (what they import reads the environment: the Hub
    client) but not the shell's start-up: ~0.3 s instead of ~2.5 s on 2 cores.
    """
    from forked_nmt import run_forked

    binary = isinstance(input, bytes)
    data = input if binary else (input or "").encode("utf-8")
    code, out, err = run_forked(args, cwd, data, {**os.environ, "COLUMNS": COLUMNS, **(env or {})})
    result = subprocess.CompletedProcess(["nmt", *args], code, out if binary else _as_text(out), err if binary else _as_text(err))
    if check and code != 0:
        raise AssertionError(f"nmt {' '.join(args)} (forked) exited {code}:\n{_as_text(err)}")
    return result


@contextlib.contextmanager
def torch_threads(count: int):
    """torch's intra-op threads set to `count` in this process for the block (a run in a subprocess with
    OMP_NUM_THREADS=count sums in the same order: bit-equal weights need the same count)."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(saved)


@pytest.fixture
def nmt_main():
    """nmt_main(*argv, cwd=, input=, env=, check=): `nmt ARGV` run in this process (see nmt_in_process)."""
    return nmt_in_process


# --- the session's data and models ------------------------------------------------------------------

# The split sizes of the synthetic corpus; 300 tiny steps on it reach BLEU ~96 on the test split.
CORPUS_LINES = {"train": 5000, "valid": 200, "test": 200}
TRAIN_STEPS, SAVE_EVERY = 300, 100


@dataclass
class Workspace:
    """The test run's one `nmt prepare -> nmt train -> nmt average` in a workspace dir, with the defaults.

    Each step runs (through the installed `nmt`) when a test first needs it; `steps` keeps each step's
    CompletedProcess so that test_end_to_end can check what it said. Read-only for the tests. Under
    pytest-xdist the workers share one workspace: the first to need a step runs it under a file lock and
    leaves its CompletedProcess beside it for the others (`made_once`).
    """

    root: Path
    corpus: dict[str, Path]
    steps: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.root / "data" / "en-de"

    @property
    def run_dir(self) -> Path:
        return self.root / "runs" / "tiny-en-de"

    @property
    def model_dir(self) -> Path:
        return self.root / "models" / "tiny-en-de"

    def _run(self, step: str, *args: str) -> None:
        if step not in self.steps:
            with made_once(self.root / f".{step}.pickle") as (done, outcome):
                if not done:
                    outcome.write_bytes(pickle.dumps(run_nmt(*args, cwd=self.root)))
            self.steps[step] = pickle.loads(outcome.read_bytes())

    def prepare(self) -> Path:
        c = self.corpus
        self._run("prepare", "prepare", "--train", str(c["train"]), "--valid", str(c["valid"]), "--test", str(c["test"]),
                  "--vocab-size", "1000")
        return self.data_dir

    def train(self) -> Path:
        self.prepare()
        self._run("train", "train", "--preset", "tiny", "--max-steps", str(TRAIN_STEPS), "--save-every", str(SAVE_EVERY),
                  "--valid-every", str(SAVE_EVERY), "--device", "cpu")
        return self.run_dir

    def average(self) -> Path:
        self.train()
        self._run("average", "average")
        return self.model_dir


@contextlib.contextmanager
def made_once(marker: Path):
    """Yields (done, marker): whether what `marker` stands for was made already, by this process or by
    another pytest-xdist worker. The block runs under a file lock, so one worker makes it while the others
    wait; the marker exists after a block that did not raise (the block may write it, else it is empty)."""
    from filelock import FileLock

    with FileLock(str(marker) + ".lock"):
        done = marker.exists()
        yield done, marker
        if not marker.exists():
            marker.touch()


def shared_dir(tmp_path_factory, name: str) -> Path:
    """A dir for the session: this run's own, or under pytest-xdist the one every worker of the run shares."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        return tmp_path_factory.mktemp(name)
    root = tmp_path_factory.getbasetemp().parent / name  # the run's basetemp: each worker's own is beneath it
    root.mkdir(exist_ok=True)
    return root


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Workspace:
    root = shared_dir(tmp_path_factory, "workspace")
    with made_once(root / ".corpus") as (done, _):
        if not done:
            write_corpus(root / "corpus", CORPUS_LINES)
    return Workspace(root, {split: root / "corpus" / split for split in CORPUS_LINES})


@pytest.fixture(scope="session")
def corpus(workspace) -> dict[str, Path]:
    """The synthetic corpus' prefixes (train, valid, test): PREFIX.en and PREFIX.de."""
    return workspace.corpus


@pytest.fixture(scope="session")
def prepared(workspace) -> Path:
    """The prepared data dir (vocabulary of 1,000 pieces) of the session's workspace."""
    return workspace.prepare()


@pytest.fixture(scope="session")
def trained_model(workspace) -> Path:
    """A tiny model trained for 300 CPU steps and its last 3 checkpoints averaged (runs/tiny-en-de beside it)."""
    return workspace.average()


@pytest.fixture(scope="session")
def trained_run(workspace) -> Path:
    """The run dir the trained model was averaged from: checkpoints 100, 200, 300 and metrics.jsonl."""
    workspace.average()
    return workspace.run_dir


@pytest.fixture(scope="session")
def reverse_model(trained_model, tmp_path_factory) -> Path:
    """The trained model's weights labelled de->en: a "reverse model" for the score filter's plumbing and arithmetic
    (its de->en scores are what the tests compute through Translator.score; it translates de->en badly), in a second."""
    import shutil

    out = tmp_path_factory.mktemp("reverse") / "tiny-de-en"
    shutil.copytree(trained_model, out)
    values = json.loads((out / "config.json").read_text())
    values["languages"] = {"source": "de", "target": "en"}
    (out / "config.json").write_text(json.dumps(values, indent=2))
    return out


@pytest.fixture(scope="session")
def untrained_model(prepared, tmp_path_factory) -> Path:
    """The pipeline stopped after one step (`nmt train --preset tiny --max-steps 1` then `nmt average`), in-process."""
    from nmtcli.training.average import average_checkpoints, checkpoints_to_average
    from nmtcli.training.settings import train_settings_for
    from nmtcli.training.trainer import Trainer

    root = tmp_path_factory.mktemp("untrained")
    config, settings = train_settings_for("tiny", max_steps=1, device="cpu")
    Trainer(root / "run", prepared, config, settings).run()
    average_checkpoints(checkpoints_to_average(root / "run", 5)[0], root / "model")
    return root / "model"


@pytest.fixture(scope="session")
def marian_dir(tmp_path_factory) -> Path:
    """A small swish MarianMTModel saved by transformers' save_pretrained, like an OPUS-MT repo (needs transformers)."""
    pytest.importorskip("transformers")
    from marian_fixture import write_marian_model

    root = shared_dir(tmp_path_factory, "marian")
    with made_once(root / ".written") as (done, _):
        if not done:
            write_marian_model(root / "opus-mt-en-de")
    return root / "opus-mt-en-de"


@pytest.fixture(scope="session")
def m2m100_dirs(tmp_path_factory) -> dict[str, Path]:
    """{"m2m100": dir, "nllb": dir}: one tiny M2M100ForConditionalGeneration saved by transformers with M2M100Tokenizer and
    with NllbTokenizer, like facebook/m2m100_* and facebook/nllb-200-* (needs transformers; tests/m2m100_fixture.py)."""
    pytest.importorskip("transformers")
    from m2m100_fixture import write_m2m100_models

    root = shared_dir(tmp_path_factory, "m2m100")
    with made_once(root / ".written") as (done, _):
        if not done:
            write_m2m100_models(root)
    return {kind: root / kind for kind in ("m2m100", "nllb")}


@pytest.fixture(scope="session")
def random_model(prepared, tmp_path_factory) -> Path:
    """An untrained tiny model dir (seeded) with the prepared vocabulary and a scores.json: made in a second."""
    import torch

    from nmtcli.model.checkpoint import model_dir_config, write_model_dir
    from nmtcli.model.config import PRESETS
    from nmtcli.model.transformer import Transformer

    torch.manual_seed(0)
    # Post-norm: untrained, a pre-norm model (tiny's norm) writes the same piece over and over for every line (its last
    # LayerNorm over a residual stream that is mostly the embeddings); the tests that use this model want lines that differ.
    config = PRESETS["tiny"].replace(vocab_size=1000, d_model=64, d_ff=128, heads=2, max_positions=256, norm="post")
    values = model_dir_config(config, "en", "de")
    out = tmp_path_factory.mktemp("random") / "tiny-en-de"
    write_model_dir(out, Transformer(config).state_dict(), values, {"sentencepiece.model": prepared / "sentencepiece.model"}, "# tiny-en-de\n")
    scores = {"en-de/test": {"BLEU": {"score": 12.3, "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"},
                             "chrF2": {"score": 40.1, "signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"}}}
    (out / "scores.json").write_text(json.dumps(scores))
    return out


@pytest.fixture(scope="session")
def random_student(prepared, tmp_path_factory) -> Path:
    """An untrained model dir (seeded) of a distilled student's shape: 3 encoder layers, 1 decoder layer."""
    import torch

    from nmtcli.card import local_card
    from nmtcli.model.checkpoint import model_dir_config, write_model_dir
    from nmtcli.model.config import PRESETS
    from nmtcli.model.transformer import Transformer

    torch.manual_seed(0)
    config = PRESETS["student-tiny"].replace(vocab_size=1000, d_model=64, d_ff=128, heads=2, layers=3, decoder_layers=1, max_positions=256)
    values = model_dir_config(config, "en", "de", training={"run": "student-tiny-en-de", "preset": "student-tiny", "steps": 0,
                                                            "averaged_checkpoints": [0], "data": "synthetic", "train_pairs": 0})
    out = tmp_path_factory.mktemp("random") / "student-tiny-en-de"
    write_model_dir(out, Transformer(config).state_dict(), values, {"sentencepiece.model": prepared / "sentencepiece.model"}, local_card(values))
    return out
