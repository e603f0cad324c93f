"""Subtitles: SubRip (.srt) and WebVTT (.vtt). Only the cue text is translated; cue numbers, identifiers, timings
and cue settings, WebVTT's header, NOTE, STYLE and REGION blocks, blank lines and line endings are kept byte for byte.

A sentence often runs over several cues ("I think that" / "we should go."), and a model given half a sentence
translates it badly. So cues are read in *runs*: a run goes on while a cue's text does not end a sentence (., !, ?,
..., a closing quote after one; at most MAX_RUN cues), a run's text is translated as one block (cut into
sentences by the translator as any paragraph), and its translation is shared back over the same cues in
proportion to their source text's length, whole words each (core.split_by_length). Each cue keeps its number of
lines (the translation of a cue of two lines is cut in two lines of about the source's proportions), and a cue of
one line whose translation passes MAX_LINE characters gets a second one, as subtitle guidelines ask.

Styling (`<i>`, `<b>`, `<u>`, `<font color=...>`, WebVTT's `<c.class>`, `<v Speaker>`, `<lang>`, `<ruby>`) is
read as inline elements placed by the alignment; an element that ends up over two cues is closed at the end of
the first and opened again at the start of the second (each cue's styling stands alone on screen). A tag with no
partner (`<v Speaker>` without `</v>`, a `<00:00:01.500>` timestamp, SubRip's `{\\an8}` positions) is a
standalone element, and those that start a cue stay at its start. WebVTT's text is HTML-escaped (`&amp;`,
`&lt;`): read unescaped, written escaped; SubRip's is written as it is.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from nmtcli.documents.formats.core import Block, Document, Tag, Token, decoded, plain, split_by_length, text_of
from nmtcli.errors import NmtError

MAX_RUN = 6  # cues a sentence may run over before the run is cut anyway
MAX_LINE = 42  # characters a subtitle line should hold (the usual broadcast guideline)

_TIMING = re.compile(r"^\s*(?:\d+:)?\d{1,2}:\d{2}[,.]\d{1,3}\s*-->\s*(?:\d+:)?\d{1,2}:\d{2}[,.]\d{1,3}")
_TAG = re.compile(r"</?[A-Za-z0-9._:-]+(?:\s[^<>]*)?>|<\d[\d:.]*>|\{\\[^{}]*\}")
_NAME = re.compile(r"</?([A-Za-z][A-Za-z0-9]*)")
_SENTENCE_END = re.compile(r"[.!?…♪;:][\"'”’»)\]]*\s*$")
_LINE = re.compile(r".*?(?:\r\n|\n|\r|$)", re.S)


@dataclass
class Cue:
    lines: list[str]  # the cue's text lines as written (without their line ends)
    newline: str
    vtt: bool
    source: str = ""  # the cue's text as written, its line ends (a stray CR too) inside it
    head: list[Token] = field(default_factory=list)  # standalone tags that start the cue, kept at its start
    tokens: list[Token] = field(default_factory=list)  # the rest, its lines joined by spaces
    result: str | None = None

    def render(self) -> str:
        return self.result if self.result is not None else self.source


def read(data: bytes, format: str, budget=None) -> Document:
    vtt = format == "vtt"
    text = decoded(data, "subtitle file")
    lines = _LINE.findall(text)
    if lines and lines[-1] == "":
        lines.pop()
    if vtt and not (lines and lines[0].lstrip("\ufeff").startswith("WEBVTT")):
        raise NmtError("the file is not WebVTT: its first line is not WEBVTT", "check that it is the format its extension says", exit_code=2)
    parts: list = []
    cues: list[Cue] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "":  # blank lines between blocks
            parts.append(lines[i])
            i += 1
            continue
        end = i
        while end < len(lines) and lines[end].strip() != "":
            end += 1
        block = lines[i:end]
        timing = next((k for k, line in enumerate(block[:3]) if "-->" in line), None)
        if timing is None or not _TIMING.match(block[timing]) or (vtt and i == 0) or (vtt and block[0].startswith(("NOTE", "STYLE", "REGION"))):
            parts.extend(block)  # a header, a note, a style: kept
        else:
            parts.extend(block[:timing + 1])
            text_lines = [line.rstrip("\r\n") for line in block[timing + 1:]]
            if text_lines:
                last = block[-1]
                ending = last[len(last.rstrip("\r\n")):]
                newline = ending or ("\r\n" if "\r\n" in block[timing] else "\n")
                written = "".join(block[timing + 1:])
                cue = Cue(text_lines, newline, vtt, written[:len(written) - len(ending)])
                cues.append(cue)
                parts += [cue, ending]
        i = end
    if not cues and text.strip() and not vtt:
        raise NmtError("the file is not SubRip: no cue has a timing line (00:00:01,000 --> 00:00:02,000)",
                       "check that it is the format its extension says", exit_code=2)
    return _Shared(parts, list(_runs(cues)))


class Run(Block):
    """Cues whose text is one run of sentences: translated as one block, shared back over the cues."""

    def __init__(self, cues: list[Cue]):
        tokens: list[Token] = []
        number = 0
        for cue in cues:
            cue.head, cue.tokens, number = _tokens(" ".join(cue.lines), cue.vtt, number)
            if tokens and cue.tokens:
                tokens.append(" ")
            tokens += cue.tokens
        super().__init__(tokens)
        self.cues = cues

    def share(self) -> None:
        """Each cue's text from the run's translation."""
        if self.translation is None:
            return
        weights = [max(len(text_of(c.tokens).strip()), 1) for c in self.cues]
        for cue, piece in zip(self.cues, split_by_length(self.translation, weights)):
            count = len(cue.lines)
            if count == 1 and len(text_of(piece)) > MAX_LINE:
                count = 2
            weights = [len(line) or 1 for line in cue.lines] if count == len(cue.lines) else [1] * count
            lines = split_by_length(piece, weights, reopen=False) if count > 1 else [piece]
            written = [self._write(line) for line in lines if line]
            cue.result = self._write(cue.head) + cue.newline.join(written)

    def _write(self, tokens: Sequence[Token]) -> str:
        if not self.cues[0].vtt:
            return plain(tokens)
        return "".join(html.escape(t, quote=False) if isinstance(t, str) else t.markup for t in tokens)


def _runs(cues: list[Cue]) -> list[Run]:
    runs, current = [], []
    for cue in cues:
        current.append(cue)
        text = _TAG.sub("", " ".join(cue.lines)).strip()
        if _SENTENCE_END.search(text) or len(current) >= MAX_RUN or not text:
            runs.append(Run(current))
            current = []
    if current:
        runs.append(Run(current))
    return runs


class _Shared(Document):
    def render(self) -> str:
        for run in self.blocks:
            run.share()
        return super().render()


def _tokens(text: str, vtt: bool, number: int) -> tuple[list[Token], list[Token], int]:
    """A cue's text as (its leading standalone tags, the rest as tokens, the next tag number): tags paired by
    name as HTML nests them; one with no partner standalone."""
    pieces: list[tuple[str, str]] = []  # ("text", s) or ("tag", markup)
    at = 0
    for found in _TAG.finditer(text):
        if found.start() > at:
            pieces.append(("text", text[at:found.start()]))
        pieces.append(("tag", found[0]))
        at = found.end()
    if at < len(text):
        pieces.append(("text", text[at:]))
    partner: dict[int, int] = {}
    stack: list[tuple[str, int]] = []
    open_names: dict[str, int] = {}  # how many of each name the stack holds: an end tag with none open is not looked for
    for k, (kind, s) in enumerate(pieces):
        name = _NAME.match(s) if kind == "tag" else None
        if name is None:
            continue
        if s.startswith("</") and open_names.get(name[1].lower()):
            for depth in range(len(stack) - 1, -1, -1):
                if stack[depth][0] == name[1].lower():
                    partner[stack[depth][1]] = k
                    partner[k] = stack[depth][1]
                    for closed, _ in stack[depth:]:
                        open_names[closed] -= 1
                    del stack[depth:]
                    break
        elif not s.startswith("</"):
            stack.append((name[1].lower(), k))
            open_names[name[1].lower()] = open_names.get(name[1].lower(), 0) + 1
    tokens: list[Token] = []
    ids: dict[int, int] = {}
    for k, (kind, s) in enumerate(pieces):
        if kind == "text":
            tokens.append(html.unescape(s) if vtt else s)
        elif k not in partner:
            tokens.append(Tag("void", s, number))
            number += 1
        elif partner[k] > k:
            ids[k] = number
            tokens.append(Tag("open", s, number))
            number += 1
        else:
            tokens.append(Tag("close", s, ids[partner[k]]))
    leading = next((k for k, t in enumerate(tokens) if not (isinstance(t, Tag) and t.kind == "void")), len(tokens))
    return tokens[:leading], tokens[leading:], number
