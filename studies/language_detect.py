"""Language detection for `source: "auto"`: accuracy, speed, memory and size of the candidates, in one run.

Text: tests/data/udhr.tsv, the Universal Declaration of Human Rights in 14 languages (OHCHR's translations
through the UDHR in Unicode project; scripts/build_udhr_sample.py): every paragraph as a long text
(833 paragraphs, median 23 words), and every run of 3 words from them as a short one (what a chat
message or a UI string is; 7,204 texts). Accuracy: the share of texts whose likeliest language is
right, choosing among all the detector's languages (75 for lingua, 140 for py3langid), or among the
14 of the data only ("the 14", a detector built for those: LibreTranslate restricts its detector to
the languages it has models for).

Then the choice a server makes: with models for en<->de, the English and German texts should be
detected as such, and the texts of the 12 other languages as neither (the server then refuses them
rather than translate French as if it were English). Three ways, from the same ranking over all
languages: only en and de (restricted), all languages, all with the prior of nmt serve
(nmtcli/documents/languages.py: each of the server's languages PRIOR times likelier a priori).

Each candidate runs in a fresh process, so that its memory is its own: RSS after loading (the model and
the library), and the peak after detecting everything. Size: the installed package's files (from its
RECORD). Speed: texts a second on one thread, the machine's load average printed beside it.

    python studies/language_detect.py                 # every candidate
    python studies/language_detect.py --only py3langid --per-language
    python studies/language_detect.py --words 1          # single words: what a greeting is
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from nmtcli.documents.languages import PRIOR

DATA = Path(__file__).parents[1] / "tests" / "data" / "udhr.tsv"
SHORT_WORDS = 3

# name -> the distribution that holds it
CANDIDATES = {"py3langid": "py3langid", "lingua high accuracy": "lingua-language-detector",
              "lingua low accuracy": "lingua-language-detector"}
SERVER = ("de", "en")  # the languages of a server with en->de and de->en models, for the table of choices


def read_texts(path: Path = DATA, words: int = SHORT_WORDS) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(language, text) pairs: the paragraphs (long), and runs of `words` words from them (short)."""
    long, short = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        language, _, text = line.split("\t")
        long.append((language, text))
        split = text.split()
        short += [(language, " ".join(split[i:i + words])) for i in range(0, len(split) - words + 1, words)]
    return long, short


def build(name: str, languages: list[str] | None):
    """A function text -> [(ISO 639-1 code, probability)] over the detector's languages (or `languages`), best first."""
    if name == "py3langid":
        from py3langid.langid import MODEL_FILE, LanguageIdentifier

        identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        if languages:
            identifier.set_languages(languages)
        return identifier.rank
    from lingua import IsoCode639_1, LanguageDetectorBuilder

    builder = (LanguageDetectorBuilder.from_iso_codes_639_1(*(getattr(IsoCode639_1, code.upper()) for code in languages)) if languages
               else LanguageDetectorBuilder.from_all_languages())
    if name == "lingua low accuracy":
        builder = builder.with_low_accuracy_mode()
    detector = builder.with_preloaded_language_models().build()
    return lambda text: [(v.language.iso_code_639_1.name.lower(), v.value) for v in detector.compute_language_confidence_values(text)] or [("und", 1.0)]


def choose(ranked: list[tuple[str, float]], known: set[str], how: str) -> str:
    """The language chosen from a ranking: the best of all ("all"), the best of `known` ("restricted"), or
    the best after each known language's probability is multiplied by PRIOR (what nmt serve does)."""
    if how == "restricted":
        return max((lp for lp in ranked if lp[0] in known), key=lambda lp: lp[1], default=("und", 0))[0]
    weight = PRIOR if how == "prior" else 1.0
    return max(ranked, key=lambda lp: lp[1] * (weight if lp[0] in known else 1.0))[0]


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(name: str, restricted: bool, words: int) -> dict:
    """In this process: load, then rank every text; accuracy, speed and memory, and (choosing among all the
    detector's languages) how each way of choosing does for a server of SERVER's languages."""
    long, short = read_texts(words=words)
    languages = sorted({language for language, _ in long}) if restricted else None
    before = rss_mb()
    started = time.perf_counter()
    rank = build(name, languages)
    rank("warm up")
    result = {"load_s": time.perf_counter() - started, "rss_loaded_mb": rss_mb() - before}
    known = set(SERVER)
    for kind, texts in (("long", long), ("short", short)):
        seconds, right, per_language = 0.0, 0, {}
        server = {(how, inside): [0, 0] for how in ("restricted", "all", "prior") for inside in (True, False)}
        for language, text in texts:
            started = time.perf_counter()
            ranked = rank(text)
            seconds += time.perf_counter() - started
            ok = ranked[0][0] == language
            right += ok
            per_language.setdefault(language, []).append(ok)
            if not restricted:  # right for a text in SERVER's languages; "refused" (not one of them) for any other
                for how in ("restricted", "all", "prior"):
                    chosen = choose(ranked, known, how)
                    cell = server[how, language in known]
                    cell[0] += chosen == language if language in known else chosen not in known
                    cell[1] += 1
        result[kind] = {"texts": len(texts), "accuracy": right / len(texts), "per_second": len(texts) / seconds,
                        "per_language": {language: sum(oks) / len(oks) for language, oks in sorted(per_language.items())},
                        "server": {f"{how} {'in' if inside else 'out'}": ok / n for (how, inside), (ok, n) in server.items() if n}}
    result["rss_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before
    return result


def installed_mb(distribution: str) -> float:
    files = importlib.metadata.distribution(distribution).files or []
    return sum(f.locate().stat().st_size for f in files if f.locate().exists()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=list(CANDIDATES), action="append", help="measure this candidate only (repeatable)")
    parser.add_argument("--per-language", action="store_true", help="also print each language's accuracy")
    parser.add_argument("--words", type=int, default=SHORT_WORDS, help=f"words in a short text (default {SHORT_WORDS})")
    parser.add_argument("--child", nargs=3, metavar=("NAME", "RESTRICTED", "WORDS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1] == "1", int(args.child[2]))))
        return
    long, short = read_texts(words=args.words)
    print(f"{len(long)} long texts (median {statistics.median(len(t.split()) for _, t in long):.0f} words), {len(short)} short texts "
          f"({args.words} words), {len({language for language, _ in long})} languages; load average {os.getloadavg()[0]:.2f}")
    header = f"{'detector':<22} {'languages':<10} {'long acc':>8} {'short acc':>9} {'long/s':>8} {'short/s':>8} {'load s':>7} {'RSS MB':>7} {'peak MB':>8} {'size MB':>8}"
    print(header)
    print("-" * len(header))
    rows = []
    for name in args.only or CANDIDATES:
        for restricted in (False, True):
            out = subprocess.run([sys.executable, __file__, "--child", name, "1" if restricted else "0", str(args.words)], check=False, capture_output=True, text=True,
                                 env={**os.environ, "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"})
            if out.returncode:
                print(f"{name}: failed\n{out.stderr}", file=sys.stderr)
                continue
            r = json.loads(out.stdout)
            rows.append((name, restricted, r))
            print(f"{name:<22} {'the 14' if restricted else 'all':<10} {r['long']['accuracy']:>8.1%} {r['short']['accuracy']:>9.1%} "
                  f"{r['long']['per_second']:>8.0f} {r['short']['per_second']:>8.0f} {r['load_s']:>7.2f} {r['rss_loaded_mb']:>7.0f} "
                  f"{r['rss_peak_mb']:>8.0f} {installed_mb(CANDIDATES[name]):>8.1f}", flush=True)
    print(f"\nA server of {' and '.join(SERVER)}: texts in its languages detected right / texts in the {len({l for l, _ in long}) - len(SERVER)} "
          f"others refused (detected as none of its languages), choosing among its languages only (LibreTranslate), among all the "
          f"detector's languages, or among all with a prior of {PRIOR:g} on its languages (nmt serve)")
    header = f"{'detector':<22} {'choice':<12} {'long in':>8} {'long out':>9} {'short in':>9} {'short out':>10}"
    print(header)
    print("-" * len(header))
    for name, restricted, r in rows:
        if restricted:
            continue
        for how in ("restricted", "all", "prior"):
            print(f"{name:<22} {how:<12} {r['long']['server'][how + ' in']:>8.1%} {r['long']['server'][how + ' out']:>9.1%} "
                  f"{r['short']['server'][how + ' in']:>9.1%} {r['short']['server'][how + ' out']:>10.1%}")
    if args.per_language:
        for name, restricted, r in rows:
            for kind in ("long", "short"):
                cells = " ".join(f"{language} {share:.0%}" for language, share in r[kind]["per_language"].items())
                print(f"{name} ({'the 14' if restricted else 'all'}), {kind}: {cells}")

if __name__ == "__main__":
    main()
