"""The copy filter's second part in `nmt prepare`: short copies that nothing else in the corpus vouches for (issue 53).

The copy filter (cleaning.py) drops a pair whose target is its source (spaces and punctuation aside) only from
MIN_COPY_WORDS words on: one or two words written the same in both languages are often right ("OK", "PDF", "Status",
"JupyterLab"). But an untranslated corpus leaves copies of every length, and on the demo corpus with 30% noise 271 of
them (all of one or two words) were still in what the filters kept ("Save" -> "Save"): enough to teach a model to copy
short inputs. What tells a right short copy from an untranslated one is the rest of the corpus: a word that is the
same in both languages also turns up in the target side of pairs that are no copy ("PDF herunterladen" vouches for
"PDF"), where an untranslated English word does not ("Speichern", never "Save"). So a short copy is dropped unless
every word of its target occurs in the target of at least one pair that is not a short copy itself.

Measured on the demo corpus (studies/cleaning.py, docs/data.md): of its noisy version's 313 short copies (noise) the
rule drops 225, and 13 of the clean corpus's 16 short copies (compounds such as "Code-Syntax" and names the corpus
uses once). Three streaming passes over the cleaned pairs (the copies' words; their counts elsewhere; the rewrite):
memory holds the copies' words alone.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from nmtcli.data.cleaning import MIN_COPY_WORDS, bare, reservoir_add, with_filter
from nmtcli.data.text import read_lines
from nmtcli.files import atomic_path

FILTER = "short_copy"


def short_copy(src: str, tgt: str) -> bool:
    """Fewer than MIN_COPY_WORDS words with a letter among them, the target's the source's word for word (punctuation
    aside; case counts, as the copy filter's). Word for word, not the copy filter's letters alone: "Partner name" -> "Partnername" and "Code
    Syntax" -> "Code-Syntax" are German compounds, a translation."""
    if len(src.split()) >= MIN_COPY_WORDS or not any(c.isalpha() for c in src):  # "404", "1 / 2": numbers copy, rightly
        return False
    same = words(src)
    return bool(same) and same == words(tgt)


def words(text: str) -> list[str]:
    """A side's words as the rule compares them: split at spaces, punctuation taken off ("Code-Syntax" is one word)."""
    return [w for w in (bare(token) for token in text.split()) if w]


def short_copy_stage(work: Path, languages: tuple[str, str], seed: int, train: dict[str, Any], sample_size: int,
                     progress: Callable[[str, int, int | None], None]) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The cleaned training pairs (work/train.<lang>) with the short copies no other pair vouches for dropped, in place
    (an atomic rewrite): returns the train counts with `short_copy` after the other filters, and a seeded sample of
    `sample_size` of the dropped pairs for cleaning.jsonl."""
    paths = [work / f"train.{lang}" for lang in languages]
    pairs = train["clean_pairs"]

    def read() -> Iterator[tuple[str, str]]:
        return zip(read_lines(paths[0]), read_lines(paths[1]), strict=True)

    progress("vouching for short copies", 0, None)
    wanted = {w for s, t in read() if short_copy(s, t) for w in words(t)}
    if not wanted:  # nothing to vouch for: counted, as every filter is
        return with_filter(train, FILTER, 0), []
    seen: Counter[str] = Counter()
    for s, t in read():
        if not short_copy(s, t):
            seen.update(w for w in set(words(t)) if w in wanted)
    rng, dropped, sample, done = random.Random(seed), 0, [], 0
    with ExitStack() as stack:
        outs = [stack.enter_context(open(stack.enter_context(atomic_path(p)), "w", encoding="utf-8", newline="\n")) for p in paths]
        for s, t in read():
            done += 1
            if done % 100_000 == 0:
                progress("vouching for short copies", done, pairs)
            if short_copy(s, t) and not all(seen[w] for w in words(t)):
                dropped += 1
                reservoir_add(sample, (s, t), dropped, sample_size, rng)
                continue
            outs[0].write(s + "\n")
            outs[1].write(t + "\n")
        for f in outs:
            f.close()  # flushed before the atomic renames
    return with_filter(train, FILTER, dropped), [{"filter": FILTER, "source": s, "target": t} for s, t in sample]
