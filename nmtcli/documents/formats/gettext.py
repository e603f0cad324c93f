"""gettext catalogs (.po, .pot): each untranslated message's msgid translated into its msgstr, marked fuzzy.

Read here line by line rather than through polib: polib (the well-kept library) parses a catalog into entries and
writes it whole again, wrapped at its own width and in its own order, so untouched entries could change bytes.
This reader changes only the lines of the messages it translates: their `msgstr` lines (written as msgmerge
writes them: a long or multi-line string as `msgstr ""` and one quoted line per line, wrapped at 79 columns), and
their flags, where `fuzzy` is added (`#, fuzzy`, or `, fuzzy` on the existing `#,` line) so that a translator
reviews the machine's work before gettext uses it. Everything else (the header entry, comments, references,
obsolete `#~` entries, messages already translated, line ends) is kept byte for byte. The tests read the result
with polib.

A message is translated when its msgid is not empty (the header's is) and every msgstr is empty. Plural forms:
msgstr[0] gets the msgid's translation and every other msgstr[N] the msgid_plural's, as many as the entry has or the
header's `Plural-Forms: nplurals=N` says. Placeholders (`%s`, `%(name)d`, `{name}`) are protected spans
(documents/protect.py): the model does not read them and they come back once each. The catalog must be UTF-8
(or ASCII, or a template's `charset=CHARSET`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nmtcli.documents.formats.core import Block, Document, decoded, text_of
from nmtcli.errors import NmtError

_KEYWORD = re.compile(r'^(msgctxt|msgid_plural|msgid|msgstr(?:\[(\d+)\])?)\s*"(.*)"\s*$')
_STRING = re.compile(r'^\s*"(.*)"\s*$')
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", '"': '"', "'": "'", "?": "?"}
_ESCAPE = re.compile(r'\\(x[0-9A-Fa-f]+|[0-7]{1,3}|.)')
_LINE = re.compile(r".*?(?:\r\n|\n|\r|$)", re.S)
WIDTH = 79


def unescape(s: str) -> str:
    def one(m: re.Match) -> str:
        e = m[1]
        if e[0] == "x" and len(e) > 1:
            if int(e[1:], 16) > 0x10FFFF or 0xD800 <= int(e[1:], 16) <= 0xDFFF:  # past Unicode, or half a UTF-16 pair
                raise NmtError(f"the file is not a gettext catalog: \\{e[:12]} is no character", "repair it (msgcat checks a catalog)",
                               exit_code=2)
            return chr(int(e[1:], 16))
        if e[0] in "01234567":
            return chr(int(e, 8))
        return _ESCAPES.get(e, e)

    return _ESCAPE.sub(one, s)


def escape(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t").replace("\r", "\\r")


@dataclass
class Entry:
    """One message: its lines, and where its fields are (field -> [first line, end line), value)."""

    lines: list[str]
    fields: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    blocks: list[Block] = field(default_factory=list)
    plurals: int = 0

    def render(self) -> str:
        if not self.blocks or all(b.translation is None for b in self.blocks):
            return "".join(self.lines)
        newline = "\r\n" if self.lines[0].endswith("\r\n") else "\n"
        singular = text_of(self.blocks[0].translation or self.blocks[0].tokens)
        plural = text_of(self.blocks[1].translation or self.blocks[1].tokens) if len(self.blocks) > 1 else None
        first = min(start for name, (start, _, _) in self.fields.items() if name.startswith("msgstr"))
        end = max(stop for name, (_, stop, _) in self.fields.items() if name.startswith("msgstr"))
        if plural is None:
            written = string_lines("msgstr", singular, newline)
        else:
            written = [line for n in range(self.plurals) for line in string_lines(f"msgstr[{n}]", plural if n else singular, newline)]
        tail = self.lines[end:]
        if tail == [] and not self.lines[end - 1].endswith(("\n", "\r")):  # the file's last line had no line end
            written[-1] = written[-1].rstrip("\r\n")
        return "".join(self._flagged(self.lines[:first], newline) + written + tail)

    def _flagged(self, head: list[str], newline: str) -> list[str]:
        """The lines before the msgstr with `fuzzy` among the flags."""
        for k, line in enumerate(head):
            if line.startswith("#,"):
                if "fuzzy" in [f.strip() for f in line[2:].split(",")]:
                    return head
                body = line.rstrip("\r\n")
                return head[:k] + [body + ", fuzzy" + line[len(body):]] + head[k + 1:]
        at = next(k for k, line in enumerate(head) if not line.startswith("#") or line.startswith("#|"))
        return head[:at] + ["#, fuzzy" + newline] + head[at:]


def string_lines(keyword: str, value: str, newline: str) -> list[str]:
    """`keyword "value"` as msgmerge writes it: on one line if it fits and holds no inner line break, else
    `keyword ""` and the value's lines, each cut after a space to fit WIDTH columns."""
    if len(keyword) + len(escape(value)) + 3 <= WIDTH and "\n" not in value[:-1]:
        return [f'{keyword} "{escape(value)}"{newline}']
    out = [f'{keyword} ""{newline}']
    for line in re.findall(r"[^\n]*\n|[^\n]+$", value):
        piece = ""
        for word in re.findall(r"[^ ]+ *| +", escape(line)):
            if piece and len(piece) + len(word) + 2 > WIDTH:
                out.append(f'"{piece}"{newline}')
                piece = ""
            piece += word
        if piece:
            out.append(f'"{piece}"{newline}')
    return out


def read(data: bytes, format: str = "po", budget=None) -> Document:
    text = decoded(data, "gettext catalog")
    lines = [line for line in _LINE.findall(text) if line]
    parts: list = []
    entries: list[Entry] = []
    current: list[str] = []
    for line in lines + [""]:
        if line.strip() and line:
            current.append(line)
            continue
        if current:
            entries.append(_entry(current, len(parts)))
            parts.append(entries[-1])
            current = []
        if line:
            parts.append(line)
    if not any("msgid" in e.fields for e in entries):
        raise NmtError("the file is not a gettext catalog: it holds no msgid", "check that it is the format its extension says", exit_code=2)
    header = next((e for e in entries if e.fields.get("msgid", (0, 0, None))[2] == ""), None)
    nplurals = None
    if header is not None:
        value = header.fields.get("msgstr", (0, 0, ""))[2]
        charset = re.search(r"charset=([\w.-]+)", value)
        if charset and charset[1].lower().replace("-", "") not in ("utf8", "ascii", "usascii", "charset"):
            raise NmtError(f"the catalog's charset is {charset[1]}: nmt reads and writes UTF-8",
                           "convert it first (msgconv --to-code=UTF-8)", exit_code=2)
        found = re.search(r"nplurals\s*=\s*(\d+)", value)
        nplurals = int(found[1]) if found else None
    blocks = []
    for entry in entries:
        values = entry.fields
        if not values.get("msgid", (0, 0, ""))[2] or any(v[2] for k, v in values.items() if k.startswith("msgstr")):
            continue
        if not any(k.startswith("msgstr") for k in values):
            continue
        entry.blocks = [Block([values["msgid"][2]])]
        if "msgid_plural" in values:
            entry.plurals = max(nplurals or 0, sum(1 for k in values if k.startswith("msgstr[")), 2)
            entry.blocks.append(Block([values["msgid_plural"][2]]))
        blocks += entry.blocks
    return Document(parts, blocks)


def _entry(lines: list[str], number: int) -> Entry:
    entry = Entry(lines)
    name = None
    pieces: dict[str, list[str]] = {}  # each field's strings, joined at the end (a string grown a line at a time is quadratic)
    for k, line in enumerate(lines):
        body = line.rstrip("\r\n")
        if body.startswith("#"):
            name = None
            continue
        keyword, string = _KEYWORD.match(body), _STRING.match(body)
        if keyword:
            name = keyword[1]
            entry.fields[name], pieces[name] = (k, k + 1, ""), [unescape(keyword[3])]
        elif string and name is not None:
            entry.fields[name] = (entry.fields[name][0], k + 1, "")
            pieces[name].append(unescape(string[1]))
        else:
            raise NmtError(f"the file is not a gettext catalog: {body[:60]!r} is neither a comment, a keyword nor a string",
                           "check that it is the format its extension says, or repair it (msgcat checks a catalog)", exit_code=2)
    for name, (start, end, _) in entry.fields.items():
        entry.fields[name] = (start, end, "".join(pieces[name]))
    return entry
