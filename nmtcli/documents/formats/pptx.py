"""PowerPoint presentations (.pptx, Office Open XML): the text of every slide's shapes, tables and speaker notes
translated, its runs placed by the alignment; every other byte of the slides and notes, and every other part of the
package (layouts, masters, themes, media), kept.

The slides (ppt/slides/slideN.xml) and notes (ppt/notesSlides/notesSlideN.xml) are read for their bytes (xmlbytes.py;
package.py checks the zip). Paragraphs of runs (runs.py, DrawingML's dialect): each `<a:r>` with its `<a:rPr>`
(bold, size, colour, a hyperlink's `<a:hlinkClick>`) is an inline element placed by the alignment; line breaks
(`<a:br>`) and fields (`<a:fld>`: slide numbers, dates) are kept whole and placed by it; a paragraph's properties
(`<a:pPr>`) stay first and its end properties (`<a:endParaRPr>`) last. Masters' and layouts' placeholder text (what
PowerPoint shows in an empty placeholder) is not translated.
"""

from __future__ import annotations

import re

from nmtcli.documents.formats.core import Document
from nmtcli.documents.formats.limits import Budget
from nmtcli.documents.formats.package import read_package
from nmtcli.documents.formats.runs import Dialect, read_part

TEXT_PARTS = re.compile(r"ppt/(slides/slide|notesSlides/notesSlide)\d+\.xml")
DRAWING = Dialect("a", "<a:t>", frozenset(), frozenset(), frozenset(), last=frozenset(("endParaRPr",)))


def read(data: bytes, format: str = "pptx", budget: Budget | None = None) -> Document:
    return read_package(data, "PowerPoint presentation", "ppt/presentation.xml", TEXT_PARTS,
                        lambda part, budget: read_part(part, DRAWING, budget), budget)
