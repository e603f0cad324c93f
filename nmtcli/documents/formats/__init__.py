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
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import PurePath

from nmtcli.documents.formats.core import Block, Document, Translator, decoded, translate_document
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


def read(data: bytes, format: str) -> Document:
    """The file `data` of `format` as a Document; NmtError (exit 2) for bytes that are not that format."""
    if format == "html":
        return Document([Block([decoded(data, "HTML file")], html=True)])
    return importlib.import_module(f"nmtcli.documents.formats.{READERS[format]}").read(data, format)


def translate_file(translator: Translator, data: bytes, format: str, options: dict | None = None,
                   progress: Callable[[int, int], None] | None = None) -> tuple[bytes, int]:
    """The file `data` of `format` translated, as bytes, and how many blocks (paragraphs, cues, messages, units)
    it translated. A file that is not of its format raises NmtError before any translation."""
    document = read(data, format)
    translate_document(translator, document, options, progress)
    return written(document), translated_blocks(document)


def written(document: Document) -> bytes:
    """The document's bytes: its text in UTF-8, or a package's zip as it is."""
    rendered = document.render()
    return rendered if isinstance(rendered, bytes) else rendered.encode("utf-8")


def translated_blocks(document: Document) -> int:
    return sum(1 for b in document.blocks if b.translation is not None)
