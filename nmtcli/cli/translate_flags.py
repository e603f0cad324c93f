"""`nmt translate`'s flags checked before any model is loaded: every flag that does not go with another, a file that
cannot be read, two files of different line counts, each one line saying what to do (exit 2). `check_flags` runs
them all in order; the command (cli/translate.py) then builds its SearchSettings from what they allow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from nmtcli.cli import options


def check_flags(ctx: typer.Context, *, input: Path | None, output_format: str, nbest: int, engine: str, length_penalty: str,
                closest_to: Path | None, forced_decoding: bool, protect: list[str] | None, no_protect: bool, sampling: str | None,
                temperature: float | None, seed: int | None, prefix_file: Path | None, format: str, alignment: str | None,
                target_file: Path | None, split_sentences: bool, min_confidence: float | None, glossary: Path | None,
                max_glossary: int) -> tuple[str, Any, Any]:
    """Every flag of the command checked, in this order: returns (the --format chosen, the protected spans' protection,
    None with --forced-decoding; the --glossary read, or None)."""
    from nmtcli.errors import NmtError, check_readable

    check_output_flags(output_format, nbest, engine, length_penalty, closest_to)
    from nmtcli.api import protection as protection_of

    protection = None if forced_decoding else protection_of(not no_protect, protect or [], "--protect")
    check_sampling_flags(ctx, sampling, temperature, seed)
    if prefix_file is not None and sampling is not None:
        raise NmtError("--prefix-file works with beam and greedy search, not with --sampling",
                       "drop one of them", exit_code=2)
    if input is not None:
        check_readable(input, "check the path given to --input")
    from nmtcli.cli.documents import chosen_format

    format = chosen_format(format, input)
    # A document's flags first: `--format html --alignment words` was told to add --output-format json, which it refuses.
    check_html_flags(format, output_format, engine, alignment, forced_decoding, prefix_file, split_sentences)
    check_forced_flags(alignment, forced_decoding, target_file, output_format, nbest, engine, input)
    if min_confidence is not None and (forced_decoding or format != "text" or engine != "native"):
        flag = "--forced-decoding" if forced_decoding else f"--format {format}" if format != "text" else f"--engine {engine}"
        raise NmtError(f"--min-confidence does not go with {flag}", "it flags the native engine's translations of lines; "
                       "drop one of them", exit_code=2)
    if forced_decoding and (prefix_file is not None or sampling is not None):
        raise NmtError(f"--forced-decoding does not go with {'--prefix-file' if prefix_file is not None else '--sampling'}",
                       "score the given translations alone, or translate without --forced-decoding", exit_code=2)
    if prefix_file is not None:
        check_prefix_file(prefix_file, input)
    if split_sentences and (forced_decoding or prefix_file is not None):
        raise NmtError(f"--split-sentences does not go with {'--forced-decoding' if forced_decoding else '--prefix-file'}",
                       f"a {'given translation' if forced_decoding else 'prefix'} belongs to a whole line: cut the lines into sentences "
                       "first, or leave --split-sentences out", exit_code=2)
    terms = glossary_terms(glossary, max_glossary, forced_decoding, sampling, engine)
    return format, protection, terms


def check_output_flags(output_format: str, nbest: int, engine: str, length_penalty: str, closest_to: Path | None = None) -> None:
    """--output-format, --nbest, --engine, --length-penalty and --closest-to, with each other."""
    from nmtcli.errors import NmtError, check_readable

    options.check_length_penalty(length_penalty)
    if output_format not in ("text", "json"):
        raise NmtError(f"unknown --output-format {output_format!r}", "choose text or json", exit_code=2)
    if closest_to is not None:
        check_readable(closest_to, "check the path given to --closest-to")
        if nbest < 2 or output_format != "text" or engine != "native":
            raise NmtError("--closest-to picks one of --nbest N translations as text, on the native engine",
                           "give --nbest 2 or more (e.g. --beam 8 --nbest 8), and no --output-format json or --engine", exit_code=2)
        return
    if nbest > 1 and output_format == "text":
        raise NmtError("--nbest above 1 needs --output-format json", "text output has exactly one line per input line", exit_code=2)
    if engine not in ("native", "ctranslate2"):
        raise NmtError(f"unknown --engine {engine!r}", "choose native or ctranslate2", exit_code=2)

def check_sampling_flags(ctx: typer.Context, sampling: str | None, temperature: float | None, seed: int | None) -> None:
    """--sampling's spec and temperature, and the flags that do not go with it (one error line, exit 2)."""
    from nmtcli.errors import NmtError
    from nmtcli.inference.sampling import DEFAULT_SEED, check_sampling

    if sampling is None:
        for flag, value in (("--temperature", temperature), ("--seed", seed)):
            if value is not None:
                raise NmtError(f"{flag} applies to sampling only", f"add --sampling full, topk:K or topp:P, or drop {flag}", exit_code=2)
        return
    check_sampling(sampling, 1.0 if temperature is None else temperature, DEFAULT_SEED if seed is None else seed)
    for name, flag in (("beam", "--beam"), ("alpha", "--alpha"), ("length_penalty", "--length-penalty"),
                       ("brevity_penalty", "--brevity-penalty")):
        if ctx.get_parameter_source(name).name != "DEFAULT":  # given on the command line (or by an environment variable)
            raise NmtError(f"{flag} does not go with --sampling", f"sampling draws each token instead of searching; drop {flag} "
                                                                  "(--nbest N draws N samples)", exit_code=2)

def check_forced_flags(alignment: str | None, forced_decoding: bool, target_file: Path | None, output_format: str, nbest: int,
                        engine: str, input: Path | None) -> None:
    """The flags of forced decoding (--forced-decoding, --target-file) and --alignment, and the line counts of two files."""
    from nmtcli.errors import NmtError, check_readable
    from nmtcli.inference.alignment import UNITS

    if alignment is not None and alignment not in UNITS:
        raise NmtError(f"unknown --alignment {alignment!r}", f"choose {' or '.join(UNITS)}", exit_code=2)
    if (alignment is not None or forced_decoding) and engine != "native":
        flag = "--forced-decoding" if forced_decoding else "--alignment"
        raise NmtError(f"{flag} is not available with --engine {engine}", "use the native engine (the default) with the model dir", exit_code=2)
    if alignment is not None and output_format != "json":
        raise NmtError("--alignment needs --output-format json", "text output has only the translation on each line", exit_code=2)
    if target_file is not None and not forced_decoding:
        raise NmtError("--target-file is read only with --forced-decoding", "add --forced-decoding to score the translations it holds", exit_code=2)
    if not forced_decoding:
        return
    if target_file is None:
        raise NmtError("--forced-decoding needs --target-file FILE", "give the translations to score, one per input line", exit_code=2)
    if nbest > 1:
        raise NmtError("--nbest has no meaning with --forced-decoding", "each given translation gets one score", exit_code=2)
    check_readable(target_file, "check the path given to --target-file")
    # Two regular files: a different count is an error before any work (a pipe is checked as it is read: counting would empty it).
    if input is not None and input.is_file() and target_file.is_file():
        lines, targets = count_lines(input), count_lines(target_file)
        if lines != targets:
            raise NmtError(f"--target-file {target_file} has {targets:,} line(s) but --input {input} has {lines:,}",
                           "give exactly one target line per input line", exit_code=2)

def check_html_flags(format: str, output_format: str, engine: str, alignment: str | None, forced_decoding: bool,
                      prefix_file: Path | None, split_sentences: bool) -> None:
    from nmtcli.errors import NmtError

    from nmtcli.documents.formats import FORMATS

    if format not in ("text", *FORMATS):
        raise NmtError(f"unknown --format {format!r}", f"choose auto, text or one of {', '.join(FORMATS)}", exit_code=2)
    if format == "text":
        return
    what = "HTML document" if format == "html" else "document"
    for given, flag in ((output_format != "text", "--output-format json"), (engine != "native", f"--engine {engine}"),
                        (alignment is not None, "--alignment"), (forced_decoding, "--forced-decoding"), (prefix_file is not None, "--prefix-file"),
                        (split_sentences and format == "html", "--split-sentences (HTML is always translated a sentence at a time)")):
        if given:
            raise NmtError(f"--format {format} does not go with {flag}", f"--format {format} writes the {what} translated "
                           "(its tags placed by the native engine's word alignment); drop one of them", exit_code=2)

def check_prefix_file(prefix_file: Path, input: Path | None) -> None:
    """A readable --prefix-file; with a regular --input file, as many lines as it, checked before any work.
    (Input streamed from stdin is checked as it is read: the window where one ends first is not translated.)"""
    from nmtcli.errors import NmtError, check_readable

    check_readable(prefix_file, "check the path given to --prefix-file")
    if input is None or not (input.is_file() and prefix_file.is_file()):
        return
    lines, prefixes = count_lines(input), count_lines(prefix_file)
    if lines != prefixes:
        raise NmtError(f"--prefix-file {prefix_file} has {prefixes:,} line(s) but --input {input} has {lines:,}",
                       "give one prefix per input line, an empty line for none", exit_code=2)

def count_lines(path: Path) -> int:
    """Lines as read_text_lines reads them: split on LF, a last line without one counted."""
    with open(path, "rb") as f:
        return sum(1 for _ in f)

def glossary_terms(path: Path | None, max_terms: int, forced_decoding: bool, sampling: str | None, engine: str):
    """--glossary read and checked against the flags it does not go with (None without one)."""
    from nmtcli.errors import NmtError
    from nmtcli.inference.glossary import read_glossary

    if path is None:
        return None
    if engine != "native":
        raise NmtError(f"--glossary needs the native engine: --engine {engine} gives no attention to place terms by",
                       "drop --engine, or drop --glossary", exit_code=2)
    if forced_decoding or sampling is not None:
        raise NmtError(f"--glossary does not go with {'--forced-decoding' if forced_decoding else '--sampling'}",
                       "a glossary puts terms into searched translations: drop one of them", exit_code=2)
    return read_glossary(path, max_terms)
