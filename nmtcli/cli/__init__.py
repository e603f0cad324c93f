"""The `nmt` command: a Typer app with one module per subcommand.

Commands parse flags, print, and call one function of the core. Errors a user can cause are
`NmtError`s and print as one `nmt: error: ...` line; `--debug` (or NMT_DEBUG=1) shows the traceback.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Annotated

import typer

from nmtcli import __version__
from nmtcli.cli import average, export, import_model, info, prepare, pull, push, quickstart, score, train, translate
from nmtcli.errors import NmtError

app = typer.Typer(
    name="nmt",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,  # completions/ holds static scripts: the dynamic ones would start Python on every TAB
    rich_markup_mode="rich",
    context_settings={"help_option_names": ["-h", "--help"]},
)

_debug = {"on": bool(os.environ.get("NMT_DEBUG"))}


def debug_enabled() -> bool:
    """Whether --debug (or NMT_DEBUG) asked for tracebacks; `nmt train --gpus` passes it on to its ranks."""
    return _debug["on"]


def _version(value: bool) -> None:
    if value:
        print(f"nmt {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks for errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Machine translation with the Transformer of 'Attention Is All You Need'.

    The commands chain with no paths: [bold]nmt prepare[/bold] writes data/NAME/, [bold]nmt train[/bold]
    writes runs/PRESET-NAME/, [bold]nmt average[/bold] writes models/RUN/, and [bold]nmt translate[/bold] /
    [bold]nmt score[/bold] use the newest model (or $NMT_MODEL). [bold]nmt push[/bold] / [bold]nmt pull[/bold] share
    models on the Hugging Face Hub, [bold]nmt import marian[/bold] converts OPUS-MT models, and
    [bold]nmt export ctranslate2[/bold] writes a model for CTranslate2 (int8 quantization for the smallest, fastest CPU model).
    """
    _debug["on"] = _debug["on"] or debug


for module in (quickstart, prepare, train, average, translate, score, info, push, pull):
    app.command(module.NAME, help=module.command.__doc__)(module.command)
for group in (import_model, export):
    app.add_typer(group.app, name=group.NAME)


def main(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, prog_name="nmt")
    except NmtError as e:
        if _debug["on"]:
            traceback.print_exc()
        print(f"nmt: error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
