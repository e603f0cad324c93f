"""Glossaries: source terms and the target terms every translation of them must hold (docs/translating.md).

A glossary file is UTF-8 text (a byte-order mark is read as one), one entry a line: the source term, a TAB, the
target term. A target term may give alternatives separated by `|` (`Haus|Hauses`: the form the model's own
translation has is taken; `\\|` is a literal bar). Blank lines and lines starting with `#` are skipped. The same
entries come from a mapping in the Python API and in a `nmt serve` request.

Where a source term occurs in a line, the line's translation holds its target term there, once for each
occurrence (inference/terms.py puts it in). How source terms are found:
- whole words only: a term starts and ends where a word does (`cat` is not found in `category`); but in scripts
  written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Myanmar) a term is found anywhere
  (`北京` in `我爱北京天安门`), and a Korean (Hangul) term may end inside a word, where a particle follows it
  (`서울` in `서울에서`);
- a term written all in lower case is found in any case (`house` in `House` and `HOUSE`; case folded as Unicode
  does, with Turkish `İ` and `ı` as `i`: `istanbul` in `İSTANBUL`, `straße` in `STRASSE`); a term with a capital
  letter is found only as written (`Apple` is not `apple`);
- the longest term wins where terms overlap or nest (`New York` over `York`), read from the left; where two are
  as long, the one written in the line's own case wins.
This module is torch-free: it reads and matches text; inference/terms.py places the matches in translations.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from nmtcli.errors import NmtError

# Entries a glossary may have unless told otherwise (`--max-glossary`): matching a line costs about the same for any
# size (terms are looked up by their first word, or first character).
MAX_GLOSSARY = 10_000
# Term occurrences one line may have put in; more are left out, with a warning naming the line.
MAX_TERMS_PER_LINE = 32

_WORD = re.compile(r"\w+")
# Scripts written without spaces between words: a term in them is found anywhere, not only between word boundaries.
_UNSPACED = ("\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
             "\uf900-\ufaff\uff66-\uff9f\U00020000-\U0002fa1f")  # Thai, Lao, Myanmar, Khmer, kana, Han
_HANGUL = "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af"  # Korean: spaces between words, particles glued to nouns
UNSPACED = re.compile(f"[{_UNSPACED}]")
_GLUED = re.compile(f"[{_UNSPACED}{_HANGUL}]")
# Case folding for terms written in lower case: Unicode's, with Turkish dotted and dotless i as plain i (`İSTANBUL`
# folds to `i̇stanbul` otherwise: a combining dot no lower-case term holds).
_FOLD = {"\u0130": "i", "\u0131": "i"}


def fold(text: str) -> tuple[str, list[int]]:
    """`text` case-folded, and for each folded character the index of the character of `text` it comes from
    (folding may change the length: `ß` -> `ss`)."""
    out, where = [], []
    for i, c in enumerate(text):
        f = _FOLD.get(c)
        if c == "\u0307" and i and text[i - 1] in "iI":  # the dot of an `İ` lower-cased elsewhere (`i̇`)
            f = ""
        f = c.casefold() if f is None else f
        out.append(f)
        where.extend([i] * len(f))
    return "".join(out), where


@dataclass(frozen=True)
class Term:
    """One entry: a source term and the target terms (alternatives) that satisfy it. `origin` says where it came
    from (`terms.tsv:12`, or `glossary['house']`), for messages."""

    source: str
    targets: tuple[str, ...]
    origin: str

    @property
    def any_case(self) -> bool:
        return self.source == self.source.lower()

    @cached_property
    def folded(self) -> str:
        """Its source case-folded (what a term in lower case is found by)."""
        return fold(self.source)[0]

    def __str__(self) -> str:
        return f"{self.source!r} -> {'|'.join(self.targets)!r}"


@dataclass(frozen=True)
class Occurrence:
    """A term found in a line: the line's characters [start, end)."""

    start: int
    end: int
    term: Term


@dataclass(frozen=True, eq=False)
class Glossary:
    """The entries of one glossary, in two tries for `occurrences`: the terms found in any case by their folded source,
    the others by their source as written. Looking a position up walks the line as far as some term goes, so it costs
    the length of the longest term there, however many terms share their first letters. Equal only to itself (a
    search's settings hold it: requests with the same glossary object share a batch)."""

    terms: tuple[Term, ...]
    name: str = "glossary"
    _exact: dict = field(init=False, repr=False, compare=False)
    _folded: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_exact", _trie((t.source, t) for t in self.terms if not t.any_case))
        object.__setattr__(self, "_folded", _trie((t.folded, t) for t in self.terms if t.any_case))

    def __len__(self) -> int:
        return len(self.terms)

    def matches(self, text: str) -> list[Term]:
        """The terms found in `text`, each once, in the order they first occur."""
        return list(dict.fromkeys(o.term for o in self.occurrences(text)))

    def occurrences(self, text: str) -> list[Occurrence]:
        """Every occurrence of a term in `text` (the module's rules), left to right, none overlapping another."""
        folded, where = fold(text)
        starts: dict[int, int] = {}  # original index -> where its folding starts in `folded`
        for j, i in enumerate(where):
            starts.setdefault(i, j)
        found: list[Occurrence] = []
        i, n = 0, len(text)
        while i < n:
            occurrence = self._longest_at(text, i, folded, where, starts.get(i)) if _may_start(text, i) else None
            if occurrence is None:
                i += 1
                continue
            found.append(occurrence)
            i = occurrence.end
        return found

    def _longest_at(self, text: str, i: int, folded: str, where: list[int], at: int | None) -> Occurrence | None:
        """The longest term occurring at text[i] (`at`: where it starts in `folded`, None if it folds to nothing); of two
        as long, the one written in the line's own case (the exact trie is walked first)."""
        best: Occurrence | None = None
        for trie, line, start, exact in ((self._exact, text, i, True), (self._folded, folded, at, False)):
            node, k = trie, start
            while node is not None and k is not None:
                for term in node.get(_END, ()):
                    inside = not exact and 0 < k < len(where) and where[k] == where[k - 1]  # `a s` is not in `a ß`
                    end = k if exact else where[k] if k < len(where) else len(text)
                    if not inside and _may_end(text, end) and (best is None or end > best.end):
                        best = Occurrence(i, end, term)
                        break
                node, k = (node.get(line[k]), k + 1) if k < len(line) else (None, None)
        return best


_END = None  # a trie node's key for the terms that end there (every other key is one character)


def _trie(keys) -> dict:
    """A trie of (key, term) pairs: a node per character, the terms ending at a node under _END, in the order given."""
    root: dict = {}
    for key, term in keys:
        node = root
        for c in key:
            node = node.setdefault(c, {})
        node.setdefault(_END, []).append(term)
    return root


def _may_start(text: str, i: int) -> bool:
    """Whether a term may start at i: where a word starts, or next to a character of a script without spaces."""
    return not _inside_word(text, i) or bool(UNSPACED.match(text[i]) or UNSPACED.match(text[i - 1]))


def _may_end(text: str, end: int) -> bool:
    """Whether a term may end at `end`: where a word ends, or next to a character of a script without spaces or of
    Korean (a particle follows: `Google에서`)."""
    return not _inside_word(text, end) or bool(_GLUED.match(text[end - 1]) or _GLUED.match(text[end]))


def _inside_word(text: str, i: int) -> bool:
    """Whether position i lies between two word characters."""
    return 0 < i < len(text) and _is_word(text[i - 1]) and _is_word(text[i])


def _is_word(c: str) -> bool:
    """A character of a word: a letter, digit or `_`, a combining mark (a virama, an accent written apart) or an invisible
    format character inside words (soft hyphen, zero-width joiner)."""
    return _WORD.match(c) is not None or unicodedata.category(c)[0] == "M" or unicodedata.category(c) == "Cf"


def _alternatives(target: str) -> tuple[str, ...]:
    parts = re.split(r"(?<!\\)\|", target)
    return tuple(p.replace("\\|", "|").strip() for p in parts)


def read_glossary(path: str | Path, max_terms: int = MAX_GLOSSARY) -> Glossary:
    """A glossary file (the module's format). NmtError (exit 2) naming the file and line for a line that is not
    `source TAB target`, an empty term, or more entries than `max_terms`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # a byte-order mark (Windows editors write one) is no character of the first term
    except FileNotFoundError:
        raise NmtError(f"glossary {path} does not exist", "give a file of `source TAB target` lines", exit_code=2) from None
    except UnicodeDecodeError as e:
        raise NmtError(f"glossary {path} is not UTF-8 text (byte {e.start})", "save it as UTF-8", exit_code=2) from None
    except OSError as e:
        raise NmtError(f"cannot read glossary {path}: {e.strerror or e}", "check the path and its permissions", exit_code=2) from None
    rows = []
    for number, line in enumerate(re.split(r"\r\n|\r|\n", text), start=1):  # not str.splitlines: U+2028 is no line break here
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        fields = line.split("\t")
        where = f"{path}:{number}"
        if len(fields) != 2:
            raise NmtError(f"{where}: expected `source TAB target`, found {len(fields) - 1} TABs",
                           "separate the two terms with one TAB character; alternatives of a target go between |", exit_code=2)
        rows.append((fields[0], fields[1], where))
    return _glossary(rows, max_terms, str(path), "--max-glossary")


def glossary_of(entries: Mapping[str, str | Sequence[str]] | Glossary, max_terms: int = MAX_GLOSSARY, name: str = "glossary") -> Glossary:
    """A glossary from a mapping of source term -> target term (a string, `|` between alternatives, or a list of
    them), as the Python API and `nmt serve`'s requests give it; a Glossary as it is. NmtError for an empty term,
    a value of another type, or more than `max_terms` entries."""
    if isinstance(entries, Glossary):
        return entries
    if not isinstance(entries, Mapping):
        raise NmtError(f"{name} must map source terms to target terms, not {type(entries).__name__}",
                       'give e.g. {"house": "Haus"}', exit_code=2)
    rows = []
    for source, target in entries.items():
        where = f"{name}[{source!r}]"
        if not isinstance(source, str) or not (isinstance(target, str) or _strings(target)):
            raise NmtError(f"{where}: terms must be strings (a target may be a list of alternatives)",
                           'give e.g. {"house": "Haus|Hauses"}', exit_code=2)
        rows.append((source, target if isinstance(target, str) else "|".join(t.replace("|", "\\|") for t in target), where))
    return _glossary(rows, max_terms, name, "the glossary's size limit")


def _strings(value: object) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, str) for v in value)


def _glossary(rows: Iterable[tuple[str, str, str]], max_terms: int, name: str, limit: str) -> Glossary:
    terms: dict[str, Term] = {}
    for source, target, where in rows:
        source = source.replace("\ufeff", "").strip()  # a byte-order mark where files were joined
        targets = tuple(t.replace("\ufeff", "") for t in _alternatives(target))
        bad = next((c for c in source + "".join(targets) if unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp")), None)
        if bad is not None:
            raise NmtError(f"{where}: a term holds the character U+{ord(bad):04X} (a line break, tab, control or lone surrogate)",
                           "write each term on one line, with printable characters", exit_code=2)
        if not source or not all(targets):
            raise NmtError(f"{where}: an empty {'source' if not source else 'target'} term", "give both terms, or delete the line",
                           exit_code=2)
        if source in terms and terms[source].targets != targets:
            raise NmtError(f"{where}: {source!r} is in the glossary already ({terms[source].origin}) with another target",
                           "keep one entry per source term (alternatives go in one target, separated by |)", exit_code=2)
        terms[source] = Term(source, targets, where)
        if len(terms) > max_terms:
            raise NmtError(f"{name} has more than {max_terms:,} entries", f"raise {limit}, or split the glossary", exit_code=2)
    return Glossary(tuple(terms.values()), name)
