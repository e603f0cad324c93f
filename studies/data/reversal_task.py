"""The reversal rule task (issue 49): random sequences of 3-12 words of a 55-word English lexicon, each word
translated by the lexicon into German, the order reversed. The true word alignment of every pair is known by
construction (source word k <-> target word n - 1 - k), so a model of it has gold links to be measured against at
any vocabulary size: at `--vocab-size 300` most German words are several sentencepiece pieces.

    python studies/data/reversal_task.py OUT [--train-pairs 20000] [--seed 0]

writes OUT/{train,valid,test}.{en,de} (valid and test 500 pairs each, no source line twice in the three) and
OUT/alignment_gold.tsv: the first 100 test pairs with their true links, in studies/alignment_aer.py's format.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

LEXICON = {
    "house": "Haus", "city": "Stadt", "river": "Fluss", "tree": "Baum", "dog": "Hund", "cat": "Katze", "bird": "Vogel",
    "mouse": "Maus", "child": "Kind", "woman": "Frau", "man": "Mann", "garden": "Garten", "table": "Tisch",
    "window": "Fenster", "door": "Tuer", "friend": "Freund", "teacher": "Lehrer", "horse": "Pferd", "apple": "Apfel",
    "letter": "Brief", "train": "Zug", "ship": "Schiff", "mountain": "Berg", "song": "Lied", "king": "Koenig",
    "road": "Strasse", "small": "klein", "big": "gross", "red": "rot", "old": "alt", "young": "jung", "green": "gruen",
    "blue": "blau", "black": "schwarz", "white": "weiss", "fast": "schnell", "quiet": "leise", "happy": "froh",
    "dark": "dunkel", "sees": "sieht", "likes": "mag", "finds": "findet", "buys": "kauft", "follows": "folgt",
    "visits": "besucht", "knows": "kennt", "reads": "liest", "helps": "hilft", "one": "eins", "two": "zwei",
    "four": "vier", "six": "sechs", "seven": "sieben", "nine": "neun",
}


def pair(rng: random.Random) -> tuple[str, str]:
    words = [rng.choice(sorted(LEXICON)) for _ in range(rng.randint(3, 12))]
    return " ".join(words), " ".join(LEXICON[w] for w in reversed(words))


def write(out: Path, train_pairs: int, seed: int) -> None:
    rng, seen = random.Random(seed), set()
    out.mkdir(parents=True, exist_ok=True)
    for split, size in (("train", train_pairs), ("valid", 500), ("test", 500)):
        pairs = []
        while len(pairs) < size:
            source, target = pair(rng)
            if source not in seen:
                seen.add(source)
                pairs.append((source, target))
        for side, lang in ((0, "en"), (1, "de")):
            (out / f"{split}.{lang}").write_text("".join(p[side] + "\n" for p in pairs), encoding="utf-8")
    with open(out / "alignment_gold.tsv", "w", encoding="utf-8") as f:
        f.write(f"# line\tsource\ttarget\ttrue links (Pharaoh src-tgt over words): the reversal task, {train_pairs} training pairs, seed {seed}\n")
        for i, (source, target) in enumerate(pairs[:100]):
            n = len(source.split())
            f.write(f"{i}\t{source}\t{target}\t{' '.join(f'{k}-{n - 1 - k}' for k in range(n))}\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path)
    parser.add_argument("--train-pairs", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    write(args.out, args.train_pairs, args.seed)


if __name__ == "__main__":
    main()
