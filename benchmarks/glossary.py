"""Glossaries and protected spans (issues 35, 49): how often the terms and spans come out, what it does to the whole
translation, and what it costs. Three measurements, each a subcommand:

spans   1,000 sentences are generated (seeded) from English words with placeholders ({{name}}, {0}, %s, %(name)s,
        ${var}, <x/>), URLs and e-mail addresses among them, between words, glued to punctuation and at either end.
        Each is translated by the same model on the same device: with the built-in protection (the default), with
        `protect=False` (the model reads the spans as text), and with `protect=False` on the texts the model reads with
        protection (the spans taken out: "read", the same search without the alignment pass and the placement).
        Printed for each: the share of sentences whose every span is in the translation exactly as often as in the
        source ("exact": the guarantee), the share of spans found at all, and lines per second.

terms   A test set (--source, --reference) and a glossary (--glossary FILE, or one taken from its references: each
        reference aligned to its source under the model, one source word a target word as glossaries are placed, and
        a source word of 4+ letters that links to the same reference word in at least half of its 2+ occurrences gets
        that word as its term). The set is translated without and with the glossary, at each of --beams; for each:
        the share of source occurrences whose term is in the output as a whole word ("present"), how often the covered
        word's usual translation (the references' word for it) is left over ("leftover"), the share of terms at the
        word index, and in the form, the reference with the terms put in has them ("placed"), BLEU and chrF against
        that reference ("*") and against the plain reference, whether lines without terms came out the same, and
        lines per second. --swap gives each source word another entry's target word instead (a derangement): terms
        the model would never write (a fine-tuning's changed words), where only the glossary puts them there.

speed   What a glossary costs: lines/s of the plain search and with a glossary that gives each line of --source k terms
        (k = 1, 5, 20: words of the line, each given a word of the references as its target).

Usage:
  python benchmarks/glossary.py spans --model models/tiny-demo [--lines 1000] [--device cpu] [--threads 2] [--beam 4]
  python benchmarks/glossary.py terms --model models/tiny-demo --source test.en --reference test.de [--swap | --glossary FILE]
  python benchmarks/glossary.py speed --model models/tiny-demo --source test.en --reference test.de
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import re
import statistics
import time
from collections import Counter, defaultdict

import torch

from nmtcli import Translator
from nmtcli.documents.protect import Protected, Protection, find_spans
from nmtcli.inference.glossary import glossary_of, read_glossary
from nmtcli.inference.terms import choose
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


def word_alignments(engine, sources: list[str], targets: list[str]) -> list[list[tuple[int, int]]]:
    """(source word, target word) links of each pair, one a target word: the reading glossary terms are placed by
    (inference/terms.py's word_links over whitespace words), from one teacher-forced pass."""
    from nmtcli.inference.alignment import DEFAULT_HEADS
    from nmtcli.inference.terms import units_of, word_links

    source_ids, target_ids = engine.tokenizer.encode(sources), engine.tokenizer.encode_target(targets)
    forced = engine.forced(source_ids, target_ids, DEFAULT_HEADS, log_probs=False)
    out = []
    for source, target, s, t, f in zip(sources, targets, source_ids, target_ids, forced):
        if not s or not t:
            out.append([])
            continue
        links, _ = word_links(f.attention, units_of(source, engine.tokenizer.spans(source)), units_of(target, engine.tokenizer.target_spans(target)))
        out.append([(src, tgt) for tgt, src in enumerate(links)])
    return out


def lexicon(translator: Translator, sources: list[str], references: list[str]) -> dict[str, str]:
    """Source word -> reference word, from the references aligned to their sources under the model (see the module)."""
    links: dict[str, Counter] = defaultdict(Counter)
    for source, reference, pairs in zip(sources, references, word_alignments(translator.engine, sources, references)):
        words, targets = source.split(), reference.split()
        for i, j in pairs:
            if i >= len(words) or j >= len(targets):
                continue
            a, b = _word(words[i]).lower(), _word(targets[j])
            if len(a) >= 4 and a.isalpha() and len(b) >= 2:
                links[a][b] += 1
    terms = {}
    for word, counts in links.items():
        target, n = counts.most_common(1)[0]
        if sum(counts.values()) >= 2 and n >= sum(counts.values()) / 2:
            terms[word] = target
    return terms


def _count(word: str, text: str) -> int:
    """Whole-word occurrences of `word` in `text`."""
    return len(re.findall(rf"(?<!\w){re.escape(word)}(?!\w)", text))


def with_terms(reference: str, found: list, usual: dict[str, str]) -> str:
    """The reference with each found term's usual translation (the word the references use for it), or a form of it
    (the word and an ending of up to 3 letters), replaced by the term's alternative of that ending (inference/terms.py's
    choose), all at once (a term may be another's usual word)."""
    swaps = {usual[o.term.source.lower()]: o.term.targets for o in found if o.term.source.lower() in usual}
    if not swaps:
        return reference
    pattern = "|".join(re.escape(w) for w in sorted(swaps, key=len, reverse=True))
    return re.sub(rf"(?<!\w)({pattern})(\w{{0,3}})(?!\w)", lambda m: choose(swaps[m.group(1)], m.group()), reference)


def term_report(sources: list[str], references: list[str], outputs: list[str], glossary, usual: dict[str, str]) -> dict:
    """What a glossary did to a test set's translations: each source occurrence's term present as a whole word, the
    covered word's usual translation left over (more often than the reference with the terms has it), each term at the
    place (word index) the reference with the terms has it, and BLEU/chrF against that reference."""
    occurrences = present = leftover = placed = 0
    targets = []
    for source, reference, output in zip(sources, references, outputs):
        found = glossary.occurrences(source)
        target = with_terms(reference, found, usual)
        targets.append(target)
        out_words, ref_words = output.split(), target.split()
        for term in dict.fromkeys(o.term for o in found):
            n = sum(o.term is term for o in found)
            occurrences += n
            present += min(n, sum(_count(alt, output) for alt in term.targets))
            word = usual.get(term.source.lower())
            if word and _count(word, output) > _count(word, target):
                leftover += _count(word, output) - _count(word, target)
            at_out = [(k, _word(w)) for k, w in enumerate(out_words) if _word(w) in term.targets]
            at_ref = [(k, _word(w)) for k, w in enumerate(ref_words) if _word(w) in term.targets]
            placed += sum(a == b for a, b in zip(at_out, at_ref))  # the same place, in the same form
    bleu, chrf = score(outputs, targets, ["bleu", "chrf"])
    return {"occurrences": occurrences, "present": present, "leftover": leftover, "placed": placed, "bleu": bleu.score, "chrf": chrf.score}


def terms(args: argparse.Namespace) -> None:
    sources, references = _read(args.source)[: args.lines], _read(args.reference)[: args.lines]
    translator = Translator.load(args.model, device=args.device)
    engine = translator.engine
    usual = lexicon(translator, _read(args.source), _read(args.reference))  # source word -> the references' word for it
    if args.glossary:
        glossary = read_glossary(args.glossary)
        described = f"{args.glossary} ({len(glossary)} entries)"
    else:
        entries = dict(usual)
        if args.swap:  # each word gets the next entry's target: a derangement of the targets
            words = sorted(entries)
            entries = {w: entries[words[(i + 1) % len(words)]] for i, w in enumerate(words)}
        glossary = glossary_of(entries)
        described = f"{len(entries):,} entries from the references{' (swapped)' if args.swap else ''}"
    found = [glossary.occurrences(line) for line in sources]
    print(f"{len(sources):,} lines of {args.source}; glossary: {described}; {sum(map(bool, found)):,} lines hold "
          f"{sum(map(len, found)):,} occurrences; model {args.model}; {args.device}, {torch.get_num_threads()} threads")
    print(f"{'beam':>4} {'search':<12} {'present':>9} {'leftover':>9} {'placed':>8} {'BLEU*':>6} {'chrF*':>6} {'BLEU':>6} "
          f"{'same':>9} {'lines/s':>8} {'x plain':>8}")
    print("  (present: occurrences with their term as a whole word; leftover: the covered word's usual translation still there;")
    print("   placed: terms at the reference's word index, in its form; *: against the reference with the terms put in;")
    print("   same: lines without terms unchanged)")
    engine.translate_lines(sources[:20])  # warm up
    for beam in args.beams:
        plain_settings = dataclasses.replace(engine.settings, beam=beam)
        rows, plain, plain_rate = [], None, None
        methods = [("plain", None), ("glossary", glossary)]
        for _ in range(args.rounds):
            for name, given in methods:
                settings = dataclasses.replace(plain_settings, glossary=given)
                started = time.perf_counter()
                out = [hyps[0].text if hyps else "" for hyps in engine.translate_lines(sources, settings)]
                rows.append((name, out, len(sources) / (time.perf_counter() - started)))
        for name, _ in methods:
            out = next(o for n, o, _ in rows if n == name)
            rate = statistics.median(r for n, _, r in rows if n == name)
            if name == "plain":
                plain, plain_rate = out, rate
            report = term_report(sources, references, out, glossary, usual)
            bleu = score(out, references, ["bleu"])[0].score
            same = sum(a == b for a, b, f in zip(plain, out, found) if not f)
            n = max(1, report["occurrences"])
            print(f"{beam:>4} {name:<12} {report['present'] / n:>9.1%} {report['leftover']:>9} {report['placed'] / n:>8.1%} "
                  f"{report['bleu']:>6.1f} {report['chrf']:>6.1f} {bleu:>6.1f} {f'{same}/{sum(not f for f in found)}':>9} "
                  f"{rate:>8.1f} {rate / plain_rate:>8.2f}")


def speed(args: argparse.Namespace) -> None:
    """Lines/s of the plain search and with a glossary that gives every line k terms (k = 1, 5, 20): words of its own
    source (then others'), each given a word of the references as its target; medians of alternating rounds."""
    sources = _read(args.source)
    translator = Translator.load(args.model, device=args.device)
    engine = translator.engine
    rng = random.Random(args.seed)
    vocabulary = sorted({_word(w) for ref in _read(args.reference) for w in ref.split() if _word(w).isalpha()})
    print(f"{len(sources):,} lines of {args.source}; model {args.model}; {args.device}, {torch.get_num_threads()} threads, beam {args.beam}")
    print(f"{'terms a line':<13} {'lines/s':>9} {'vs plain':>9}   (medians of {args.rounds} rounds, alternating)")
    settings = dataclasses.replace(engine.settings, beam=args.beam)
    runs: dict[str, list[float]] = defaultdict(list)
    glossaries = {}
    for k in (1, 5, 20):
        entries: dict[str, str] = {}
        for line in sources:  # each line's first k words (a word of another line fills in)
            words = [w for w in dict.fromkeys(_word(w).lower() for w in line.split()) if w.isalpha()][:k]
            entries.update({w: rng.choice(vocabulary) for w in words if w not in entries})
        glossaries[str(k)] = glossary_of(entries)
    engine.translate_lines(sources[:20], settings)  # warm up
    for _ in range(args.rounds):
        for name, given in (("plain", None), *glossaries.items()):
            started = time.perf_counter()
            engine.translate_lines(sources, dataclasses.replace(settings, glossary=given))
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
            sub.add_argument("--glossary", help="a glossary file instead of one made from the references")
            sub.add_argument("--lines", type=int, default=None, help="the first N lines only")
            sub.add_argument("--beams", type=int, nargs="+", default=[1, 4])
            sub.add_argument("--rounds", type=int, default=1)
        if name == "speed":
            sub.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    {"spans": spans, "terms": terms, "speed": speed}[args.command](args)


if __name__ == "__main__":
    main()
