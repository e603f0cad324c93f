"""A synthetic parallel corpus with a rule to learn: word-by-word lexical mapping plus reordering.

English-like source sentences ("the small dog sees a red ball") map to German-like targets in which
each word is translated through a fixed dictionary, adjectives follow their noun, and the verb moves
to the end ("der hund klein ein ball rot sieht"). A model must learn both the lexicon and the
reordering; copying the source scores near zero BLEU. `parquet_bytes` packs pairs the way the Hub's
WMT datasets store them, for the loopback Hub of tests/hub_server.py.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path

NOUNS = {
    "dog": "hund", "cat": "katze", "house": "haus", "tree": "baum", "car": "wagen", "book": "buch",
    "city": "stadt", "river": "fluss", "child": "kind", "woman": "frau", "man": "mann", "bird": "vogel",
    "garden": "garten", "table": "tisch", "window": "fenster", "door": "tuer", "ball": "ball",
    "friend": "freund", "teacher": "lehrer", "horse": "pferd", "apple": "apfel", "letter": "brief",
    "train": "zug", "ship": "schiff", "mountain": "berg", "song": "lied", "king": "koenig", "road": "strasse",
}
ADJECTIVES = {
    "small": "klein", "big": "gross", "red": "rot", "old": "alt", "young": "jung", "green": "gruen",
    "fast": "schnell", "quiet": "leise", "happy": "froh", "dark": "dunkel", "new": "neu", "blue": "blau",
    "warm": "warm", "cold": "kalt", "strong": "stark", "beautiful": "schoen",
}
VERBS = {
    "sees": "sieht", "likes": "mag", "finds": "findet", "buys": "kauft", "paints": "malt", "hears": "hoert",
    "builds": "baut", "carries": "traegt", "follows": "folgt", "visits": "besucht", "knows": "kennt",
    "reads": "liest", "draws": "zeichnet", "helps": "hilft",
}
DETERMINERS = {"the": "der", "a": "ein", "this": "dieser", "every": "jeder"}
# An "in-domain" lexicon for fine-tuning: six frequent target words (three nouns, three verbs, each in about 7% of
# sentences) that this domain translates differently. Only letters the general targets use, so that a tokenizer
# trained on the general corpus spells them without unknown pieces.
DOMAIN_WORDS = {"hund": "koeter", "haus": "heim", "wagen": "auto", "sieht": "schaut", "kauft": "erwirbt", "mag": "liebt"}


def _noun_phrase(rng: random.Random) -> tuple[list[str], list[str]]:
    det = rng.choice(sorted(DETERMINERS))
    noun = rng.choice(sorted(NOUNS))
    adjectives = rng.sample(sorted(ADJECTIVES), rng.choice([0, 0, 1, 1, 2]))
    source = [det, *adjectives, noun]
    target = [DETERMINERS[det], NOUNS[noun], *(ADJECTIVES[a] for a in adjectives)]
    return source, target


def sentence_pair(rng: random.Random, verb_second: bool = False) -> tuple[str, str]:
    """One pair; `verb_second` is the "in-domain" variant the fine-tuning tests adapt to: the same
    words, but the verb stays after the subject ("der hund klein sieht ein ball rot")."""
    subject_src, subject_tgt = _noun_phrase(rng)
    object_src, object_tgt = _noun_phrase(rng)
    verb = rng.choice(sorted(VERBS))
    source = [*subject_src, verb, *object_src]
    target = [*subject_tgt, VERBS[verb], *object_tgt] if verb_second else [*subject_tgt, *object_tgt, VERBS[verb]]
    return " ".join(source), " ".join(target)


def write_corpus(directory: Path, sizes: dict[str, int], seed: int = 0, src: str = "en", tgt: str = "de",
                 verb_second: bool = False, substitute: dict[str, str] | None = None) -> dict[str, Path]:
    """Write PREFIX.en / PREFIX.de for each split (disjoint sentences); returns {split: prefix}.

    `substitute` replaces target words after the pairs are drawn (e.g. DOMAIN_WORDS): the same source
    sentences as without it, a domain whose lexicon differs in those words."""
    rng = random.Random(seed)
    seen: set[str] = set()
    prefixes = {}
    directory.mkdir(parents=True, exist_ok=True)
    for split, size in sizes.items():
        pairs = []
        while len(pairs) < size:
            s, t = sentence_pair(rng, verb_second)
            if s not in seen:
                seen.add(s)
                pairs.append((s, " ".join(substitute.get(w, w) for w in t.split()) if substitute else t))
        prefix = directory / split
        (directory / f"{split}.{src}").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
        (directory / f"{split}.{tgt}").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
        prefixes[split] = prefix
    return prefixes


def parquet_bytes(pairs: list[tuple[str, str]], src: str = "en", tgt: str = "de", padding: int = 0) -> bytes:
    """A parquet file with the Hub's WMT schema: one column `translation: struct<de: string, en: string>`.

    `padding` adds that many random bytes in a second column that readers of `translation` skip:
    `hf_hub_download` writes to disk in 10 MiB pieces, so only a file larger than that can be
    interrupted with part of it on disk.
    """
    import io
    import random

    import pyarrow as pa
    import pyarrow.parquet as pq

    langs = sorted((src, tgt))  # the Hub's files list the struct fields alphabetically
    struct = pa.struct([(lang, pa.string()) for lang in langs])
    columns = {"translation": pa.array([{src: s, tgt: t} for s, t in pairs], type=struct)}
    if padding:
        blob = random.Random(0).randbytes(padding)
        columns["padding"] = pa.array([blob] + [b""] * (len(pairs) - 1), type=pa.binary())
    buffer = io.BytesIO()
    pq.write_table(pa.table(columns), buffer, compression="none" if padding else "snappy")
    return buffer.getvalue()


SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def zipf_corpus(directory: Path, sizes: dict[str, int], words: int = 20_000, seed: int = 0) -> dict[str, Path]:
    """PREFIX.en / PREFIX.de of invented words drawn with Zipf's law (p ~ 1/rank), as a natural corpus
    has them: its count of distinct words keeps growing with its size, so a BPE vocabulary of a few
    thousand pieces is there to be learned. Each target word is its source word with every syllable
    moved one place in SYLLABLES, in reverse order; the sentence keeps its word order."""
    rng = random.Random(seed)
    lexicon = sorted({"".join(rng.choices(SYLLABLES, k=rng.choice([1, 2, 2, 3, 3, 4]))) for _ in range(words)})
    rng.shuffle(lexicon)  # rank = position
    cumulative = list(itertools.accumulate(1 / (rank + 1) for rank in range(len(lexicon))))
    shift = {s: SYLLABLES[(i + 1) % len(SYLLABLES)] for i, s in enumerate(SYLLABLES)}

    def translate(word: str) -> str:
        return "".join(shift[word[i:i + 2]] for i in range(len(word) - 2, -1, -2))

    directory.mkdir(parents=True, exist_ok=True)
    prefixes = {}
    for split, size in sizes.items():
        lines = [rng.choices(lexicon, cum_weights=cumulative, k=rng.randint(3, 12)) for _ in range(size)]
        (directory / f"{split}.en").write_text("".join(" ".join(s) + "\n" for s in lines), encoding="utf-8")
        (directory / f"{split}.de").write_text("".join(" ".join(map(translate, s)) + "\n" for s in lines), encoding="utf-8")
        prefixes[split] = directory / split
    return prefixes


# A third language for the multilingual tests, by rules of its own: French-like words (each English word
# reversed, plus "e"; its own determiners), adjectives after their noun, the verb kept between subject and
# object ("the small dog sees a red ball" -> "le gode llamse seese un llabe dere"), so en->fr and en->de differ
# in both words and order.
FRENCH = {**{w: w[::-1] + "e" for w in (*NOUNS, *ADJECTIVES, *VERBS)}, "the": "le", "a": "un", "this": "ce", "every": "chaque"}


def french_pair(rng: random.Random) -> tuple[str, str]:
    """An English-like sentence and its French-like translation (see FRENCH)."""
    subject, object_ = ([rng.choice(sorted(DETERMINERS)), *rng.sample(sorted(ADJECTIVES), rng.choice([0, 0, 1, 1, 2])), rng.choice(sorted(NOUNS))]
                        for _ in range(2))
    verb = rng.choice(sorted(VERBS))

    def phrase(words: list[str]) -> list[str]:
        return [FRENCH[words[0]], FRENCH[words[-1]], *(FRENCH[a] for a in words[1:-1])]

    return " ".join([*subject, verb, *object_]), " ".join([*phrase(subject), FRENCH[verb], *phrase(object_)])


def write_multilingual_corpus(directory: Path, sizes: dict[str, int], seed: int = 0) -> dict[str, dict[str, Path]]:
    """Three directions, each in `directory/SRC-TGT/SPLIT.{SRC,TGT}` with disjoint sentences per split: en-de (the
    rules above), de-en (other sentences by the same rules, reversed) and en-fr (FRENCH). Returns {direction: {split: prefix}}."""
    makers = {"en-de": lambda rng: sentence_pair(rng), "de-en": lambda rng: sentence_pair(rng)[::-1], "en-fr": french_pair}
    out: dict[str, dict[str, Path]] = {}
    for n, (direction, make) in enumerate(makers.items()):
        src, tgt = direction.split("-")
        rng, seen, out[direction] = random.Random(seed * 10 + n), set(), {}
        folder = directory / direction
        folder.mkdir(parents=True, exist_ok=True)
        for split, size in sizes.items():
            pairs = []
            while len(pairs) < size:
                s, t = make(rng)
                if s not in seen:
                    seen.add(s)
                    pairs.append((s, t))
            (folder / f"{split}.{src}").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
            (folder / f"{split}.{tgt}").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
            out[direction][split] = folder / split
    return out
