"""`nmt push`: upload a model dir to the Hugging Face Hub with a generated model card."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import say

NAME = "push"


def command(
    model_dir: Annotated[Path, typer.Argument(help="Model dir to upload (written by `nmt average` or `nmt import`).", show_default=False)],
    repo_id: Annotated[str, typer.Argument(help="Hub repo OWNER/NAME; created if it does not exist.", show_default=False)],
    private: Annotated[bool, typer.Option("--private", help="Create the repo private (an existing repo keeps its visibility).")] = False,
    revision: Annotated[Optional[str], typer.Option(help="Branch to commit to; created from main if needed. Default: main.")] = None,
    message: Annotated[Optional[str], typer.Option("--message", "-M", help="Commit message. Default: 'Upload MODEL_DIR with nmt'.")] = None,
    license: Annotated[Optional[str], typer.Option(help="License in the model card. Default: the one the model dir records, else apache-2.0.")] = None,
) -> None:
    """Upload a model dir to the Hugging Face Hub with a generated model card.

    Uploads config.json, model.safetensors, the sentencepiece model(s), scores.json and a README.md
    whose YAML header carries the languages, license, `translation` tag, datasets and the recorded
    scores with their sacreBLEU signatures, and whose body describes the architecture, training data,
    recipe and how to use the model with nmt. The token comes from `hf auth login` or $HF_TOKEN;
    $HF_ENDPOINT selects another Hub.
    """
    from nmtcli.hub import push

    say(f"uploading {model_dir} to {repo_id}{'@' + revision if revision else ''}")
    url = push(model_dir, repo_id, private=private, revision=revision, message=message, license=license)
    print(url)
