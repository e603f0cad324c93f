"""Glossary terms put into translations: each occurrence of a source term gets its target term where the model
translated it (docs/translating.md, "Glossaries").

The line is searched as without a glossary. A teacher-forced pass over each translation gives the encoder-decoder
attention, from which every target word gets the one source word it translates: the attention of its pieces
(averaged) on each source word's pieces (summed), each source word's column divided by its sum, as
alignment.piece_links divides pieces' (a source word every target word attends to counts less), and the largest
kept. The target words whose source word lies in an occurrence of a source term are that occurrence's translation:
the contiguous run of them that draws the most of its attention is replaced by the target term, punctuation around
it kept. An occurrence no target word translates (the model left the word out) gets the term where its neighbours'
translations meet: after the earlier of the target words of the source words on either side of it.

Why not lexically constrained search (Post & Vilar 2018), which nmt used before: the constraint says *that* the term
is in the output, not *where*, nor that the source word is then translated: a term the model would not write
itself was forced where it cost least (first, mostly), its last piece continued into a longer word, and the covered
word translated as well (benchmarks/glossary.py; issue 49's tables in docs/translating.md). Placing by alignment
keeps every other word of the model's translation, puts the term where the source word's translation was, and costs
two teacher-forced passes over the lines with terms (the second scores the result: a translation's score,
log-probability, confidence and alignment are the model's for the words written).

Alternatives of a target term (`Haus|Hauses`): the one ending most like the words it replaces (the model's own
inflection there), the first on a tie. A term written in lower case that starts its line with a capital
(`House is ...`) starts the translation with one where it replaces a capitalised first word. Units are
whitespace-separated words, but in scripts written without spaces (Chinese, Japanese, Thai, ...) each sentencepiece
piece, so a term replaces a piece there, not a whole sentence.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from nmtcli.inference.alignment import DEFAULT_HEADS, word_matrix
from nmtcli.inference.coverage import coverage_penalty
from nmtcli.inference.forced import AttentionHeads, Forced, search_score
from nmtcli.inference.glossary import MAX_TERMS_PER_LINE, UNSPACED, Occurrence
from nmtcli.inference.outputs import Hypothesis

if TYPE_CHECKING:
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.tokenizer import Tokenizer
    from nmtcli.model.transformer import Transformer

Span = tuple[int, int]


class TermTranslator(Protocol):
    """What put_terms uses of the translator that calls it, inference/translator.py's Translator (which imports this
    module): its tokenizer, model, warnings, the target tag of a multilingual model, its decoding and forced pass."""

    tokenizer: Tokenizer
    model: Transformer
    warn: Callable[[str], None]
    _tags: tuple[int, int] | None

    def decoded(self, hyp: Hypothesis) -> str: ...

    def forced(self, sources: Sequence[list[int]], targets: Sequence[list[int]], heads: AttentionHeads | None = None,
               log_probs: bool = True) -> list[Forced]: ...


def units_of(text: str, spans: Sequence[Span], cuts: Sequence[Span] = ()) -> list[int]:
    """The unit (word, or a piece of a script without spaces) each piece of `text` belongs to, from the pieces'
    character spans. A piece whose span holds nothing but whitespace (a lone "▁", the leading bytes of a character
    spelled in bytes) belongs to the unit of the piece after it (of the one before, at the end). `cuts`: spans that
    are units of their own within a word (a line's term occurrences: `file` and `folder` in `file/folder`)."""
    edges = {x for span in cuts for x in span}
    unit: list[int | None] = [None] * len(spans)
    last_end, count, glued = None, -1, False
    for k, (a, b) in enumerate(spans):
        content = text[a:b]
        if not content.strip():
            continue
        lo = a + len(content) - len(content.lstrip())  # a piece's span may start with the space before its word ("▁city")
        now_glued = bool(UNSPACED.match(text[lo]))
        if last_end is None or any(c.isspace() for c in text[last_end:lo]) or glued or now_glued or \
                any(last_end <= x <= lo for x in edges):
            count += 1
        unit[k] = count
        last_end, glued = b, bool(UNSPACED.match(content.rstrip()[-1]))
    following = None
    for k in reversed(range(len(unit))):
        if unit[k] is None:
            unit[k] = following
        following = unit[k]
    previous = 0
    for k in range(len(unit)):
        if unit[k] is None:
            unit[k] = previous
        previous = unit[k]
    return unit


def unit_spans(spans: Sequence[Span], units: Sequence[int], text: str) -> list[Span]:
    """Each unit's [start, end) in `text`: from its first character to its last, whitespace at its ends left out."""
    out: dict[int, list[int]] = {}
    for (a, b), u in zip(spans, units):
        if text[a:b].strip():
            lo = a + len(text[a:b]) - len(text[a:b].lstrip())
            hi = b - (len(text[a:b]) - len(text[a:b].rstrip()))
            if u in out:
                out[u] = [min(out[u][0], lo), max(out[u][1], hi)]
            else:
                out[u] = [lo, hi]
    return [tuple(out[u]) if u in out else (0, 0) for u in range(max(units, default=-1) + 1)]


def word_links(attention: Tensor, source_units: Sequence[int], target_units: Sequence[int]) -> tuple[list[int], Tensor]:
    """Each target unit's source unit (module docstring), and the (target units, source units) matrix it is read from,
    each column divided by its sum. `attention`: (target pieces, source pieces), rows and columns of EOS left out."""
    matrix = word_matrix(attention[: len(target_units), : len(source_units)], source_units, target_units)
    matrix = matrix / matrix.sum(0, keepdim=True).clamp_min(1e-30)
    return matrix.argmax(1).tolist(), matrix


@dataclass(frozen=True)
class Placement:
    """Where one occurrence's target term goes: it replaces target units [lo, hi) (lo == hi: it stands before unit lo)."""

    lo: int
    hi: int
    occurrence: Occurrence


def placements(occurrences: Sequence[Occurrence], source_spans: Sequence[Span], source_units: Sequence[int],
               links: Sequence[int], matrix: Tensor, fixed: int = 0) -> list[Placement]:
    """Each occurrence's place among the target units (module docstring), in target order. `fixed`: the target units
    before it may not change (a prefix the user gave)."""
    units = max(source_units, default=-1) + 1
    targets: list[list[int]] = [[] for _ in range(units)]
    for t, s in enumerate(links):
        if t >= fixed:
            targets[s].append(t)
    out = []
    for occurrence in occurrences:
        covered = sorted({u for (a, b), u in zip(source_spans, source_units) if a < occurrence.end and b > occurrence.start
                          or a == b and occurrence.start <= a < occurrence.end})
        aligned = sorted(t for u in covered for t in targets[u])
        if aligned:
            runs: list[list[int]] = [[aligned[0]]]
            for t in aligned[1:]:
                if t == runs[-1][-1] + 1:
                    runs[-1].append(t)
                else:
                    runs.append([t])
            mass = [float(matrix[run][:, covered].sum()) for run in runs]
            best = runs[max(range(len(runs)), key=mass.__getitem__)]
            out.append(Placement(best[0], best[-1] + 1, occurrence))
            continue
        before = next((targets[u] for u in reversed(range(min(covered, default=0))) if targets[u]), None)
        after = next((targets[u] for u in range(max(covered, default=units - 1) + 1, units) if targets[u]), None)
        if before and after:
            at = min(max(before), max(after)) + 1
        elif before:
            at = max(before) + 1
        elif after:
            at = min(after)
        else:
            at = len(links)
        at = max(at, fixed)
        out.append(Placement(at, at, occurrence))
    out.sort(key=lambda p: (p.lo, p.hi, p.occurrence.start))
    kept, end = [], -1  # two occurrences never share a unit (each unit has one source unit); insertions at one place stay in source order
    for p in out:
        if p.lo >= end or p.lo == p.hi:
            kept.append(p)
            end = max(end, p.hi)
    return kept


def instances(text: str, targets: Sequence[str]) -> list[Span]:
    """Where `text` already holds one of a term's `targets`: as written, as whole words; or, for a one-word target, in
    any case as the last part of a longer word or one between hyphens (the head of a compound: `Seite` in
    `Unterseite`, `Startseite-Vorlage`)."""
    found = []
    for target in targets:
        found += [m.span() for m in re.finditer(rf"(?<!\w){re.escape(target)}(?!\w)", text)]
        if " " not in target.strip():
            found += [m.span() for m in re.finditer(rf"(?<=[\w-]){re.escape(target)}(?!\w)", text, re.IGNORECASE)]
    return sorted(set(found))


def unneeded(text: str, units: Sequence[Span], chosen: Sequence[Placement]) -> set[int]:
    """The placements (by index) whose term the translation holds already: in the words they would replace, or,
    for as many occurrences of the term as are otherwise left without it, elsewhere outside every placement's words
    (the model wrote the term, and the alignment did not link it to the occurrence)."""
    runs = [(units[p.lo][0], units[p.hi - 1][1]) if p.lo < p.hi else None for p in chosen]
    done: set[int] = set()
    by_term: dict[object, list[int]] = {}
    for k, p in enumerate(chosen):
        by_term.setdefault(p.occurrence.term, []).append(k)
    for term, ks in by_term.items():
        held = instances(text, term.targets)
        free = [(a, b) for a, b in held if not any(r and r[0] <= a and b <= r[1] for r in runs)]
        # another term put in may hold this one (`Seite` in `Beispiel-Root-Seite`)
        free += [span for k, p in enumerate(chosen) if runs[k] and p.occurrence.term is not term
                 for span in instances(p.occurrence.term.targets[0], term.targets)]
        waiting = []
        for k in ks:
            if runs[k] and any(runs[k][0] <= a and b <= runs[k][1] for a, b in held):
                done.add(k)
            else:
                waiting.append(k)
        done.update(waiting[: len(free)])
    return done


def choose(targets: Sequence[str], replaced: str) -> str:
    """The alternative of a target term that ends most like the words it replaces (their inflection), the first on a tie."""
    ending = replaced.casefold()

    def shared(alternative: str) -> int:
        folded, n = alternative.casefold(), 0
        while n < min(len(folded), len(ending)) and folded[-1 - n] == ending[-1 - n]:
            n += 1
        return n

    return max(targets, key=lambda alternative: (shared(alternative), -targets.index(alternative)))


def _core(text: str) -> tuple[int, int]:
    """[start, end) of `text` without the punctuation around it (which stays around the term that replaces it)."""
    a, b = 0, len(text)
    while a < b and not (text[a].isalnum() or UNSPACED.match(text[a])):
        a += 1
    while b > a and not (text[b - 1].isalnum() or UNSPACED.match(text[b - 1])):
        b -= 1
    return (a, b) if a < b else (0, len(text))


def capitalised(occurrence: Occurrence, source: str) -> bool:
    """Whether an occurrence of a term written in lower case starts its line with a capital (the sentence's start):
    its target term then starts the translation with one too, where the model's first word has one."""
    term = occurrence.term.source
    return (term[:1].islower() and source[occurrence.start:occurrence.start + 1].isupper()
            and not source[:occurrence.start].strip())


def rewrite(text: str, units: Sequence[Span], chosen: Sequence[Placement], source: str = "") -> str:
    """`text` with each placement's target term put in: its units' text replaced (the punctuation around them kept), or
    the term inserted before unit `lo` (at the end, after the last). `source`: the line translated (a term starting it
    with a capital starts the translation with one)."""
    out, at = [], 0
    for p in chosen:
        targets = p.occurrence.term.targets
        if p.lo < p.hi:
            a, b = units[p.lo][0], units[p.hi - 1][1]
            ca, cb = _core(text[a:b])
            a, b = a + ca, a + cb
            term = choose(targets, text[a:b])
            if capitalised(p.occurrence, source) and a == len(text) - len(text.lstrip()) and text[a:a + 1].isupper() and term == term.lower():
                term = term[:1].upper() + term[1:]
            out.append(text[at:a])
            out.append(term)
            at = b
            continue
        term = targets[0]
        if p.lo < len(units):
            a = units[p.lo][0]
            out.append(text[at:a])
            out.append(term + ("" if _glued(term[-1:], text[a:a + 1]) else " "))
        else:
            a = len(text.rstrip())
            out.append(text[at:a])
            written = "".join(out)
            out.append(("" if not written.strip() or _glued(written[-1:], term[:1]) else " ") + term)
        at = a
    out.append(text[at:])
    return "".join(out)


def _glued(left: str, right: str) -> bool:
    """Whether two characters meet without a space: either is of a script written without spaces."""
    return bool(UNSPACED.match(left) or UNSPACED.match(right))


@dataclass
class _Line:
    """A translation whose line holds terms, on its way through put_terms."""

    index: int  # the line's place in the window
    line: str
    hyp: Hypothesis
    occurrences: list[Occurrence]
    source_spans: list[Span]
    fixed: int  # characters of the translation a prefix fixed
    text: str = ""
    ids: list[int] | None = None


def put_terms(translator: TermTranslator, window: Sequence[tuple[int, str]], sentences: Sequence[list[int]],
              results: list[list[Hypothesis]], settings: SearchSettings, prefixes: Sequence[str] | None,
              attention: dict[int, Tensor]) -> None:
    """In place: every hypothesis of a line of `window` holding terms of `settings.glossary` with the terms put in (module
    docstring), its tokens, score and log-probability the model's for the new text (its attention in `attention`, by
    id, for the alignments), each line's list sorted again and without repeats. `sentences`: the ids the model read (a
    multilingual model's with its tag); `prefixes`: the target prefixes given, or None."""
    tag = [translator._tags[1]] if translator._tags else []  # a multilingual model's target tag: first of every output
    lines = []
    for i, ((number, line), hyps) in enumerate(zip(window, results)):
        found = _occurrences(translator, number, line, settings) if hyps else []
        if not found:
            continue
        source_spans = translator.tokenizer.spans(line)[: len(sentences[i]) - len(tag)]
        fixed = len(prefixes[i].strip()) if prefixes is not None and prefixes[i] else 0
        lines.extend(_Line(i, line, h, found, source_spans, fixed) for h in hyps)
    if not lines:
        return
    for item in lines:
        item.text = translator.decoded(item.hyp)
    targets = [tag + ids for ids in translator.tokenizer.encode_target([x.text for x in lines])]
    read = translator.forced([sentences[x.index] for x in lines], targets, DEFAULT_HEADS, log_probs=False)
    changed = []
    for item, ids, forced in zip(lines, targets, read):
        new = _placed(translator, item, forced.attention[len(tag) : len(ids), len(tag) : len(sentences[item.index])])
        if new != item.text:
            item.text = new
            changed.append(item)
    if not changed:
        return
    limit = translator.model.config.max_positions - 2
    for item, ids in zip(changed, translator.tokenizer.encode_target([x.text for x in changed])):
        item.ids = tag + ids
    fits = [x for x in changed if len(x.ids) <= limit]
    for item in changed:
        if len(item.ids) > limit:
            translator.warn(f"line {window[item.index][0]}: with its glossary terms the translation is longer than the model's "
                            f"{limit} tokens; translated without them")
    for item, forced in zip(fits, translator.forced([sentences[x.index] for x in fits], [x.ids for x in fits], DEFAULT_HEADS)):
        h, source = item.hyp, sentences[item.index]
        h.tokens, h.text, h.log_prob = item.ids, item.text, forced.log_prob
        h.score = search_score(forced, settings.alpha, settings.length_penalty, settings.brevity.of(len(source), len(h.tokens)))
        if settings.coverage_penalty > 0:
            h.score += coverage_penalty(forced.attention, settings.coverage_penalty, len(tag))
        attention[id(h)] = forced.attention
    for i in {x.index for x in fits}:  # sorted again by the new scores; a text twice (two hypotheses differed in a term) once
        best: dict[str, Hypothesis] = {}
        for h in sorted(results[i], key=lambda h: h.score, reverse=True):
            best.setdefault(translator.decoded(h), h)
        results[i] = list(best.values())


def _occurrences(translator: TermTranslator, number: int, line: str, settings: SearchSettings) -> list[Occurrence]:
    """The occurrences of the glossary's terms in line `number`, at most MAX_TERMS_PER_LINE (the rest: a warning)."""
    found = settings.glossary.occurrences(line)
    if len(found) > MAX_TERMS_PER_LINE:
        translator.warn(f"line {number}: {len(found)} glossary terms, only the first {MAX_TERMS_PER_LINE} are put in "
                        f"({', '.join(line[o.start:o.end] for o in found[MAX_TERMS_PER_LINE:])} are not)")
    return found[:MAX_TERMS_PER_LINE]


def _placed(translator: TermTranslator, item: _Line, attention: Tensor) -> str:
    """The text of `item`'s translation with its terms put in. `attention`: its (target pieces, source pieces), tags left out."""
    spans = translator.tokenizer.target_spans(item.text)
    target_units = units_of(item.text, spans)
    source_units = units_of(item.line, item.source_spans, [(o.start, o.end) for o in item.occurrences])
    units = unit_spans(spans, target_units, item.text)
    fixed = sum(1 for a, _ in units if a < item.fixed) if item.fixed else 0  # a word the prefix starts is the prefix's
    if spans and item.source_spans:
        links, matrix = word_links(attention, source_units, target_units)
    else:
        links, matrix = [], torch.zeros(0, max(source_units, default=-1) + 1)
    chosen = placements(item.occurrences, item.source_spans, source_units, links, matrix, fixed)
    held = unneeded(item.text, units, chosen)
    return rewrite(item.text, units, [p for k, p in enumerate(chosen) if k not in held], item.line)
