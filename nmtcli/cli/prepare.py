"""`nmt prepare`: parallel text files -> a prepared data dir (joint BPE, binarized, manifest)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import DATA_ROOT, announce, progress_bar, say

NAME = "prepare"


def command(
    train: Annotated[Path, typer.Option(help="Training files: PREFIX.SRC and PREFIX.TGT, one sentence a line, aligned.", metavar="PREFIX")],
    valid: Annotated[Path, typer.Option(help="Validation files PREFIX.SRC / PREFIX.TGT (e.g. newstest2013).", metavar="PREFIX")],
    test: Annotated[Optional[Path], typer.Option(help="Test files PREFIX.SRC / PREFIX.TGT (e.g. newstest2014), kept as plain text for `nmt score`.", metavar="PREFIX")] = None,
    source_lang: Annotated[str, typer.Option("--source-lang", "-s", help="Source language code (the file suffix).")] = "en",
    target_lang: Annotated[str, typer.Option("--target-lang", "-t", help="Target language code (the file suffix).")] = "de",
    vocab_size: Annotated[int, typer.Option(help="Joint sentencepiece BPE vocabulary (sec. 5.1: about 37,000 for WMT14 en-de); smaller corpora get what they support.", min=300)] = 37000,
    max_tokens: Annotated[int, typer.Option(help="Drop pairs with a side longer than this many subword tokens.", min=1)] = 250,
    max_ratio: Annotated[float, typer.Option(help="Drop training pairs whose token-length ratio exceeds this.", min=1.0)] = 1.5,
    seed: Annotated[int, typer.Option(help="Seed for sampling sentencepiece training text.")] = 1,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Data dir to write. Default: data/SRC-TGT.")] = None,
) -> None:
    """Clean parallel text, train a joint BPE vocabulary and binarize it for training.

    Drops empty pairs, pairs over --max-tokens subword tokens and (training split only) pairs whose
    length ratio exceeds --max-ratio. Writes sentencepiece.model, binarized train/valid arrays,
    plain-text valid/test copies and manifest.json (counts, settings, checksums, versions).
    """
    from nmtcli.data.prepare import PrepareSettings, prepare_files

    name = f"{source_lang}-{target_lang}"
    out = output or DATA_ROOT / name
    announce("prepared data", out)
    settings = PrepareSettings(source_lang, target_lang, vocab_size, max_tokens, max_ratio, seed=seed)
    with progress_bar() as progress:
        manifest = prepare_files(out, train, valid, test, settings, name, progress)
    for split, counts in manifest["splits"].items():
        if "pairs" in counts:
            dropped = ", ".join(f"{k} {v}" for k, v in counts["dropped"].items()) or "none"
            say(f"{split}: {counts['pairs']:,} of {counts['input_pairs']:,} pairs kept (dropped: {dropped})")
    say(f"vocabulary: {manifest['vocab_size']:,} pieces; done in {manifest['seconds']} s")
