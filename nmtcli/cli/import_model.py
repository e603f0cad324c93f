"""`nmt import marian|m2m100|nllb`: convert a Hugging Face model (OPUS-MT, M2M-100, NLLB-200) into an nmt model dir."""

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
    from nmtcli.cli.shortlist import written_over
    from nmtcli.interop.marian import import_marian
    from nmtcli.model.config import ModelConfig

    out = output or MODELS_ROOT / re.sub(r"[^\w.-]+", "-", Path(source.rstrip("/")).name)
    announce("the imported model", out)
    values = import_marian(source, out, revision=revision, source_lang=source_lang, target_lang=target_lang, say=say)
    written_over(out)
    m = values["model"]
    say(f"imported {values['languages']['source']}->{values['languages']['target']}: {ModelConfig.from_dict(m).depth} layers, "
        f"d_model {m['d_model']}, vocabulary {m['vocab_size']:,}")
    print(out)


def _multilingual(kind: str, source: str, output: Optional[Path], revision: Optional[str]) -> None:
    from nmtcli.cli.shortlist import written_over
    from nmtcli.interop.m2m100 import import_m2m100
    from nmtcli.model.config import ModelConfig

    out = output or MODELS_ROOT / re.sub(r"[^\w.-]+", "-", Path(source.rstrip("/")).name)
    announce("the imported model", out)
    values = import_m2m100(source, out, kind, revision=revision, say=say)
    written_over(out)
    m, languages = values["model"], values["tokenizer"]["languages"]
    say(f"imported {len(languages)} languages ({', '.join(list(languages)[:4])}, ...): {ModelConfig.from_dict(m).depth} layers, "
        f"d_model {m['d_model']}, vocabulary {m['vocab_size']:,}; license {values['license']}")
    print(out)


@app.command("m2m100")
def m2m100(
    source: Annotated[str, typer.Argument(metavar="SRC", help="Hub id (e.g. facebook/m2m100_418M) or a local transformers dir.", show_default=False)],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Model dir to write. Default: models/NAME.")] = None,
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit when SRC is a Hub id.")] = None,
) -> None:
    """Import M2M-100 (M2M100ForConditionalGeneration with M2M100Tokenizer: 100 languages, any direction).

    SRC holds config.json, model.safetensors (or pytorch_model.bin, read with weights_only=True),
    sentencepiece.bpe.model, vocab.json and tokenizer_config.json. The converted model computes the same
    logits (pre-norm, final layer norms, fairseq's sinusoids from pad + 1, scaled shared embeddings, ReLU).
    Translate with `nmt translate -m DIR --target-lang de [--source-lang en]`; `nmt info DIR` lists its languages.
    """
    _multilingual("m2m100", source, output, revision)


@app.command("nllb")
def nllb(
    source: Annotated[str, typer.Argument(metavar="SRC", help="Hub id (e.g. facebook/nllb-200-distilled-600M) or a local transformers dir.", show_default=False)],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Model dir to write. Default: models/NAME.")] = None,
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit when SRC is a Hub id.")] = None,
) -> None:
    """Import NLLB-200 (M2M100ForConditionalGeneration with NllbTokenizer: 200 languages, any direction).

    SRC holds config.json, model.safetensors (or pytorch_model.bin), sentencepiece.bpe.model and
    tokenizer.json. NLLB-200 is licensed CC-BY-NC-4.0 (non-commercial): the model dir keeps the licence and
    `nmt info` shows it. Translate with `nmt translate -m DIR --target-lang deu_Latn` (or `de`).
    """
    _multilingual("nllb", source, output, revision)
