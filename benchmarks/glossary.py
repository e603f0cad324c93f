"""Protected spans (issue 35): how many of them come out exact, and what protecting them costs.

1,000 sentences are generated (seeded) from English words with placeholders ({{name}}, {0}, %s, %(name)s, ${var},
<x/>), URLs and e-mail addresses among them, between words, glued to punctuation and at either end. Each is
translated twice by the same model on the same device: with the built-in protection (the default) and with
`protect=False` (the model reads the spans as text), and with `protect=False` on the texts the model reads with
protection (the spans taken out: "read", the same search without the alignment pass and the placement). Printed for each: the share of sentences whose every span is
in the translation exactly as often as in the source ("exact": the guarantee, 100% by construction with
protection), the share of spans found at all, and lines per second (the search, plus with protection the covering
alignment pass for the sentences whose spans lie between words).

The glossary half of issue 35 (lexically constrained beam search) is not built yet: this file measures the
protected spans only.

Usage:
  python benchmarks/glossary.py --model models/tiny-demo [--lines 1000] [--device cpu] [--threads 2] [--beam 4]
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from nmtcli import Translator
from nmtcli.documents.protect import Protected, Protection, find_spans

WORDS = ("the a this every small new old red big green house car book train dog cat child song city road "
         "sees likes follows reads finds opens closes sends gets is was has").split()


def span(rng: random.Random) -> str:
    w, n = rng.choice(WORDS), rng.randrange(1000)
    return rng.choice([f"{{{{{w}}}}}", f"{{{n % 10}}}", "%s", "%d", f"%({w})s", f"${{{w}}}", f'<x id="{n % 9}"/>',
                       f"https://www.{w}.example.com/{w}?id={n}", f"https://{w}.org", f"{w}.{n}@example.org"])


def sentence(rng: random.Random) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
    for _ in range(rng.randint(1, 3)):
        s = span(rng)
        words.insert(rng.randint(0, len(words)), rng.choice([s, s, s, f"({s})", f"{s},", f'"{s}"']))
    return " ".join(words).capitalize() + rng.choice([".", ".", "!", "?", ""])


def exact(source: str, output: str, protection: Protection) -> tuple[bool, int, int]:
    """(every span as often as in the source, spans found, spans)."""
    spans = [source[a:b] for a, b in find_spans(source, protection)]
    return all(output.count(s) == source.count(s) for s in spans), sum(s in output for s in spans), len(spans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--seed", type=int, default=35)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = random.Random(args.seed)
    lines = [sentence(rng) for _ in range(args.lines)]
    protection = Protection.of()
    translator = Translator.load(args.model, device=args.device)
    translator.translate(lines[:20], beam=args.beam)  # warm up
    print(f"{len(lines):,} sentences, {sum(len(find_spans(x, protection)) for x in lines):,} spans; model {args.model}; "
          f"{args.device}, {torch.get_num_threads()} threads, beam {args.beam}")
    print(f"{'protection':<12} {'exact':>8} {'spans found':>12} {'lines/s':>9}   (read: the spans were taken out, not put back)")
    # "read": protection off on the text the model reads with protection on (the spans taken out): the same search,
    # so "on" minus "read" is the cost of the alignment pass and the placement alone
    read = [Protected.of(x, protection).text for x in lines]
    runs = [("off", lines, False), ("read", read, False), ("on", lines, True)]
    for name, texts, protect in [*runs, *((f"{name} again", texts, protect) for name, texts, protect in runs)]:
        started = time.perf_counter()
        out = translator.translate(texts, beam=args.beam, protect=protect)
        seconds = time.perf_counter() - started
        checks = [exact(x, t.text, protection) for x, t in zip(lines, out)]
        share = sum(ok for ok, _, _ in checks) / len(checks)
        found = sum(f for _, f, _ in checks) / max(1, sum(n for _, _, n in checks))
        print(f"{name:<12} {share:>8.1%} {found:>12.1%} {len(lines) / seconds:>9.1f}")


if __name__ == "__main__":
    main()
