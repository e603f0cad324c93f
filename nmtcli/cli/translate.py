"""`nmt translate`: text in, translations out, one line for every line, in order."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, BinaryIO, Optional

import typer

from nmtcli.cli.common import resolve_model, say, warn

NAME = "translate"


def read_text_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Lines split on LF only (CRLF accepted); invalid UTF-8 is replaced, reported, and still translated."""
    for number, raw in enumerate(stream, start=1):
        raw = raw.rstrip(b"\n").rstrip(b"\r")
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            warn(f"{name}, line {number}: invalid UTF-8 replaced with U+FFFD")
            yield raw.decode("utf-8", errors="replace")


def command(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model dir, or a Hub id OWNER/NAME (downloaded once into the Hub cache; HF_HUB_OFFLINE=1 uses the cache only). Default: $NMT_MODEL, else the newest under models/.")] = None,
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit of the Hub model given with -m.")] = None,
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help="Input text, one sentence a line. Default: stdin.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Output file (written atomically). Default: stdout.")] = None,
    beam: Annotated[int, typer.Option(help="Beam size (sec. 6.1: 4); 1 is greedy search.", min=1)] = 4,
    alpha: Annotated[float, typer.Option(help="Length penalty exponent (sec. 6.1: 0.6); 0 disables it.", min=0.0)] = 0.6,
    length_penalty: Annotated[str, typer.Option(help="gnmt: ((5+|Y|)/6)^alpha, the paper's; power: |Y|^alpha (fairseq, CTranslate2).")] = "gnmt",
    max_len_a: Annotated[float, typer.Option(help="Output length limit a*|x|+b: the a (sec. 6.1: 1).", min=0.0)] = 1.0,
    max_len_b: Annotated[int, typer.Option(help="Output length limit a*|x|+b: the b (sec. 6.1: 50).", min=0)] = 50,
    batch_tokens: Annotated[int, typer.Option(help="Padded source tokens per batch.", min=1)] = 4096,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda or cuda:N.")] = "auto",
    engine: Annotated[str, typer.Option(help="native: nmt's PyTorch search; ctranslate2: a model dir written by `nmt export ctranslate2` (needs the ctranslate2 extra; the fastest on CPU).")] = "native",
    threads: Annotated[int, typer.Option(help="CPU threads for --engine ctranslate2 (0: its default).", min=0)] = 0,
) -> None:
    """Translate text with beam search: beam 4, length penalty 0.6, at most input length + 50 tokens.

    Reads raw text (stdin by default), writes detokenized translations: exactly one output line per
    input line, in input order. Empty lines stay empty; over-long lines are truncated with a warning.
    """
    from nmtcli.errors import NmtError
    from nmtcli.inference.beam import LENGTH_PENALTIES
    from nmtcli.inference.translator import SearchSettings, Translator
    from nmtcli.model.checkpoint import atomic_path
    from nmtcli.training.trainer import resolve_device

    if length_penalty not in LENGTH_PENALTIES:
        raise NmtError(f"unknown --length-penalty {length_penalty!r}", f"choose one of {', '.join(LENGTH_PENALTIES)}", exit_code=2)
    if engine not in ("native", "ctranslate2"):
        raise NmtError(f"unknown --engine {engine!r}", "choose native or ctranslate2", exit_code=2)
    settings = SearchSettings(beam=beam, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b, length_penalty=length_penalty, batch_tokens=batch_tokens)
    if engine == "ctranslate2":
        from nmtcli.inference.ct2 import CTranslate2Translator

        # A CTranslate2 dir is what `nmt export ctranslate2` wrote; it is never a default or a Hub id.
        if model is None:
            raise NmtError("--engine ctranslate2 needs -m CT2_DIR", "export one with `nmt export ctranslate2 MODEL_DIR CT2_DIR`", exit_code=2)
        translator = CTranslate2Translator(Path(model), device, settings, threads, warn=warn)
    else:
        translator = Translator(resolve_model(model, revision), resolve_device(device), settings, warn=warn)
    if input is not None and not input.is_file():
        raise NmtError(f"{input} does not exist", "check the path given to --input")
    source = open(input, "rb") if input is not None else sys.stdin.buffer
    name = str(input) if input is not None else "stdin"
    count = 0
    try:
        if output is None:
            for line in translator.translate(read_text_lines(source, name)):
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
                count += 1
        else:
            with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as f:
                for line in translator.translate(read_text_lines(source, name)):
                    f.write(line + "\n")
                    count += 1
    finally:
        if input is not None:
            source.close()
    say(f"translated {count:,} line(s)")
