"""`nmt pull`: download a model from the Hugging Face Hub into the Hub cache, or into a dir."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import say

NAME = "pull"


def command(
    repo_id: Annotated[str, typer.Argument(help="Hub repo OWNER/NAME of an nmt model.", show_default=False)],
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit to pin. Default: main.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Copy the model into this dir. Default: keep it in the Hub cache only.")] = None,
) -> None:
    """Download an nmt model from the Hugging Face Hub and print the model dir it is in.

    Only the model's files are fetched (config.json, model.safetensors, sentencepiece models, vocab.json,
    README.md, scores.json, a lexical shortlist); weights are safetensors, so nothing downloaded is executed or unpickled.
    With HF_HUB_OFFLINE=1 it answers from the Hub cache. `nmt translate -m OWNER/NAME` pulls on its own.
    """
    from nmtcli.cli.shortlist import written_over
    from nmtcli.hub import pull

    path = pull(repo_id, revision, output)
    if output is not None:
        written_over(path)
    say(f"{repo_id}{'@' + revision if revision else ''} is in {path}")
    print(path)
