"""The `nmt` app itself: the Typer object, its root options (--debug, --version) and the debug switch.

cli/__init__.py adds one command per module to it and runs it (main); a command that runs other commands in this
process (`nmt distill`'s stages, `nmt prepare --target-mono`'s translation) takes the app from here.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from nmtcli import __version__

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

    New here? [bold]nmt quickstart[/bold] trains and tries a small model on your CPU in five minutes.

    The commands chain with no paths: [bold]nmt prepare[/bold] writes data/NAME/, [bold]nmt train[/bold]
    writes runs/PRESET-NAME/, [bold]nmt average[/bold] writes models/RUN/, and [bold]nmt translate[/bold] /
    [bold]nmt score[/bold] use the newest model (or $NMT_MODEL). [bold]nmt push[/bold] / [bold]nmt pull[/bold] share
    models on the Hugging Face Hub, [bold]nmt import marian[/bold] converts OPUS-MT models, and
    [bold]nmt export ctranslate2[/bold] writes a model for CTranslate2 (int8 quantization for the smallest, fastest CPU model).
    """
    _debug["on"] = _debug["on"] or debug
