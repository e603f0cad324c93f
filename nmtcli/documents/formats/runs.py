"""Paragraphs of runs, as Word (WordprocessingML, docx.py) and PowerPoint (DrawingML, pptx.py) write them.

A paragraph (`<w:p>`, `<a:p>`) is one block; its properties (`pPr`) are kept in front of it (and PowerPoint's
`<a:endParaRPr>` behind it). Each run (`<w:r>`, `<a:r>`) with formatting of its own (`rPr`: bold, italic, a font, a
colour) is an inline element around its text, so the alignment puts each run's formatting on the translation of its
words instead of merging the paragraph into its first run (what LibreTranslate's users report, its issues #599 and
#683); so are the containers of runs (Word's hyperlinks, tracked insertions, simple fields, smart tags). The runs in
the paragraph's own formatting (its base: the run start and `rPr` that hold most of its text) are its plain text, as
text outside every tag is in HTML: were they elements too, every target word would belong to some run, and a run
whose words the translation reorders (an English verb that German puts last) would claim the words between them,
pushing a bold run's formatting off its own words. A run that
holds no text or something besides text that must not be translated (a field code, a drawing, a note reference), a
field, a tracked deletion, bookmarks, comment anchors and proofing marks are standalone elements, kept whole and
placed by the alignment; a tab or a line break inside a run stays in a run. Translated text outside every run (words
the alignment gave to no run) is written in a run of the paragraph's base formatting, and a whole element the
alignment put inside a run is written between the run's two halves, since a run holds no run.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from nmtcli.documents.formats.core import Block, Document, Tag, Token
from nmtcli.documents.formats.limits import Budget
from nmtcli.documents.formats.xmlbytes import Edit, Element, parse, spliced, text, unescaped


@dataclass(frozen=True)
class Dialect:
    prefix: str  # the namespace prefix runs are written with: "w", "a"
    text: str  # the start of a text element: '<w:t xml:space="preserve">', "<a:t>"
    containers: frozenset[str]  # elements that hold runs inside a paragraph
    kept_run_children: frozenset[str]  # a run holding one of these is kept whole
    run_content: frozenset[str]  # a run's children that are not text but stay in a run (tab, break)
    last: frozenset[str] = frozenset()  # a paragraph's last children that stay last
    breaks: frozenset[str] = frozenset(("br", "cr"))  # line breaks: the sentence before one ends there


def read_part(source: bytes | Iterable[bytes], dialect: Dialect, budget: Budget | None = None) -> Document:
    """A part's paragraphs as blocks, every other byte kept (`source`: its bytes, or its chunks as they unpack)."""
    root, data = parse(source, budget)
    edits: list[tuple[int, int, Edit]] = []
    blocks: list[Block] = []
    for paragraph in _paragraphs(root):
        children = [c for c in paragraph.children if c.name != "pPr"]
        end = paragraph.end
        while children and children[-1].name in dialect.last:  # PowerPoint's end-of-paragraph properties stay last
            end = children.pop().start
        if not children:
            continue
        kinds: dict[int, str] = {}
        tokens = _tokens(data, children, kinds, dialect)
        base = _base_run(tokens, kinds) or f"<{dialect.prefix}:r>"
        plain = {t.id for t in tokens if isinstance(t, Tag) and t.kind == "open" and kinds[t.id] == "run" and _formatting(t.markup) == _formatting(base)}
        tokens = [t for t in tokens if not (isinstance(t, Tag) and t.id in plain)]
        block = Block(tokens, write=lambda tokens, kinds=kinds, base=base: _write(tokens, kinds, dialect, base))
        blocks.append(block)
        start = children[0].start
        edits.append((start, end, Edit(block, text(data, start, end), block.render)))
    return Document(spliced(data, edits), blocks)


def _paragraphs(element: Element) -> Iterator[Element]:
    """The paragraphs not inside another (a Word text box's sit in a drawing in a run of another paragraph: that run
    is kept whole, the text box's paragraphs with it), in order; a walk with a stack of its own, as deep as elements nest."""
    walk = [iter(element.children)]
    while walk:
        child = next(walk[-1], None)
        if child is None:
            walk.pop()
        elif child.name == "p":
            yield child
        else:
            walk.append(iter(child.children))


def _base_run(tokens: Sequence[Token], kinds: dict[int, str]) -> str | None:
    """The opening (run start and properties) of a run in the formatting that holds most of a paragraph's text: its
    base formatting."""
    held: dict[str, int] = {}
    opening: dict[str, str] = {}  # a formatting's first run's opening
    opened: list[str | None] = []
    for token in tokens:
        if isinstance(token, str):
            if opened and opened[-1] is not None:
                held[opened[-1]] = held.get(opened[-1], 0) + len(token)
        elif token.kind == "open":
            formatting = _formatting(token.markup) if kinds[token.id] == "run" else None
            if formatting is not None:
                opening.setdefault(formatting, token.markup)
            opened.append(formatting)
        elif token.kind == "close" and opened:
            opened.pop()
    return opening[max(held, key=held.get)] if held else None  # the first of equals


# What run properties record of editing and proofing, not of how the text looks: PowerPoint's run to lay out again,
# word the spelling checker marked, smart-tag bookkeeping and proofing language; Word's proofing language and its
# "do not check" mark. The translation is in another language anyway.
EDITING_STATE = re.compile(r'\s(?:dirty|err|smtClean|smtId|lang|altLang)="[^"]*"|<w:lang\b[^>]*/>|<w:noProof\s*/>')
NO_PROPERTIES = re.compile(r"<(\w+):rPr\s*/>|<(\w+):rPr\s*></\2:rPr>")  # empty properties: none


def _formatting(opening: str) -> str:
    """A run's formatting: its properties, without the run start tag's attributes (Word's revision ids, `w:rsidR`,
    differ between runs of one formatting typed at different times) and PowerPoint's editing state."""
    return NO_PROPERTIES.sub("", EDITING_STATE.sub("", opening[opening.index(">") + 1:]))


def _tokens(data: bytes, children: list[Element], kinds: dict[int, str], dialect: Dialect) -> list[Token]:
    """A paragraph's children as text and tags, a container's (a hyperlink's) inside its own; `kinds` gets each
    element's kind by its id ("run", "container", "in-run": a tab or break of a run, "void": a whole element kept).
    Containers nest as deep as elements do: a walk with a stack of its own."""
    out: list[Token] = []
    opened: list[tuple[Iterator[Element], Element | None, int]] = [(iter(children), None, -1)]  # (children left, container, id)
    while opened:
        siblings, container, n = opened[-1]
        child = next(siblings, None)
        if child is None:
            opened.pop()
            if container is not None:
                out.append(Tag("close", text(data, container.end, container.end_end), n))
        elif child.name == "r" and any(c.name == "t" for c in child.children) and not any(c.name in dialect.kept_run_children for c in child.children):
            out += _run(data, child, kinds, dialect)
        elif child.name in dialect.containers and child.end_end > child.end:
            kinds[len(kinds)] = "container"
            out.append(Tag("open", text(data, child.start, child.start_end), len(kinds) - 1))
            opened.append((iter(child.children), child, len(kinds) - 1))
        else:
            kinds[len(kinds)] = "void"
            out.append(Tag("break" if child.name in dialect.breaks else "void", text(data, child.start, child.end_end), len(kinds) - 1))
    return out


def _run(data: bytes, run: Element, kinds: dict[int, str], dialect: Dialect) -> list[Token]:
    """A run of text: its formatting (the run start and its properties) around its text, tabs and breaks."""
    n = len(kinds)
    kinds[n] = "run"
    properties = next((c for c in run.children if c.name == "rPr"), None)
    out: list[Token] = [Tag("open", text(data, run.start, properties.end_end if properties else run.start_end), n)]
    for part in run.children:
        if part.name == "t":
            out.append(unescaped(text(data, part.start_end, part.end)))
        elif part.name != "rPr":
            kinds[len(kinds)] = "in-run" if part.name in dialect.run_content else "void"
            out.append(Tag("break" if part.name in dialect.breaks else "void", text(data, part.start, part.end_end), len(kinds) - 1))
    out.append(Tag("close", text(data, run.end, run.end_end), n))
    return out


def _write(tokens: Sequence[Token], kinds: dict[int, str], dialect: Dialect, base: str) -> str:
    """Tokens as the dialect writes them: text in `<w:t>` (`<a:t>`) inside its run, or in a run opened by `base` (the
    paragraph's base formatting) outside every run (spaces between two runs go at the end of the first, rather than in
    a run of their own); a tab or break
    the alignment put outside its run in a run of its own; a whole element (a field's run, a bookmark) it put inside
    a run between the run's two halves, since a run holds no run."""
    out: list[str] = []
    runs: list[Tag | None] = []  # for each open element: its start tag if it is a run
    open_text: str | None = None  # what closes the text being written: "</w:t>" or "</w:t></w:r>"
    run, text_start = base, dialect.text
    text_end, run_end = f"</{dialect.prefix}:t>", f"</{dialect.prefix}:r>"
    ended = None  # where in `out` the text of the run that has just closed ends (spaces can still join it)
    for token in tokens:
        if isinstance(token, str):
            if not token:
                continue
            if ended is not None and token.isspace() and not (runs and runs[-1]):
                out.insert(ended, html.escape(token, quote=False))
                ended += 1
                continue
            ended = None
            if open_text is None:
                in_run = bool(runs) and runs[-1]
                out.append(text_start if in_run else run + text_start)
                open_text = text_end if in_run else text_end + run_end
            out.append(html.escape(token, quote=False))
            continue
        closing_text = open_text is not None
        if open_text is not None:
            out.append(open_text)
            open_text = None
        ended = None
        kind = kinds.get(token.id, "void")
        if token.kind == "open":
            runs.append(token if kind == "run" else None)
        elif token.kind == "close" and runs:
            closed = runs.pop()
            if closed is not None and closing_text:
                ended = len(out) - 1  # before the "</w:t>" just written
        in_run = bool(runs) and runs[-1] is not None
        standalone = token.kind in ("void", "break")
        if standalone and kind == "in-run" and not in_run:
            out.append(f"{run}{token.markup}{run_end}")
        elif standalone and kind == "void" and in_run:
            out.append(f"{run_end}{token.markup}{runs[-1].markup}")
        else:
            out.append(token.markup)
    if open_text is not None:
        out.append(open_text)
    return "".join(out)
