"""`nmt ARGS` in a fresh process forked from a server that has already imported torch.

A fresh `nmt` process spends 2-3 s of a 2-core machine importing torch before it reads its first
argument; ~60 of the suite's commands are separate processes only because what they test reads the
environment when it is imported (huggingface_hub reads $HF_ENDPOINT, $HF_HOME and $HF_HUB_OFFLINE then)
or because they must not share this process's state. multiprocessing's fork server imports torch once
(and nothing of nmt, huggingface_hub or sacrebleu) and forks a child for each command; the child takes
the command's environment, working dir and standard streams (file descriptors 0-2 too), imports nmt and
runs the same `main()` the `nmt` script runs, and exits with its code, as `nmt` would.

What differs from `nmt` started by the shell: torch was imported under the test run's environment (the
tests that set $OMP_NUM_THREADS or other variables torch reads at import use run_nmt), and the process
is not the one that the shell started (signals and start-up are run_nmt's too).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import sys
import tempfile
import traceback

_SERVER = multiprocessing.get_context("forkserver")
_SERVER.set_forkserver_preload(["torch"])


def exit_code_of_main(argv) -> int:
    """`nmtcli.cli.main(argv)` as the `nmt` script runs it: the exit code Python would give the process (an
    uncaught exception prints its traceback and gives 1; a SystemExit with a message prints it and gives 1)."""
    from nmtcli import cli

    try:
        cli.main(list(argv))
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - what Python prints and returns for an uncaught exception
        traceback.print_exc()
        return 1
    return 0


def _child(argv: list[str], env: dict[str, str], cwd: str | None, stdin: str, stdout: str, stderr: str) -> None:
    """What the forked process runs: `nmt ARGV` with the given environment and streams, then exit."""
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    for fd, path, mode in ((0, stdin, os.O_RDONLY), (1, stdout, os.O_WRONLY), (2, stderr, os.O_WRONLY)):
        opened = os.open(path, mode)
        os.dup2(opened, fd)
        os.close(opened)
    # The streams of a fresh interpreter over the new descriptors (stderr unbuffered by lines, as Python's).
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - the process's own stream
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)  # noqa: SIM115
    sys.argv = ["nmt", *argv]
    code = exit_code_of_main(argv)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def run_forked(args: tuple[str, ...], cwd, stdin: bytes, env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """Run `nmt ARGS` in a forked child: its exit code (-N if signal N killed it, as subprocess says), stdout, stderr."""
    with tempfile.TemporaryDirectory(prefix="nmt-forked-") as streams:
        paths = [os.path.join(streams, name) for name in ("stdin", "stdout", "stderr")]
        with open(paths[0], "wb") as f:
            f.write(stdin)
        for path in paths[1:]:
            open(path, "wb").close()
        process = _SERVER.Process(target=_child, args=(list(args), env, None if cwd is None else str(cwd), *paths))
        process.start()
        process.join()
        with open(paths[1], "rb") as out, open(paths[2], "rb") as err:
            return process.exitcode, out.read(), err.read()
