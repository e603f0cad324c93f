"""Markdown (CommonMark, with GitHub's tables): the text of paragraphs, headings, list items, quotes and table cells
translated; everything else kept byte for byte.

Where the text is comes from markdown-it-py (the CommonMark parser rich already depends on, so nothing new to
install): its block parse gives each run of inline text (an `inline` token) and the source lines it is on. Fenced
and indented code, HTML blocks, link reference definitions, thematic breaks, YAML front matter (`---` ... `---`
at the top) and each line's block markers (`#`, `>`, `-`, `1.`, a table's `|`) are outside those runs and kept.
Inside a run, markdown-it-py reports no offsets, so the inline markup is read here (`_inline`): code spans,
autolinks, inline HTML and images are standalone elements kept as written and placed by the alignment; a link is
an element whose start is `[` and whose end is `](target "title")` (or `][ref]`), so its target is kept and its
text translated; `*`, `**`, `_`, `__` and `~~` that pair up are elements too. Text is written as read (backslash
escapes and entities included). A paragraph over several lines is translated whole and its translation shared back
over the same lines by length (core.split_by_length), so the lines keep their block markers (`> ` on each).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nmtcli.documents.formats.core import Block, Document, Tag, Token, decoded, split_by_length
from nmtcli.errors import NmtError

_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?---[ \t]*\r?\n.*?^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S | re.M)
_LINE = re.compile(r".*?(?:\r\n|\n|\r|$)", re.S)
# Inline markup, leftmost first: code spans, autolinks, HTML tags, images, the start of a link, emphasis runs.
_INLINE = re.compile(r"(?P<code>(`+)(?:.+?)(?<!`)\2(?!`))"
                     r"|(?P<void><(?:[A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*|[^\s<>@]+@[^\s<>@]+)>"
                     r"|</?[A-Za-z][A-Za-z0-9-]*(?:\s[^<>]*)?/?>|<!--.*?-->"
                     r"|!\[[^\]]*\](?:\((?:[^()\s]|\([^()\s]*\))*(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)|\[[^\]]*\])?)"
                     r"|(?P<escape>\\[!-/:-@\[-`{-~])"
                     r"|(?P<open>\[)"
                     r"|(?P<emph>\*\*|__|~~|\*|_)")
MAX_LINK_DEPTH = 32  # links open in one another at most (as HTML's inline elements: markup.py's MAX_INLINE_DEPTH)
_LINK_END = re.compile(r"\]\((?:[^()\s]|\([^()\s]*\))*(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)|\]\[[^\]]*\]|\]")


@dataclass
class Lines:
    """A block whose text lies on several source lines (a paragraph): its translation shared back over them."""

    block: Block
    weights: list[int]
    shares: list[str] = field(default_factory=list)

    def share(self, k: int) -> str:
        if not self.shares:
            pieces = split_by_length(self.block.translation, self.weights, reopen=False) if self.block.translation is not None \
                else [[]] * len(self.weights)
            self.shares = [self.block.write(p) for p in pieces]
        return self.shares[k]


@dataclass
class Share:
    lines: Lines
    k: int
    original: str

    def render(self) -> str:
        return self.lines.share(self.k) if self.lines.block.translation is not None else self.original


def read(data: bytes, format: str = "md", budget=None) -> Document:
    from markdown_it import MarkdownIt

    text = decoded(data, "Markdown file")
    if "\x00" in text:
        raise NmtError("the Markdown file holds NUL bytes: it is binary, not text", "check that it is the format its extension says",
                       exit_code=2)
    front = _FRONT_MATTER.match(text)
    skip = front[0].count("\n") if front else 0
    lines = _LINE.findall(text)
    if lines and lines[-1] == "":
        lines.pop()
    spans: list[tuple[int, int, int, object]] = []  # (line, start, end, part) replacing lines[line][start:end]
    blocks: list[Block] = []
    cursor: dict[int, int] = {}  # per line: where the next inline run on it may start (table cells)
    # Blocks only: the inline text is read here (_inline), and markdown-it's own inline parse of it (its link labels
    # take quadratic time on a line of "[") is not run.
    for token in MarkdownIt("commonmark").enable("table").disable("inline").parse("".join(lines[skip:])):
        if token.type != "inline" or token.map is None or not token.content.strip():
            continue
        first = token.map[0] + skip
        found = []
        for k, content in enumerate(token.content.split("\n")):
            n = first + k
            if n >= len(lines):
                break
            at = lines[n].find(content, cursor.get(n, 0)) if content else -1
            if at < 0:
                found = []
                break
            found.append((n, at, at + len(content)))
        if not found:
            continue
        for n, _, end in found:
            cursor[n] = end
        block = Block(_inline(" ".join(token.content.split("\n"))))
        blocks.append(block)
        if len(found) == 1:
            spans.append((*found[0], block))
            continue
        shared = Lines(block, [max(end - start, 1) for _, start, end in found])
        spans += [(n, start, end, Share(shared, k, lines[n][start:end])) for k, (n, start, end) in enumerate(found)]
    spans.sort(key=lambda s: (s[0], s[1]))
    parts: list = []
    line, at = 0, 0
    for n, start, end, part in spans:
        while line < n:
            parts.append(lines[line][at:])
            line, at = line + 1, 0
        parts += [lines[line][at:start], part]
        at = end
    while line < len(lines):
        parts.append(lines[line][at:])
        line, at = line + 1, 0
    return Document([p for p in parts if p != ""], blocks)


def _inline(content: str) -> list[Token]:
    """A run of inline Markdown as text and tags (see the module's docstring)."""
    pieces: list[list] = []  # [kind, raw]: text, void, open (a link's "["), close (its "](...)"), emph
    at = 0
    opened: list[int] = []  # the pieces of links still open
    # The next end of a link from `at`: a search from an earlier place whose match starts at or after `at` is still the
    # first (a match depends on nothing before its start), so each is searched once, not once a "[" (a line of
    # 100,000 "[" took minutes so).
    end_link: re.Match | None = None
    searched = False
    while at < len(content):
        found = _INLINE.search(content, at)
        if opened and (not searched or (end_link is not None and end_link.start() < at)):
            end_link, searched = _LINK_END.search(content, at), True
        if opened and end_link and (found is None or end_link.start() < found.start()):
            found, kind = end_link, "close"
        elif found is None:
            break
        else:
            kind = next(k for k in ("code", "void", "escape", "open", "emph") if found[k] is not None)
        if found.start() > at:
            pieces.append(["text", content[at:found.start()]])
        raw = found[0]
        if kind == "close":
            if raw == "]":  # "[label]" with no target: a shortcut reference (its label must match), kept whole
                start = opened.pop()
                pieces[start:] = [["void", "".join(p[1] for p in pieces[start:]) + raw]]
            else:
                pieces.append(["close", raw, opened.pop()])
        elif kind == "open" and len(opened) < MAX_LINK_DEPTH:
            opened.append(len(pieces))
            pieces.append(["open", raw])
        elif kind == "open":  # links in links that deep are text: a shortcut's close joins what each holds again
            pieces.append(["text", raw])
        else:
            pieces.append([{"code": "void", "void": "void", "escape": "text", "emph": "emph"}[kind], raw])
        at = found.end()
    if at < len(content):
        pieces.append(["text", content[at:]])
    for k in opened:
        pieces[k][0] = "text"
    _pair_emphasis(pieces)
    tokens: list[Token | list[str]] = []  # a run of text pieces as a list, joined once: adding to a string is quadratic
    ids: dict[int, int] = {}
    for k, piece in enumerate(pieces):
        kind, raw = piece[0], piece[1]
        if kind == "text":
            if tokens and isinstance(tokens[-1], list):
                tokens[-1].append(raw)
            else:
                tokens.append([raw])
        elif kind == "void":
            tokens.append(Tag("void", raw, k))
        elif kind == "open":
            ids[k] = k
            tokens.append(Tag("open", raw, k))
        else:
            tokens.append(Tag("close", raw, ids[piece[2]]))
    return ["".join(t) if isinstance(t, list) else t for t in tokens]


def _pair_emphasis(pieces: list[list]) -> None:
    """Emphasis runs that can open (a word follows) paired with the next same run that can close (a word before),
    properly nested with the links around them; the others are text."""
    stack: list[int] = []
    for k, piece in enumerate(pieces):
        if piece[0] in ("open", "close"):  # a link's edge: emphasis does not cross it
            for start in stack:
                pieces[start][0] = "text"
            stack.clear()
            continue
        if piece[0] != "emph":
            continue
        before = pieces[k - 1][1][-1:] if k and pieces[k - 1][0] == "text" else ""
        after = pieces[k + 1][1][:1] if k + 1 < len(pieces) and pieces[k + 1][0] == "text" else ""
        can_close = stack and pieces[stack[-1]][1] == piece[1] and before and not before.isspace()
        if can_close and not (piece[1][0] == "_" and after.isalnum()):
            start = stack.pop()
            pieces[start][0] = "open"
            piece[:] = ["close", piece[1], start]
        elif after and not after.isspace() and not (piece[1][0] == "_" and before.isalnum()):
            stack.append(k)
        else:
            piece[0] = "text"
    for k in stack:
        pieces[k][0] = "text"
