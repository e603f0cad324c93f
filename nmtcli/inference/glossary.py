"""Glossaries: source terms and the target terms every translation of them must hold (docs/translating.md).

A glossary file is UTF-8 text, one entry a line: the source term, a TAB, the target term. A target term may
give alternatives separated by `|` (`Haus|Hauses`: any one satisfies it; `\\|` is a literal bar). Blank lines
and lines starting with `#` are skipped. The same entries come from a mapping in the Python API and in a
`nmt serve` request.

Where a source term occurs in a line, the line's translation holds its target term (in one of the forms given,
exactly as written: a German case ending the model would add is not added; give the forms as alternatives).
How source terms are found:
- whole words only: a term starts and ends where a word does (`cat` is not found in `category`);
- a term written all in lower case is found in any case (`house` in `House` and `HOUSE`); a term with a capital
  letter is found only as written (`Apple` is not `apple`);
- the longest term wins where terms overlap or nest (`New York` over `York`), read from the left; where two are
  as long, the one written in the line's own case wins;
- a target term is required once per line, however often its source term occurs.
This module is torch-free: it reads and matches text; inference/translator.py turns the matches into token
constraints for the search (inference/constrained.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nmtcli.errors import NmtError

# Entries a glossary may have unless told otherwise (`--max-glossary`): matching a line costs the same for any size
# (terms are found by their first word), but each term a line holds widens every step of its search.
MAX_GLOSSARY = 10_000
# Terms one line may require: each adds its alternatives to every hypothesis's candidates; more are left out, with a
# warning naming the line.
MAX_TERMS_PER_LINE = 32

_WORD = re.compile(r"\w+")


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

    def __str__(self) -> str:
        return f"{self.source!r} -> {'|'.join(self.targets)!r}"


@dataclass(frozen=True, eq=False)
class Glossary:
    """The entries of one glossary, indexed by their first word for `matches`. Equal only to itself (a search's
    settings hold it: requests with the same glossary object share a batch)."""

    terms: tuple[Term, ...]
    name: str = "glossary"
    _index: dict[str, list[Term]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, list[Term]] = {}
        for term in self.terms:
            index.setdefault(_key(term.source, 0), []).append(term)
        for candidates in index.values():  # longest first; of equal length, the exactly-cased one first
            candidates.sort(key=lambda t: (-len(t.source), t.any_case))
        object.__setattr__(self, "_index", index)

    def __len__(self) -> int:
        return len(self.terms)

    def matches(self, text: str) -> list[Term]:
        """The terms found in `text` (see the module's rules), each once, in the order they first occur."""
        found: dict[Term, None] = {}
        i, n = 0, len(text)
        while i < n:
            if i and _inside_word(text, i):
                i += 1
                continue
            term = self._longest_at(text, i)
            if term is None:
                i += 1
                continue
            found.setdefault(term)
            i += len(term.source)
        return list(found)

    def _longest_at(self, text: str, i: int) -> Term | None:
        for term in self._index.get(_key(text, i), ()):
            end = i + len(term.source)
            piece = text[i:end]
            if (piece.lower() == term.source if term.any_case else piece == term.source) and (end == len(text) or not _inside_word(text, end)):
                return term
        return None


def _key(text: str, i: int) -> str:
    """What a term is indexed by and a position looked up with: the word starting at i, lower-cased, or its one
    character where no word starts there."""
    word = _WORD.match(text, i)
    return (word.group() if word else text[i : i + 1]).lower()


def _inside_word(text: str, i: int) -> bool:
    """Whether position i lies between two word characters (no term may start or end there)."""
    return 0 < i < len(text) and _is_word(text[i - 1]) and _is_word(text[i])


def _is_word(c: str) -> bool:
    return _WORD.match(c) is not None


def _alternatives(target: str) -> tuple[str, ...]:
    parts = re.split(r"(?<!\\)\|", target)
    return tuple(p.replace("\\|", "|").strip() for p in parts)


def read_glossary(path: str | Path, max_terms: int = MAX_GLOSSARY) -> Glossary:
    """A glossary file (the module's format). NmtError (exit 2) naming the file and line for a line that is not
    `source TAB target`, an empty term, or more entries than `max_terms`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NmtError(f"glossary {path} does not exist", "give a file of `source TAB target` lines", exit_code=2) from None
    except UnicodeDecodeError as e:
        raise NmtError(f"glossary {path} is not UTF-8 text (byte {e.start})", "save it as UTF-8", exit_code=2) from None
    except OSError as e:
        raise NmtError(f"cannot read glossary {path}: {e.strerror or e}", "check the path and its permissions", exit_code=2) from None
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
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
        source = source.strip()
        targets = _alternatives(target)
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
