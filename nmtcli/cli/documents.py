"""`nmt translate -i FILE` of a document format (.srt, .vtt, .po, .xliff, .md; .txt with --format txt): the file
read whole, translated through the Python API (documents/formats/), written whole and atomically."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path

from nmtcli.cli.common import console, progress_bar, say

# The formats --format chooses beside text (lines) and html; `auto` picks one by the input's extension.
AUTO_EXTENSIONS = (".srt", ".vtt", ".po", ".pot", ".xliff", ".xlf", ".md", ".markdown", ".html", ".htm", ".docx", ".pptx", ".odt", ".odp", ".epub")
# Documents nmt cannot translate yet: an error, rather than their bytes read as lines of text.
UNSUPPORTED = (".xlsx", ".ods", ".pdf", ".doc", ".ppt", ".rtf")


def chosen_format(format: str, input: Path | None) -> str:
    """--format auto: the format of -i FILE's extension where it is a document's (.srt, .po, .html, ...), else text
    (one line in, one line out: .txt too, as before documents; --format txt reads it as paragraphs)."""
    if format != "auto":
        return format
    if input is not None and input.suffix.lower() in UNSUPPORTED:
        from nmtcli.errors import NmtError

        raise NmtError(f"{input.name}: nmt does not translate {input.suffix.lower()} files", "convert it to one of .txt, "
                       ".srt, .vtt, .po, .xliff, .md, .html, .docx, .pptx, .odt, .odp or .epub first, or pass --format text to read it as lines of text", exit_code=2)
    if input is not None and input.suffix.lower() in AUTO_EXTENSIONS:
        from nmtcli.documents.formats import format_of

        return format_of(input)
    return "text"


def translate_document_file(load_translator, input: Path | None, output: Path | None, format: str, options: dict) -> None:
    """The document at `input` (stdin when None) read (and checked: a file not of its format is an error before the
    model loads), translated by `load_translator()`'s translator, and written to `output` (stdout when None); the
    output file is replaced in one rename after the whole document is translated, so an error leaves it as it was."""
    from nmtcli.documents.formats import read, translate_document, translated_blocks, written
    from nmtcli.errors import file_system_error
    from nmtcli.files import atomic_path

    started = time.perf_counter()
    data = input.read_bytes() if input is not None else sys.stdin.buffer.read()
    name = input.name if input is not None else "stdin"
    document = read(data, format)
    translator = load_translator()
    with (progress_bar() if console.is_terminal else contextlib.nullcontext()) as bar:
        def progress(done: int, total: int) -> None:
            if bar is not None and total > 1:
                bar(f"translating {name}", done, total)

        translate_document(translator, document, options, progress)
    translated = written(document)
    if output is None:
        try:
            sys.stdout.buffer.write(translated)
            sys.stdout.flush()
        except OSError as e:
            raise (file_system_error(e, "standard output") or e) from e
    else:
        with atomic_path(output) as tmp:
            tmp.write_bytes(translated)
    say(f"translated {translated_blocks(document):,} block(s) of {name} ({format}) in {time.perf_counter() - started:.1f} s")
