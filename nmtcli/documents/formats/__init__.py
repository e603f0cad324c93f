"""Documents in, documents out: a file of a known format translated with everything but its text kept.

One module per format reads a file's bytes into a core.Document (blocks of text with inline elements among
parts kept byte for byte) and checks that the bytes are that format; core.translate_document translates the
blocks through the Python API; the document is written back. `translate_file` is what `nmt translate -i FILE`
and `nmt serve`'s /translate_file call.

    txt        text.py       each line a paragraph, split into sentences (as --split-sentences)
    srt, vtt   subtitles.py  cue text; numbers, timings, settings, styling kept; sentences over several cues
    po, pot    gettext.py    msgid -> msgstr (plurals), marked fuzzy; headers, comments, translated entries kept
    xliff      xliff.py      XLIFF 1.2 and 2.x: source -> target with inline codes placed by the alignment
    md         markdown.py   CommonMark: code, inline code, link targets, HTML kept
    html       (markup.py)   the whole file through Translator.translate_html
    docx       docx.py       Word: paragraphs, tables, headers, footers, notes; runs placed by the alignment
    odt, odp   odf.py        OpenDocument text and presentations: paragraphs, headings; spans and links placed
    pptx       pptx.py       PowerPoint: slides and notes; runs placed by the alignment (runs.py, as Word's)
    epub       epub.py       EPUB: each XHTML chapter through Translator.translate_html

Every reader is `read(data, format, budget)`: what reading may cost is counted against the budget's ReadLimits as it
reads (limits.py: a zip's bytes as they unpack, its compression ratio, XML's elements, depth and characters as they are
parsed) and refused as soon as a limit is passed; the text formats' work is linear in their bytes, and `read` counts
their characters once they are read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import PurePath

from nmtcli.documents.formats.core import Block, Document, Translator, decoded, translate_document
from nmtcli.documents.formats.limits import Budget, OverLimit, ReadLimits
from nmtcli.errors import NmtError

# Format name -> the module that reads it (html: none, the Python API's translate_html reads it whole).
READERS = {"txt": "text", "srt": "subtitles", "vtt": "subtitles", "po": "gettext", "xliff": "xliff", "md": "markdown", "html": "",
           "docx": "docx", "odt": "odf", "odp": "odf", "epub": "epub", "pptx": "pptx"}
# File extension -> format.
EXTENSIONS = {".txt": "txt", ".srt": "srt", ".vtt": "vtt", ".po": "po", ".pot": "po", ".xliff": "xliff", ".xlf": "xliff",
              ".md": "md", ".markdown": "md", ".html": "html", ".htm": "html", ".docx": "docx",
              ".odt": "odt", ".odp": "odp", ".epub": "epub", ".pptx": "pptx"}
FORMATS = tuple(READERS)


def format_of(name: str | PurePath, forced: str | None = None) -> str:
    """The format `forced` names, else the one of the file name's extension; NmtError for neither."""
    if forced is not None:
        if forced not in READERS:
            raise NmtError(f"unknown document format {forced!r}", f"choose one of {', '.join(FORMATS)}", exit_code=2)
        return forced
    suffix = PurePath(name).suffix.lower()
    if suffix not in EXTENSIONS:
        raise NmtError(f"{PurePath(name).name}: no document format is known for the extension {suffix or '(none)'!r}",
                       f"nmt translates {', '.join(EXTENSIONS)} files; --format names the format of another", exit_code=2)
    return EXTENSIONS[suffix]


def read(data: bytes, format: str, limits: ReadLimits | None = None) -> Document:
    """The file `data` of `format` as a Document, read whole (every entry of a package, so a damaged one is found
    here) within `limits` (default: `nmt translate`'s); NmtError (exit 2) for bytes that are not that format,
    OverLimit (an NmtError) for a file past a limit."""
    budget = Budget(limits)
    if format in PARSED_TEXT:
        _check_length(data, budget.limits)
    if format == "html":
        document = Document([Block([decoded(data, "HTML file")], html=True)])
    else:
        document = importlib.import_module(f"nmtcli.documents.formats.{READERS[format]}").read(data, format, budget)
    chars = sum(block.characters for block in document.blocks)
    if chars > budget.limits.chars:
        raise OverLimit(f"the file holds {chars:,} characters of text, the limit is {budget.limits.chars:,}")
    return document


# Text formats parsed as they are read (in time linear in their length, at up to ~10 us a character for a Markdown
# table's cells): their length, markup included, is held to twice the limit on their text before they are parsed.
PARSED_TEXT = frozenset(("txt", "srt", "vtt", "po", "md"))


def _check_length(data: bytes, limits: ReadLimits) -> None:
    length = len(data.decode("utf-8", "replace")) if len(data) > 2 * limits.chars else 0  # none has more characters than bytes
    if length > 2 * limits.chars:
        raise OverLimit(f"the file holds {length:,} characters, markup included: more than twice the limit of {limits.chars:,} "
                        "characters of text")


def translate_file(translator: Translator, data: bytes, format: str, options: dict | None = None,
                   progress: Callable[[int, int], None] | None = None, limits: ReadLimits | None = None) -> tuple[bytes, int]:
    """The file `data` of `format` translated, as bytes, and how many blocks (paragraphs, cues, messages, units)
    it translated. A file that is not of its format, or past `limits`, raises NmtError before any translation."""
    document = read(data, format, limits)
    translate_document(translator, document, options, progress)
    return written(document), translated_blocks(document)


def written(document: Document) -> bytes:
    """The document's bytes: its text in UTF-8, or a package's zip as it is."""
    rendered = document.render()
    return rendered if isinstance(rendered, bytes) else rendered.encode("utf-8")


def translated_blocks(document: Document) -> int:
    return sum(1 for b in document.blocks if b.translation is not None)
