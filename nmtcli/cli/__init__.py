"""The `nmt` command: the Typer app (cli/root.py) with one module per subcommand, added here, and `main`, which runs it.

Commands parse flags, print, and call one function of the core. Errors a user can cause are
`NmtError`s and print as one `nmt: error: ...` line; `--debug` (or NMT_DEBUG=1) shows the traceback.
"""

from __future__ import annotations

import errno
import os
import sys
import traceback

import typer

from nmtcli import threads
from nmtcli.cli import average, distill, export, import_model, info, prepare, pull, push, quickstart, score, serve, shortlist, train, translate
from nmtcli.cli.common import notice
from nmtcli.cli.root import app, debug_enabled
from nmtcli.cli.renamed import current_args
from nmtcli.errors import NmtError

for module in (quickstart, prepare, train, average, shortlist, translate, serve, score, info, push, pull, distill):
    app.command(module.NAME, help=module.command.__doc__)(module.command)
for group in (import_model, export):
    app.add_typer(group.app, name=group.NAME)


try:  # typer >= 0.20 carries its own copy of click; before, it used click itself
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover
    from click.exceptions import ClickException, UsageError


def main(argv: list[str] | None = None) -> None:
    """Run `nmt`; every way it can fail ends in one `nmt: error: ...` line (docs/errors.md lists them).

    Typer runs without its standalone mode so that usage errors, a full disk or Ctrl-C come back here
    instead of as click's multi-line usage box; `--help`, `--version` and bare `nmt` still print help.
    """
    args = current_args(sys.argv[1:] if argv is None else argv, notice)
    threads.configure(next((a for a in args if not a.startswith("-")), None))  # before torch loads: its pool reads the environment once
    try:
        code = app(args=args, prog_name="nmt", standalone_mode=False)
    except NmtError as e:
        _fail(str(e), e.exit_code)
    except UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # bare `nmt` or `nmt import`: show the help
            if e.format_message().strip():  # typer's rich help has printed itself; click returns the text
                print(e.format_message())
            sys.exit(e.exit_code)
        command = e.ctx.command_path if e.ctx is not None else "nmt"
        _fail(f"{_one_line(e.format_message()).rstrip('.')} (see `{command} --help`)", 2)
    except ClickException as e:
        _fail(_one_line(e.format_message()), e.exit_code)
    except typer.Abort:
        _fail("aborted", 1)
    except KeyboardInterrupt:
        code = 130
    except OSError as e:
        from nmtcli.errors import file_system_error

        error = file_system_error(e, doing="writing" if e.errno in _WRITE_ERRNOS else "on")
        if error is None:
            raise
        _fail(str(error), error.exit_code)
    if code == 130:  # typer turns Ctrl-C into exit code 130
        _fail("interrupted (files written so far are intact; `nmt train` and `nmt prepare` resume where they stopped)", 130)
    sys.exit(code if isinstance(code, int) else 0)


_WRITE_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS}  # only ever met while writing


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _fail(message: str, exit_code: int) -> None:
    """Print the one error line (after the traceback with --debug) and exit."""
    if debug_enabled() and sys.exc_info()[0] is not None:
        traceback.print_exc()
    _release_stdout()
    print(f"nmt: error: {message}", file=sys.stderr)
    sys.exit(exit_code)


def _release_stdout() -> None:
    """After a failed write to stdout (a full disk), its buffer still holds text that Python would try
    to flush at exit and report as a second error; point stdout at /dev/null so that flush succeeds."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass
