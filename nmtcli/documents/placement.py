"""Where a sentence's inline tags go in its translation (documents/markup.py renders through here).

Where the inline tags go: around the translation of the words they wrapped, by the model's word
alignment with every source word linked (inference/alignment.py's COVERING: the piece pairs both directions
of the attention agree on, the target piece attending to the source piece most and the source piece attended
to by it most, and each source word they leave out linked to the target word that attends to it most). An
element that wrapped words wraps at least one wherever one can be given it (below): not an empty `<a href>`
where the reader's link text was.
An element wraps the target words linked to any word it covers (a word partly inside counts), from
the first to the last of them: when they are not contiguous the words between are wrapped too, since
a tag cannot be copied without copying its id and link. Punctuation the element left outside in the source
stays outside where the target word has it too (`<a>the link</a>.`, `"<b>word</b>"`). An element whose words
are still linked to no target word (no alignment, links past the words) wraps the target word at their place
by position (the diagonal: the middle of its words scaled to the translation's length). An element that wraps
no text and a void element inside text (`<img>`, a comment) sit where the nearest source word before them
went (after its last target word; none before: before the first target word of the nearest word after).
Nested elements stay nested: a child is clipped to its parent's words, and siblings whose words overlap
in the translation are made to follow each other in the order of their first words (the later one gives
up the shared words; one left with no word takes the word no sibling wraps nearest to its place, else the
nearest end word of a sibling that wraps more than one: its first word only where its start tag is in the
sentence, its last only where its end tag is, and one that opened in an earlier sentence takes only a word before
its siblings', one that closes in a later one only a word after theirs, so that no tags cross; never a word a kept
element's source stands for. It stays empty only where its parent, or the sentence, has fewer words than such
elements, or where every word it could take belongs to a kept element or would make tags cross a sentence's
edge). An element that starts in one sentence and ends in another opens at its first word's translation
and runs to the sentence's end, and from the next one's start to its last word's. Inline tags that cross
each other (`<b><i>x</b></i>`) or nest deeper than MAX_INLINE_DEPTH make that block fall back to
translating each run of text between tags on its own, every tag staying where it was.
"""

from __future__ import annotations

import bisect
import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nmtcli.documents.html_tokens import ALNUM


# --- a block's text with its inline elements ---------------------------------------------------------


@dataclass(eq=False)
class Node:
    """An inline element (or a void element, comment or kept element) in a block's text T: it covers T[p:q]."""

    kind: str  # "wrap" (open and close tags around translated words), "verbatim" (its source replaces its words), "atom"
    p: int
    q: int
    open: str = ""  # the source of its start tag ("" when it opened before this block); verbatim and atoms: their whole source
    close: str = ""  # the source of its end tag ("" when it closes after this block)
    parent: Node | None = None
    name: str = ""
    spaces: tuple[bool, bool] = (False, False)  # an atom: whether the source has whitespace before it, after it
    edges: tuple[str, str] = ("", "")  # punctuation of its first and last word outside it ('"<b>word</b>."': '"', '.')
    protects: str = ""  # a protected span (documents/protect.py): its text, which the model's own words may not hold


@dataclass
class Sentence:
    text: str  # what the model reads: the words joined by single spaces
    words: list[tuple[int, int]]  # each source word's [start, end) in the block's text
    nodes: list[Node]  # the nodes with a tag inside this sentence
    opens: set[int]  # ids of nodes whose start tag is inside it
    closes: set[int]


# --- a sentence's translation with its tags ----------------------------------------------------------


def _links(alignment: str | None, sources: int, targets: int) -> dict[int, list[int]]:
    """Source word -> its linked target words, from Pharaoh "i-j ..." (links outside the words left out)."""
    linked: dict[int, list[int]] = {}
    for link in (alignment or "").split():
        i, _, j = link.partition("-")
        if i.isdigit() and j.isdigit() and int(i) < sources and int(j) < targets:
            linked.setdefault(int(i), []).append(int(j))
    return linked


def _escape(text: str) -> str:
    return html.escape(text, quote=False)


def render_sentence(sentence: Sentence, translation: str, alignment: str | None, escape: Callable[[str], str] = _escape) -> str:
    """The translation (escaped) with the sentence's tags placed around the target words their words are
    linked to (module docstring); with no alignment, by the diagonal. The text of a protected span is taken out
    of the model's own words first (`without`), so that the span, placed as an atom, is there exactly once.
    `escape`: how the model's words are written (plain text: as they are)."""
    protected = [node.protects for node in sentence.nodes if node.protects]
    if protected:
        translation, alignment = without(translation, alignment, protected)
    words = translation.split()
    n = len(words)
    if not sentence.nodes:
        return escape(" ".join(words))
    linked = _links(alignment, len(sentence.words), n)
    if alignment is None and n:  # no attention to read (nothing in nmt does this): the diagonal
        linked = {}
        for j in range(n):
            linked.setdefault(min(len(sentence.words) - 1, j * len(sentence.words) // n), []).append(j)
    span, children = _place(sentence, n, linked)
    return _spaced(_punctuation_outside(_events(sentence, words, span, children, escape)))


def _place(sentence: Sentence, n: int, linked: dict[int, list[int]]) -> tuple[dict[int, tuple[int, int]], dict[int | None, list[Node]]]:
    """Each node's [lo, hi) over the n target words (lo == hi: it wraps none and stands before word lo), and
    each node's children (None: the sentence's top level) in the order they are written."""
    in_sentence = {id(node) for node in sentence.nodes}

    starts = [a for a, _ in sentence.words]
    ends = [b for _, b in sentence.words]
    # after[k]: where a node goes after the first k words (after the last target word of the nearest linked word
    # among them); from[k]: before the first target word of the nearest linked word from word k on (None: none).
    after: list[int | None] = [None]
    for i in range(len(starts)):
        after.append(max(linked[i]) + 1 if linked.get(i) else after[-1])
    from_: list[int | None] = [None]
    for i in reversed(range(len(starts))):
        from_.append(min(linked[i]) if linked.get(i) else from_[-1])
    from_.reverse()

    def covered(node: Node) -> range:  # the source words it covers: a < q and b > p
        return range(bisect.bisect_right(ends, node.p), bisect.bisect_left(starts, node.q))

    def targets(node: Node) -> list[int]:
        return [j for i in covered(node) for j in linked.get(i, ())]

    # wants[node]: for an element around words, the target word at their place by position (the diagonal), near which
    # it takes a word if it is left with none (its words linked to nothing, or its siblings took all of its own)
    wants: dict[int, int] = {}
    for node in sentence.nodes:
        words = covered(node)
        if node.kind == "wrap" and words and n:
            wants[id(node)] = min(n - 1, (words.start + words.stop) * n // (2 * len(starts)))

    def anchor(position: int) -> int:
        k = bisect.bisect_left(starts, position)  # the words that start before it
        return after[k] if after[k] is not None else from_[k] if from_[k] is not None else 0

    span: dict[int, tuple[int, int]] = {}
    for node in sentence.nodes:
        opens, closes = id(node) in sentence.opens, id(node) in sentence.closes
        found = targets(node) if node.kind != "atom" else []
        if node.kind == "atom" or (not found and opens and closes):
            at = anchor(node.p)
            span[id(node)] = (at, at)
        else:
            lo = min(found) if opens and found else 0 if not opens else anchor(node.p)
            hi = max(found) + 1 if closes and found else n if not closes else anchor(node.q)
            span[id(node)] = (lo, max(lo, hi))

    def parent(node: Node) -> Node | None:
        up = node.parent
        while up is not None and id(up) not in in_sentence:
            up = up.parent
        return up

    children: dict[int | None, list[Node]] = {}
    for node in sentence.nodes:  # in source order: parents before their children
        up = parent(node)
        children.setdefault(None if up is None else id(up), []).append(node)

    def kept(kids: list[Node]) -> set[int]:  # the target words a kept element among them (or inside one) stands for
        words: set[int] = set()
        for kid in kids:
            lo, hi = span[id(kid)]
            inside = [kid]
            while inside:
                node = inside.pop()
                if node.kind == "verbatim":
                    a, b = span[id(node)]
                    words.update(range(max(a, lo), min(b, hi)))
                inside.extend(children.get(id(node), ()))
        return words

    def order(node: Node) -> tuple[int, bool]:  # siblings by their first word, one that wraps none first
        lo, hi = span[id(node)]
        return lo, hi > lo

    # Top-down: clip children to their parent, make siblings follow each other, and give words to those left with none.
    todo: list[tuple[int | None, int, int]] = [(None, 0, n)]
    while todo:
        key, low, high = todo.pop()
        kids = children.get(key, [])
        for node in kids:
            lo, hi = span[id(node)]
            lo, hi = min(max(lo, low), high), min(max(hi, low), high)
            span[id(node)] = (lo, hi)
        kids.sort(key=order)
        cursor = low
        for node in kids:
            lo, hi = span[id(node)]
            if lo < cursor:
                lo, hi = cursor, max(hi, cursor)
            span[id(node)] = (lo, hi)
            cursor = max(cursor, hi)
        if high > low and any(id(node) in wants and span[id(node)][0] == span[id(node)][1] for node in kids):
            _give_words(sentence, kids, span, wants, low, high, kept(kids))
            kids.sort(key=order)
        todo.extend((id(node), *span[id(node)]) for node in kids)
    return span, children


def _give_words(sentence: Sentence, kids: list[Node], span: dict[int, tuple[int, int]], wants: dict[int, int],
                low: int, high: int, kept: set[int]) -> None:
    """Siblings laid out in [low, high) (spans that do not overlap): each one in `wants` that wraps no word takes the
    word no sibling wraps nearest to its wanted one, else the nearest end word of an element among them that wraps more
    than one: its first word if its start tag is in this sentence, its last if its end tag is (a tag in another sentence
    cannot move). An element whose start tag is in an earlier sentence takes only a word before every
    sibling's words, one whose end tag is in a later sentence only a word after them: their tags would cross. A word a
    kept element (`<code>`) stands for is never taken: its source is written in place of it. Where no word is left
    to take, the element stays empty."""
    taken = {x for node in kids for x in range(*span[id(node)])} | kept
    free = [x for x in range(low, high) if x not in taken]
    wide = [node for node in kids if node.kind == "wrap" and span[id(node)][1] - span[id(node)][0] > 1]
    for node in kids:
        lo, hi = span[id(node)]
        if lo < hi or id(node) not in wants:
            continue
        want = min(max(wants[id(node)], low), high - 1)
        # the words it may take: [first, last]. A free word is in no sibling's span, and a sibling whose end word it takes
        # keeps its other words after (before) it: `last` may be a sibling's first word, `first` a sibling's last.
        first, last = low, high - 1
        if id(node) not in sentence.opens or id(node) not in sentence.closes:
            spans = [span[id(other)] for other in kids if other is not node and span[id(other)][0] < span[id(other)][1]]
            if id(node) not in sentence.opens:
                last = min((a for a, _ in spans), default=last)
            if id(node) not in sentence.closes:
                first = max((b - 1 for _, b in spans), default=first)
        i, j = bisect.bisect_left(free, first), bisect.bisect_right(free, last)
        ends = [] if i < j else [
            (abs(x - want), x, other) for other in wide
            for x, tag_here in ((span[id(other)][0], id(other) in sentence.opens), (span[id(other)][1] - 1, id(other) in sentence.closes))
            if tag_here and first <= x <= last and x not in kept]
        if i < j:
            k = bisect.bisect_left(free, want, i, j)
            x = min(free[max(k - 1, i):min(k + 1, j)], key=lambda x: (abs(x - want), x))
            free.remove(x)
        elif ends:
            _, x, other = min(ends, key=lambda end: end[:2])
            a, b = span[id(other)]
            span[id(other)] = (a + 1, b) if x == a else (a, b - 1)
            if b - a == 2:
                wide.remove(other)
        else:
            continue
        span[id(node)] = (x, x + 1)


def _standalone(text: str) -> re.Pattern:
    """Where the model's words hold a span's `text`: anywhere, but a span that is one word (`--protect Excel`) only as a
    word of its own, never out of a longer one (`Excellent`). A span with other characters (a URL, a placeholder) the
    model may glue to its words, and it is cut out of them too, so that it is in the output exactly once."""
    return re.compile(rf"(?<!\w){re.escape(text)}(?!\w)" if re.fullmatch(r"\w+", text) else re.escape(text))


def without(translation: str, alignment: str | None, texts: Sequence[str]) -> tuple[str, str | None]:
    """The translation's words with every occurrence of `texts` (protected spans, which are put back on their own; a span
    of one word only where it is not part of a longer one) cut out of them, words left empty dropped, and the Pharaoh
    alignment's target words numbered again."""
    words = translation.split()
    patterns = {t: _standalone(t) for t in texts if t.strip()}
    if not any(p.search(" ".join(words)) for p in patterns.values()):
        return " ".join(words), alignment
    while True:  # the first occurrence at a time: a cut can join the two sides into another one
        live = [i for i, w in enumerate(words) if w]
        joined = " ".join(words[i] for i in live)
        hits = [(m.start(), t) for t, p in patterns.items() for m in [p.search(joined)] if m]
        if not hits:
            break
        at, text = min(hits)
        removed, position = 0, 0
        for i in live:
            word = words[i]
            a, b = max(at, position) - position, min(at + len(text), position + len(word)) - position
            if a < b:
                words[i] = word[:a] + word[b:]
                removed += b - a
            position += len(word) + 1
        if not removed:  # only the spaces between words: nothing of the model's to cut
            break
    renumbered, kept = {}, []
    for j, word in enumerate(words):
        if word:
            renumbered[j] = len(kept)
            kept.append(word)
    if alignment is not None:
        links = (link.partition("-") for link in alignment.split())
        alignment = " ".join(f"{i}-{renumbered[int(j)]}" for i, _, j in links if j.isdigit() and int(j) in renumbered)
    return " ".join(kept), alignment


def _events(sentence: Sentence, words: list[str], span: dict[int, tuple[int, int]],
            children: dict[int | None, list[Node]], escape: Callable[[str], str] = _escape) -> list[tuple[str, object, object]]:
    """The sentence written out as (kind, text or node, node id or ids) events: word, open, close, atom, and
    the head and tail punctuation cut off a word to stand outside the tags around it."""
    n = len(words)
    heads: dict[int, tuple[str, set[int]]] = {}  # target word -> punctuation to cut off its start, for these nodes
    tails: dict[int, tuple[str, set[int]]] = {}
    for node in sentence.nodes:
        a, b = span[id(node)]
        head, tail = node.edges
        if head and a < b and (node.kind == "verbatim" or id(node) in sentence.opens):
            _cut(heads, a, head, id(node), words, str.startswith)
        if tail and a < b and (node.kind == "verbatim" or id(node) in sentence.closes):
            _cut(tails, b - 1, tail, id(node), words, str.endswith)

    events: list[tuple[str, object, object]] = []  # (kind, text or node, node id or ids): word, open, close, atom, head, tail
    stack: list[tuple[int | None, int, int, int]] = [(None, 0, n, 0)]  # (node id, lo, hi, next child)
    position = [0]

    def word(x: int) -> None:
        text, head, tail = words[x], heads.get(x), tails.get(x)
        if head:
            text = text[len(head[0]):]
            events.append(("head", escape(head[0]), head[1]))
        core = text[:len(text) - len(tail[0])] if tail else text
        events.append(("word", escape(core), None))
        if tail:
            events.append(("tail", escape(tail[0]), tail[1]))

    def words_until(end: int) -> None:
        while position[0] < end:
            word(position[0])
            position[0] += 1

    by_id = {id(node): node for node in sentence.nodes}
    pieces = sentence.text.split(" ")
    ending = {b: i for i, (_, b) in enumerate(sentence.words)}
    starting = {a: i for i, (a, _) in enumerate(sentence.words)}

    def stuck(i: int | None, x: int) -> bool:
        """Source word i is stuck to a kept element (no space between) and target word x is that word as it was."""
        return i is not None and 0 <= x < n and words[x] == pieces[i]

    while stack:
        key, lo, hi, k = stack.pop()
        kids = children.get(key, [])
        if k < len(kids):
            stack.append((key, lo, hi, k + 1))
            node = kids[k]
            a, b = span[id(node)]
            words_until(a)
            if node.kind == "atom":
                events.append(("atom", node, None))
            elif node.kind == "verbatim":  # its source in place of its words (but the punctuation around it)
                position[0] = max(position[0], b)
                if a in heads and id(node) in heads[a][1]:
                    events.append(("head", escape(heads[a][0]), set()))
                if stuck(ending.get(node.p), a - 1):  # "+<kbd>C</kbd>": as stuck in the translation
                    events.append(("glue", "", None))
                events.append(("word", node.open, None))
                if b - 1 in tails and id(node) in tails[b - 1][1]:
                    events.append(("tail", escape(tails[b - 1][0]), set()))
                if stuck(starting.get(node.q), b):
                    events.append(("glue", "", None))
            else:
                if id(node) in sentence.opens:
                    events.append(("open", node.open, id(node)))
                stack.append((id(node), a, b, 0))
            continue
        words_until(hi)
        if key is not None and key in sentence.closes:
            events.append(("close", by_id[key].close, key))
    return events


def _cut(cuts: dict[int, tuple[str, set[int]]], x: int, edge: str, node: int, words: list[str], has) -> None:
    """Word x's `edge` (its leading or trailing punctuation) is to go outside `node`'s tags, where the word has it."""
    if x in cuts and cuts[x][0] == edge:
        cuts[x][1].add(node)
    elif x not in cuts and has(words[x], edge) and len(words[x]) > len(edge):
        cuts[x] = (edge, {node})


def _punctuation_outside(events: list[tuple[str, object, object]]) -> list[tuple[str, object, object]]:
    """A word's trailing punctuation after the end tags of the elements it was outside of in the source, its
    leading punctuation before their start tags."""
    for i in range(len(events)):
        if events[i][0] == "tail":
            j = i
            while j + 1 < len(events) and events[j + 1][0] == "close" and events[j + 1][2] in events[j][2]:
                events[j], events[j + 1] = events[j + 1], events[j]
                j += 1
    for i in range(len(events) - 1, -1, -1):
        if events[i][0] == "head":
            j = i
            while j > 0 and events[j - 1][0] == "open" and events[j - 1][2] in events[j][2]:
                events[j], events[j - 1] = events[j - 1], events[j]
                j -= 1
    return events


def _spaced(events: list[tuple[str, object, object]]) -> str:
    """The events as text: one space between words, before the start tags (and punctuation) in front of a word;
    void elements and comments between two words keep the source's whitespace on each side of them."""
    out: list[tuple[str, object]] = []
    seen_word = glued = False
    for kind, value, _ in events:
        if kind == "glue":  # no space before the next word
            glued = True
            continue
        if kind == "word":
            if seen_word and not glued:
                at = len(out)
                while at > 0 and out[at - 1][0] in ("open", "head"):
                    at -= 1
                first = at
                while first > 0 and out[first - 1][0] in ("atom", "atom space"):
                    first -= 1
                before, after = (out[first][1].spaces[0], out[at - 1][1].spaces[1]) if first < at else (False, True)
                if first < at and out[at - 1][1].protects and ALNUM.match(value):  # glued to punctuation only, as in the source
                    after = True
                if after or not before:
                    out.insert(at, ("space", " "))
                if before:
                    out.insert(first, ("space", " "))
            seen_word, glued = True, False
        if kind == "atom" and out and out[-1][0] == "atom" and out[-1][1].p != value.p:  # apart in the source
            out.append(("atom space", " "))
        out.append((kind, value))
    last = max((k for k, (kind, _) in enumerate(out) if kind == "word"), default=None)
    if last is not None:  # atoms after the last word (placed there by the alignment): the first keeps its space before
        for k in range(last + 1, len(out)):
            if out[k][0] == "atom":
                if out[k][1].spaces[0]:
                    out.insert(k, ("space", " "))
                break
    return "".join(value.open if kind == "atom" else value for kind, value in out)
