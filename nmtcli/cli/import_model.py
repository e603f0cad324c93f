"""`nmt import marian`: convert a Hugging Face Marian model (OPUS-MT) into an nmt model dir."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import command_group, MODELS_ROOT, announce, say

NAME = "import"

app = command_group(NAME, "Convert a model trained with another toolkit into an nmt model dir.")


@app.command("marian")
def marian(
    source: Annotated[str, typer.Argument(metavar="SRC", help="Hub id (e.g. Helsinki-NLP/opus-mt-en-de) or a local Hugging Face Marian dir.", show_default=False)],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Model dir to write. Default: models/NAME.")] = None,
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit when SRC is a Hub id.")] = None,
    source_lang: Annotated[Optional[str], typer.Option("--source-lang", "-s", help="Source language code. Default: from the tokenizer config or the opus-mt-SRC-TGT name.")] = None,
    target_lang: Annotated[Optional[str], typer.Option("--target-lang", "-t", help="Target language code. Default: as for --source-lang.")] = None,
) -> None:
    """Import a Hugging Face MarianMTModel (the OPUS-MT models) as an nmt model dir.

    SRC holds config.json, model.safetensors (or pytorch_model.bin, read with weights_only=True),
    source.spm, target.spm and vocab.json. The converted model computes the same logits: swish,
    sines-first positions, the final logits bias and the pad-token decoder start are model config
    switches. Translate with `nmt translate -m DIR`; to search as transformers does with the
    OPUS-MT settings, pass `--beam 4 --length-penalty power --alpha 1`.
    """
    from nmtcli.interop.marian import import_marian

    out = output or MODELS_ROOT / re.sub(r"[^\w.-]+", "-", Path(source.rstrip("/")).name)
    announce("the imported model", out)
    values = import_marian(source, out, revision=revision, source_lang=source_lang, target_lang=target_lang, say=say)
    m = values["model"]
    say(f"imported {values['languages']['source']}->{values['languages']['target']}: {m['layers']}+{m['layers']} layers, "
        f"d_model {m['d_model']}, vocabulary {m['vocab_size']:,}")
    print(out)
