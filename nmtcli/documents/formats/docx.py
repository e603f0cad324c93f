"""Word documents (.docx, Office Open XML): every paragraph of the body, tables, headers, footers, footnotes and
endnotes translated, its runs placed by the alignment; every other byte of those parts, and every other part of the
package (styles, numbering, images, relationships, comments), kept.

A .docx is a zip of XML parts (package.py: the zip checked, the other parts copied). The parts with text
(word/document.xml, header*.xml, footer*.xml, footnotes.xml, endnotes.xml) are read for their bytes (xmlbytes.py:
expat with byte offsets, entities refused).

Paragraphs of runs (runs.py): each run (`<w:r>`, its `<w:rPr>` formatting) and each hyperlink (`<w:hyperlink>`),
tracked insertion (`<w:ins>`) and simple field (`<w:fldSimple>`) is an inline element placed by the alignment, not
merged into the paragraph's first run; a run holding a field code (`<w:fldChar>`, `<w:instrText>`), a drawing, a note
reference or an object, a tracked deletion (`<w:del>`), bookmarks, comment anchors and proofing marks are kept whole
and placed by the alignment. Text is written in `<w:t xml:space="preserve">`, so its spaces stay. Paragraphs inside
text boxes are not translated yet (the run holding the drawing is kept whole).
"""

from __future__ import annotations

import re

from nmtcli.documents.formats.core import Document
from nmtcli.documents.formats.limits import Budget
from nmtcli.documents.formats.package import read_package
from nmtcli.documents.formats.runs import Dialect, read_part

TEXT_PARTS = re.compile(r"word/(document|header\d*|footer\d*|footnotes|endnotes)\.xml")
CONTAINERS = frozenset(("hyperlink", "ins", "fldSimple", "smartTag", "customXml", "moveTo"))
KEPT_RUN_CHILDREN = frozenset(("fldChar", "instrText", "drawing", "pict", "object", "footnoteReference", "endnoteReference",
                               "commentReference", "delText", "AlternateContent", "ruby", "sym"))
RUN_CONTENT = frozenset(("tab", "br", "cr", "noBreakHyphen", "softHyphen", "lastRenderedPageBreak"))
WORD = Dialect("w", '<w:t xml:space="preserve">', CONTAINERS, KEPT_RUN_CHILDREN, RUN_CONTENT)


def read(data: bytes, format: str = "docx", budget: Budget | None = None) -> Document:
    return read_package(data, "Word document", "word/document.xml", TEXT_PARTS, lambda part, budget: read_part(part, WORD, budget), budget)
