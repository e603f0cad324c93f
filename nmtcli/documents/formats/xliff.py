"""XLIFF 1.2 and 2.x (.xliff, .xlf): each untranslated source written into its target, every other byte kept.

The XML is read for its bytes (xmlbytes.py: the standard library's expat, with the byte offset of every tag, and
entities refused as defusedxml refuses them, never resolved), so the file is written back as its own bytes with only
the targets added; a tree library, defusedxml's included, would write its own serialisation of everything.

Which units: XLIFF 1.2's `<trans-unit>` and 2.x's `<segment>` (in a `<unit>`) whose target is missing or empty
and that are not marked `translate="no"`. The target gets the source's translation: its inline codes (1.2's
`<g>`, `<mrk>`; 2.x's `<pc>`, `<mrk>`) are inline elements placed by the word alignment (core.py, as HTML's
inline tags); standalone codes (`<x/>`, `<bx/>`, `<ex/>`, `<ph>`, `<bpt>`, `<ept>`, `<it>`; 2.x's `<ph/>`,
`<sc/>`, `<ec/>`, `<cp/>`) are placed as void elements, each written as its source was. The state says that a
machine wrote it, as each version says it: 1.2's target gets `state="needs-review-translation"` and
`state-qualifier="mt-suggestion"`; 2.x's segment gets `state="translated"` (2.x's states are initial, translated,
reviewed, final: a machine translation is not reviewed).
"""

from __future__ import annotations

import re

from nmtcli.documents.formats.core import Block, Document
from nmtcli.documents.formats.limits import Budget
from nmtcli.documents.formats.xmlbytes import Edit, Element, inline_tokens, parse, spliced, text as _text, xml_text
from nmtcli.errors import NmtError

PAIRED = frozenset(("g", "mrk", "pc"))  # inline codes with translatable content
_STATE_12 = (("state", "needs-review-translation"), ("state-qualifier", "mt-suggestion"))


def read(data: bytes, format: str = "xliff", budget: Budget | None = None) -> Document:
    budget = budget or Budget()
    budget.what = "XLIFF file"
    root, data = parse(data, budget, attributes=frozenset(("version", "translate")))
    if root.name != "xliff":
        raise NmtError(f"the file is not XLIFF: its root element is <{root.name}>", "check that it is the format its extension says", exit_code=2)
    version = root.attrs.get("version", "1.2")
    if not version.startswith(("1.", "2.")):
        raise NmtError(f"XLIFF version {version} is not known", "nmt reads XLIFF 1.2 and 2.x", exit_code=2)
    edits: list[tuple[int, int, Edit]] = []  # (start, end, part) replacing data[start:end]
    blocks: list[Block] = []
    states = _STATE_12 if version[0] == "1" else ()  # 2.x: the state is the segment's
    for unit, source, target, segment in _units(data, root, version):
        block = Block(inline_tokens(data, source, PAIRED), write=xml_text)
        blocks.append(block)

        if target is not None and target.end_end > target.end:  # <target>  </target>: its (blank) content replaced
            tag = _with(_text(data, target.start, target.start_end), states)
            edits.append((target.start, target.end, Edit(block, _text(data, target.start, target.end), lambda t=tag, b=block: t + b.render())))
        elif target is not None:  # <target/>
            tag = _with(_text(data, target.start, target.start_end), states)
            edits.append((target.start, target.end_end, Edit(block, _text(data, target.start, target.end_end),
                                                              lambda t=tag, b=block: f"{t[:-2].rstrip()}>{b.render()}</{_qname(t)}>")))
        else:  # a new target after the source, on a line of its own where the source is
            before = _text(data, unit.start_end, source.start)
            indent = before[len(before.rstrip(" \t\r\n")):] if not before.strip() else ""
            tag = _with("<" + _qname(_text(data, source.start, source.start_end)).replace("source", "target") + ">", states)
            edits.append((source.end_end, source.end_end, Edit(block, "", lambda i=indent, t=tag, b=block: f"{i}{t}{b.render()}</{_qname(t)}>")))
        if segment is not None:
            tag = _text(data, segment.start, segment.start_end)
            edits.append((segment.start, segment.start_end, Edit(block, tag, lambda t=_with(tag, (("state", "translated"),)): t)))
    edits.sort(key=lambda e: (e[0], e[1]))
    return Document(spliced(data, edits), blocks)


def _units(data: bytes, root: Element, version: str):
    """(the unit, its source, its target or None, the segment whose state is set (2.x) or None) of each unit to
    translate: not marked translate="no" (itself or an element around it), its target missing or empty."""
    def walk(root: Element):  # in document order, with a stack of its own: elements nest as deep as the read's limit
        stack = [(root, False)]
        while stack:
            element, skip = stack.pop()
            skip = skip or element.attrs.get("translate") == "no"
            if version[0] == "1" and element.name == "trans-unit":
                yield element, skip, None
            elif version[0] == "2" and element.name == "segment":
                yield element, skip, element
            else:
                stack += [(child, skip) for child in reversed(element.children)]

    for unit, skip, segment in walk(root):
        source = next((c for c in unit.children if c.name == "source"), None)
        target = next((c for c in unit.children if c.name == "target"), None)
        filled = target is not None and (target.children or _text(data, target.start_end, max(target.end, target.start_end)).strip())
        if not skip and source is not None and not filled:
            yield unit, source, target, segment


def _qname(tag: str) -> str:
    return re.match(r"</?([^\s/>]+)", tag)[1]


def _with(tag: str, attributes) -> str:
    """`tag` (a start tag as written) with each (name, value) of `attributes` set: replaced in place, else added."""
    for name, value in attributes:
        found = re.search(rf"(\s{re.escape(name)}\s*=\s*)(\"[^\"]*\"|'[^']*')", tag)
        if found:
            tag = tag[:found.start(2)] + f'"{value}"' + tag[found.end(2):]
        else:
            end = len(tag) - (2 if tag.endswith("/>") else 1)
            tag = tag[:end].rstrip() + f' {name}="{value}"' + tag[end:]
    return tag
