"""Glossaries and protected spans (issue 35): how often the terms and spans come out, what it does to quality, and
what it costs. Three measurements, each a subcommand:

spans   1,000 sentences are generated (seeded) from English words with placeholders ({{name}}, {0}, %s, %(name)s,
        ${var}, <x/>), URLs and e-mail addresses among them, between words, glued to punctuation and at either end.
        Each is translated by the same model on the same device: with the built-in protection (the default), with
        `protect=False` (the model reads the spans as text), and with `protect=False` on the texts the model reads with
        protection (the spans taken out: "read", the same search without the alignment pass and the placement).
        Printed for each: the share of sentences whose every span is in the translation exactly as often as in the
        source ("exact": the guarantee), the share of spans found at all, and lines per second.

terms   A test set (--source, --reference) and a glossary taken from its references: each reference aligned to its
        source under the model (forced decoding, word alignment), and a source word of 4+ letters that links to the
        same reference word in at least half of its 2+ occurrences gets that word as its term. The set is
        translated without and with the glossary: the share of the terms found in lines that hold them present in
        the output, BLEU and chrF against the references, whether the lines without terms came out the same, and
        lines per second. --swap gives each source word another entry's target word instead (a derangement): terms
        the model would never write (a fine-tuning's changed words), where only the glossary puts them there.

speed   The constrained search against the plain beam on the same batches: each line of --source gets k terms
        (k = 1, 5, 20), words of its own reference (then of others'), as target token ids; lines per second.

Usage:
  python benchmarks/glossary.py spans --model models/tiny-demo [--lines 1000] [--device cpu] [--threads 2] [--beam 4]
  python benchmarks/glossary.py terms --model models/tiny-demo --source test.en --reference test.de [--swap]
  python benchmarks/glossary.py speed --model models/tiny-demo --source test.en --reference test.de
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time
from collections import Counter, defaultdict

import torch

from nmtcli import Translator
from nmtcli.documents.protect import Protected, Protection, find_spans
from nmtcli.inference.glossary import glossary_of
from nmtcli.scoring import score

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


def spans(args: argparse.Namespace) -> None:
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


def _word(token: str) -> str:
    return token.strip(".,;:!?\"'()[]{}«»„“”")


def lexicon(translator: Translator, sources: list[str], references: list[str]) -> dict[str, str]:
    """Source word -> reference word, from the references aligned to their sources under the model (see the module)."""
    links: dict[str, Counter] = defaultdict(Counter)
    for source, reference, scored in zip(sources, references, translator.score(sources, references, alignment="words")):
        words, targets = source.split(), reference.split()
        for link in (scored.alignment or "").split():
            i, j = map(int, link.split("-"))
            a, b = _word(words[i]).lower(), _word(targets[j])
            if len(a) >= 4 and a.isalpha() and len(b) >= 2:
                links[a][b] += 1
    terms = {}
    for word, counts in links.items():
        target, n = counts.most_common(1)[0]
        if sum(counts.values()) >= 2 and n >= sum(counts.values()) / 2:
            terms[word] = target
    return terms


def terms(args: argparse.Namespace) -> None:
    sources, references = _read(args.source), _read(args.reference)
    translator = Translator.load(args.model, device=args.device)
    entries = lexicon(translator, sources, references)
    if args.swap:  # each word gets the next entry's target: a derangement of the targets
        words = sorted(entries)
        entries = {w: entries[words[(i + 1) % len(words)]] for i, w in enumerate(words)}
    glossary = glossary_of(entries)
    found = [glossary.matches(line) for line in sources]
    print(f"{len(sources):,} lines of {args.source}; a glossary of {len(entries):,} entries from the references{' (swapped)' if args.swap else ''}; "
          f"{sum(map(bool, found)):,} lines hold {sum(map(len, found)):,} terms; model {args.model}; {args.device}, "
          f"{torch.get_num_threads()} threads, beam {args.beam}")
    translator.translate(sources[:20], beam=args.beam)  # warm up
    print(f"{'glossary':<10} {'terms present':>14} {'BLEU':>7} {'chrF':>7} {'no-term lines same':>19} {'lines/s':>9}")
    plain = None
    for name, given in (("without", None), ("with", glossary)):
        started = time.perf_counter()
        out = [t.text for t in translator.translate(sources, beam=args.beam, glossary=given)]
        seconds = time.perf_counter() - started
        present = [any(alt in text for alt in term.targets) for text, line_terms in zip(out, found) for term in line_terms]
        bleu, chrf = score(out, references, ["bleu", "chrf"])
        plain = plain or out
        same = sum(a == b for a, b, line_terms in zip(plain, out, found) if not line_terms)
        print(f"{name:<10} {sum(present) / max(1, len(present)):>14.1%} {bleu.score:>7.1f} {chrf.score:>7.1f} "
              f"{f'{same}/{sum(not t for t in found)}':>19} {len(sources) / seconds:>9.1f}")


def speed(args: argparse.Namespace) -> None:
    from nmtcli.inference.translator import encode_lines, translate_ids

    sources, references = _read(args.source), _read(args.reference)
    translator = Translator.load(args.model, device=args.device)
    engine = translator.engine
    rng = random.Random(args.seed)
    sentences = encode_lines(engine.tokenizer.encode, sources, engine.max_source_tokens)
    vocabulary = sorted({w for ref in references for w in ref.split()})
    settings = dataclasses.replace(engine.settings, beam=args.beam)
    print(f"{len(sources):,} lines of {args.source}; model {args.model}; {args.device}, {torch.get_num_threads()} threads, beam {args.beam}")
    print(f"{'terms a line':<13} {'lines/s':>9} {'vs plain':>9}   (medians of {args.rounds} rounds, alternating)")
    runs: dict[str, list[float]] = defaultdict(list)
    constraints = {}
    for k in (1, 5, 20):
        lines = []
        for ref in references:
            own = list(dict.fromkeys(ref.split()))
            rng.shuffle(own)
            words = (own + rng.sample(vocabulary, k))[:k]
            lines.append([[ids] for ids in engine.tokenizer.encode_target(words)])
        constraints[k] = lines
    translate_ids(engine.model, sentences[:20], settings, engine.budget, engine.device, constraints=constraints[5][:20])  # warm up
    translate_ids(engine.model, sentences[:20], settings, engine.budget, engine.device)
    for _ in range(args.rounds):
        for name, given in (("plain", None), *((str(k), constraints[k]) for k in (1, 5, 20))):
            started = time.perf_counter()
            translate_ids(engine.model, sentences, settings, engine.budget, engine.device, constraints=given)
            runs[name].append(len(sources) / (time.perf_counter() - started))
    base = statistics.median(runs["plain"])
    for name, rates in runs.items():
        print(f"{name:<13} {statistics.median(rates):>9.1f} {statistics.median(rates) / base:>8.2f}x")


def _read(path: str) -> list[str]:
    return open(path, encoding="utf-8").read().splitlines()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("spans", "terms", "speed"):
        sub = commands.add_parser(name)
        sub.add_argument("--model", required=True)
        sub.add_argument("--device", default="cpu")
        sub.add_argument("--threads", type=int, default=None)
        sub.add_argument("--beam", type=int, default=4)
        sub.add_argument("--seed", type=int, default=35)
        if name == "spans":
            sub.add_argument("--lines", type=int, default=1000)
        else:
            sub.add_argument("--source", required=True)
            sub.add_argument("--reference", required=True)
        if name == "terms":
            sub.add_argument("--swap", action="store_true", help="terms the model would not write: each source word another's target")
        if name == "speed":
            sub.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    {"spans": spans, "terms": terms, "speed": speed}[args.command](args)


if __name__ == "__main__":
    main()
