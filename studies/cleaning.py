"""Cleaning that measures itself (issue 53): what noise does to a model, and what `nmt prepare`'s filters take out.

Khayrallah & Koehn (2018, "On the Impact of Various Types of Noise on Neural Machine Translation") list the noise of
web-crawled corpora: misaligned pairs, the wrong language, untranslated copies of the source, short segments. This
study adds it to two clean corpora, so that each noisy pair is known:

- `demo`: the demo corpus shipped with nmt (4,228 English-German UI strings) as your own files;
- `generated`: 21,000 pairs of tests/corpus.py's rule task (a lexicon and a verb-final reordering), a quarter of them
  with a year in digits ("... in 1987" -> "... im jahr 1987 ..."), so that number mismatches occur as in real text.
  A tiny model learns it whatever the noise (BLEU 100.0 clean and noisy), so it cannot show what a filter is worth;
- `reversal`: 14,000 pairs of the reversal task (studies/data/reversal_task.py: random words of a 55-word lexicon,
  the order reversed), prepared with `--vocab-size 300` so that most German words are several pieces: a tiny model
  reaches about 80 BLEU, where the noise shows.

The noisy corpus is the clean one plus 30% noise, three kinds of 10% each (of the noisy total): `copy` (the target is
the source), `misaligned` (the target of another random pair), `fragment` (1-2 words of the source with 1-2 words of
the target, from a pair of 3 words or more). A fourth kind, `wrong_language` (one side a clause of the Universal
Declaration of Human Rights in French, Spanish, Italian, Dutch, Polish, Portuguese or Swedish, tests/data/udhr.tsv),
is counted by `filters` only.

    python studies/cleaning.py corpora --out /tmp/cleaning          # the corpora, with each pair's kind
    python studies/cleaning.py filters --dir /tmp/cleaning          # per filter: what it dropped of each kind, lines/s
    python studies/cleaning.py run --dir /tmp/cleaning --corpus demo --condition new   # prepare, train, average, score
    python studies/cleaning.py table --dir /tmp/cleaning            # the BLEU table of every run so far
    python studies/cleaning.py score --dir /tmp/cleaning --corpus generated --model M [--reverse-model R]
                                                                       # the score filter: what its worst 5/10/20% hold of each kind

Conditions of `run`: `clean` (the clean pairs, today's defaults), `clean-keep-misaligned` (the same without the
misaligned filter: what it costs on clean data), `none` (the noisy corpus, no text filter but
duplicates and the token filters), `old` (the noisy corpus, the filters of nmt before issue 53: the new ones off),
`new` (the noisy corpus, the defaults). Every run: tiny, 1,500 steps, seed 1, the last checkpoints averaged, BLEU on
the clean test split. Tens of minutes per training on a busy 2-core CPU; studies/results/cleaning-cpu-*.txt has
the numbers of docs/data.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from corpus import sentence_pair  # noqa: E402

from nmtcli.data.sources import BundledTsv  # noqa: E402

NOISE = 0.3  # of the noisy corpus
KINDS = ("copy", "misaligned", "fragment")
OTHER_LANGUAGES = ("fr", "es", "it", "nl", "pl", "pt", "sv")
YEAR = 0.25  # share of generated pairs with a year in digits
# The flags that switch off each filter issue 53 added (the `old` condition).
NEW_FILTERS_OFF = ["--keep-wrong-language", "--keep-copies", "--keep-number-mismatch", "--keep-url-mismatch",
                   "--keep-non-alphabetic", "--keep-long-words", "--keep-misaligned"]
TRAIN = ["--preset", "tiny", "--max-steps", "1500"]
CORPORA = ("demo", "generated", "reversal")
PREPARE = {"reversal": ["--vocab-size", "300"]}  # the corpus's own prepare flags, in every condition


def generated_pair(rng: random.Random) -> tuple[str, str]:
    source, target = sentence_pair(rng)
    if rng.random() < YEAR:
        year = str(rng.randint(1800, 2030))
        words = target.split()
        source, target = f"{source} in {year}", " ".join([*words[:-1], "im", "jahr", year, words[-1]])
    return source, target


def clean_corpus(name: str, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    if name == "demo":
        return {split: list(BundledTsv("demo/demo.en-de.tsv.xz", split, "en", "de")._lines()) for split in ("train", "valid", "test")}
    rng, seen, splits = random.Random(seed), set(), {}
    if name == "reversal":
        from data.reversal_task import pair as draw
    else:
        draw = generated_pair
    for split, size in (("train", 21_000 if name == "generated" else 14_000), ("valid", 500), ("test", 500)):
        pairs = []
        while len(pairs) < size:
            pair = draw(rng)
            if pair[0] not in seen:
                seen.add(pair[0])
                pairs.append(pair)
        splits[split] = pairs
    return splits


def other_language_clauses() -> list[str]:
    """Clauses of 3 to 12 words of the Declaration in languages neither side is written in."""
    clauses = []
    for line in (ROOT / "tests" / "data" / "udhr.tsv").read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            continue
        language, _, text = line.split("\t")
        if language in OTHER_LANGUAGES:
            for clause in text.replace(";", ",").replace(".", ",").split(","):
                if 3 <= len(clause.split()) <= 12:
                    clauses.append(clause.strip())
    return clauses


def span(words: list[str], rng: random.Random) -> str:
    n = rng.randint(1, 2)
    start = rng.randrange(len(words) - n + 1)
    return " ".join(words[start:start + n])


def add_noise(clean: list[tuple[str, str]], seed: int = 1) -> tuple[list[tuple[str, str]], list[str], list[tuple[str, str]]]:
    """(the noisy training pairs, each one's kind, wrong-language pairs): each kind is NOISE / 3 of the noisy total."""
    rng = random.Random(seed)
    k = round(len(clean) * NOISE / len(KINDS) / (1 - NOISE))
    noisy = [(s, t, "clean") for s, t in clean]
    for _ in range(k):
        s, _ = rng.choice(clean)
        noisy.append((s, s, "copy"))
    for _ in range(k):
        i, j = rng.sample(range(len(clean)), 2)
        noisy.append((clean[i][0], clean[j][1], "misaligned"))
    long = [(s, t) for s, t in clean if len(s.split()) >= 3 and len(t.split()) >= 2]
    for _ in range(k):
        s, t = rng.choice(long)
        noisy.append((span(s.split(), rng), span(t.split(), rng), "fragment"))
    rng.shuffle(noisy)
    clauses = other_language_clauses()
    wrong = []
    for n in range(k):
        s, t = rng.choice(clean)
        wrong.append((s, rng.choice(clauses)) if n % 2 else (rng.choice(clauses), t))
    return [(s, t) for s, t, _ in noisy], [kind for _, _, kind in noisy], wrong


def write_pairs(prefix: Path, pairs: list[tuple[str, str]]) -> None:
    prefix.parent.mkdir(parents=True, exist_ok=True)
    for i, lang in enumerate(("en", "de")):
        Path(f"{prefix}.{lang}").write_text("".join(p[i] + "\n" for p in pairs), encoding="utf-8")


def corpora(out: Path, names: tuple[str, ...] = CORPORA) -> None:
    for name in names:
        splits = clean_corpus(name)
        for split, pairs in splits.items():
            write_pairs(out / name / "clean" / split, pairs)
        noisy, kinds, wrong = add_noise(splits["train"])
        write_pairs(out / name / "noisy" / "train", noisy)
        (out / name / "noisy" / "train.kind").write_text("".join(k + "\n" for k in kinds))
        write_pairs(out / name / "noisy" / "wrong_language", wrong)
        counts = {kind: kinds.count(kind) for kind in ("clean", *KINDS)}
        print(f"{name}: {len(noisy):,} noisy training pairs ({counts}), {len(wrong):,} wrong-language pairs aside")


def read_pairs(prefix: Path) -> list[tuple[str, str]]:
    sides = [Path(f"{prefix}.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("en", "de")]
    return list(zip(*sides))


def filters(workdir: Path) -> None:
    """Each filter on its own over the noisy corpus and the wrong-language pairs: what it drops of each kind, its speed."""
    from nmtcli.data.cleaning import DEFAULTS, TextFilter

    for name in (c for c in CORPORA if (workdir / c).is_dir()):
        pairs = read_pairs(workdir / name / "noisy" / "train")
        kinds = (workdir / name / "noisy" / "train.kind").read_text().split()
        wrong = read_pairs(workdir / name / "noisy" / "wrong_language")
        pairs, kinds = pairs + wrong, kinds + ["wrong_language"] * len(wrong)
        totals = {kind: kinds.count(kind) for kind in ("clean", *KINDS, "wrong_language")}
        print(f"\n{name}: {len(pairs):,} pairs; " + ", ".join(f"{k} {n:,}" for k, n in totals.items()))
        print(f"| filter | {' | '.join(totals)} | pairs/s |")
        print("|---|" + "---|" * (len(totals) + 1))
        for filter_name in DEFAULTS:
            f = TextFilter("en", "de", **{name: name == filter_name for name in DEFAULTS})
            started = time.perf_counter()
            drops = [f.reason(s, t) is not None for s, t in pairs]
            rate = len(pairs) / (time.perf_counter() - started)
            cells = [f"{sum(d for d, k in zip(drops, kinds) if k == kind):,} ({100 * sum(d for d, k in zip(drops, kinds) if k == kind) / n:.1f}%)"
                     for kind, n in totals.items()]
            print(f"| {filter_name} | {' | '.join(cells)} | {rate:,.0f} |")
        # The misaligned filter judges a corpus, not a pair: over the pairs every text filter kept, as `nmt prepare` runs it.
        from nmtcli.data import lexical

        chain = TextFilter("en", "de")
        kept = [i for i, (s, t) in enumerate(pairs) if chain.reason(s, t) is None]
        started = time.perf_counter()
        judge = lexical.LexicalJudge.fit(lexical.sample((pairs[i] for i in kept), len(kept), 1), 1)
        drops = np.zeros(len(pairs), dtype=bool)
        drops[kept] = np.concatenate([d for _, d, _, _ in lexical.judge_chunks(judge, (pairs[i] for i in kept))])
        rate = len(kept) / (time.perf_counter() - started)
        cells = [f"{drops[[k == kind for k in kinds]].sum():,} of {sum(1 for i in kept if kinds[i] == kind):,} kept"
                 for kind in totals]
        print(f"| misaligned (after the others) | {' | '.join(cells)} | {rate:,.0f} |")


def run_nmt(*args: str, log: Path, code: Path) -> str:
    with open(log, "a") as f:
        f.write(f"$ nmt {' '.join(args)}\n")
        f.flush()
        done = subprocess.run([sys.executable, "-m", "nmtcli", *args], cwd=code, stdout=subprocess.PIPE, stderr=f, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": str(code)})
    return done.stdout


def run(workdir: Path, corpus: str, condition: str, code: Path = ROOT, seed: int = 1) -> dict:
    """Prepare, train, average, score one condition; appends the result to WORKDIR/results.jsonl. `code`: the nmt source
    tree to run (another checkout: that version's defaults, no cleaning flags); `seed`: the training's (the data's is
    always 1), a seed but the first trains into runs/CONDITION-seedN from the same data."""
    base = workdir / corpus
    train = base / ("clean" if condition.startswith("clean") else "noisy") / "train"
    flags = {"clean": [], "clean-keep-misaligned": ["--keep-misaligned"], "new": [], "old": NEW_FILTERS_OFF,
             "none": [*NEW_FILTERS_OFF, "--max-ratio", "1000"]}[condition]
    if code != ROOT and condition in ("old", "none"):
        flags = []  # a checkout from before issue 53: its defaults are the old filters, and it knows no --keep-* flag
    out = base / "runs" / (condition if seed == 1 else f"{condition}-seed{seed}")
    out.mkdir(parents=True, exist_ok=True)
    log = out / "log.txt"
    data = out / "data"
    nmt = functools.partial(run_nmt, log=log, code=code)
    minutes = None
    if not (out / "model").is_dir():  # a run that has its model is only scored again
        nmt("prepare", "--train", str(train), "--valid", str(base / "clean" / "valid"), "--test", str(base / "clean" / "test"),
            "-s", "en", "-t", "de", "-o", str(data), *PREPARE.get(corpus, []), *flags)
        started = time.time()
        nmt("train", "--data", str(data), *TRAIN, "--seed", str(seed), "-o", str(out / "run"))
        minutes = round((time.time() - started) / 60, 1)
        nmt("average", str(out / "run"), "-o", str(out / "model"))
    scores = json.loads(nmt("score", "-m", str(out / "model"), "--json"))["scores"]
    manifest = json.loads((data / "manifest.json").read_text())
    bleu = next(x["score"] for x in scores if x["name"] == "BLEU")
    result = {"corpus": corpus, "condition": condition, "seed": seed, "code": str(code), "flags": flags, "bleu": bleu, "train_minutes": minutes,
              "input_pairs": manifest["splits"]["train"]["input_pairs"], "pairs": manifest["splits"]["train"]["pairs"],
              "dropped": manifest["splits"]["train"]["dropped"]}
    with open(workdir / "results.jsonl", "a") as f:
        f.write(json.dumps(result) + "\n")
    print(json.dumps(result))
    return result


def score(workdir: Path, corpus: str, model: Path, reverse: Path | None, percents=(5, 10, 20)) -> None:
    """The score filter (nmtcli/data/score_filter.py) over the noisy corpus and the wrong-language pairs: of each kind,
    the share among the worst 5, 10 and 20% by the model's per-token cross-entropy (with a reverse model: by each
    model's alone and by the dual conditional cross-entropy), and the pairs scored a second."""
    from nmtcli.data.score_filter import costs, dropped_count, ranked, read_log_probs
    from nmtcli.pair_scores import score_file

    base = workdir / corpus / "noisy"
    pairs = read_pairs(base / "train") + read_pairs(base / "wrong_language")
    kinds = (base / "train.kind").read_text().split() + ["wrong_language"] * len(read_pairs(base / "wrong_language"))
    out = workdir / corpus / "scores"
    write_pairs(out / "all", pairs)
    values = {}
    for name, path, src, tgt, languages in (("forward", model, "en", "de", ("en", "de")), ("reverse", reverse, "de", "en", ("de", "en"))):
        if path is None:
            continue
        started = time.perf_counter()
        scores = out / f"{name}-{path.name}.txt"
        fresh = not scores.exists()
        score_file(path, Path(f"{out / 'all'}.{src}"), Path(f"{out / 'all'}.{tgt}"), scores, languages, {"model": str(path)}, "cpu")
        seconds = time.perf_counter() - started
        values[name] = read_log_probs(scores, len(pairs))
        print(f"{corpus}: {name} {path}: {len(pairs):,} pairs" + (f" scored in {seconds:.1f} s ({len(pairs) / seconds:,.0f} pairs/s)" if fresh else ""))
    rankings = {name: costs(v if name == "forward" else None, v if name == "reverse" else None) for name, v in values.items()}
    if len(values) == 2:
        rankings["dual"] = costs(values["forward"], values["reverse"])
    totals = {kind: kinds.count(kind) for kind in ("clean", *KINDS, "wrong_language")}
    print(f"\n{corpus}: {len(pairs):,} pairs; " + ", ".join(f"{k} {n:,}" for k, n in totals.items()))
    print(f"| cost | worst | {' | '.join(totals)} |")
    print("|---|---|" + "---|" * len(totals))
    for name, cost in rankings.items():
        order = ranked(cost)
        for percent in percents:
            dropped = [kinds[i] for i in order[:dropped_count(len(pairs), percent)].tolist()]
            cells = [f"{dropped.count(kind):,} ({100 * dropped.count(kind) / n:.1f}%)" for kind, n in totals.items()]
            print(f"| {name} | {percent}% | {' | '.join(cells)} |")


def table(workdir: Path) -> None:
    results = [json.loads(line) for line in (workdir / "results.jsonl").read_text().splitlines()]
    print("| corpus | condition | seed | training pairs kept of | BLEU | dropped |")
    print("|---|---|---|---|---|---|")
    for r in results:
        dropped = ", ".join(f"{k} {v:,}" for k, v in r["dropped"].items())
        print(f"| {r['corpus']} | {r['condition']} | {r.get('seed', 1)} | {r['pairs']:,} of {r['input_pairs']:,} | {r['bleu']:.1f} | {dropped} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("corpora")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--corpus", choices=CORPORA, action="append", help="one corpus (repeatable; default: all)")
    commands.add_parser("filters").add_argument("--dir", type=Path, required=True)
    r = commands.add_parser("run")
    r.add_argument("--dir", type=Path, required=True)
    r.add_argument("--corpus", choices=CORPORA, required=True)
    r.add_argument("--condition", choices=("clean", "clean-keep-misaligned", "none", "old", "new"), required=True)
    r.add_argument("--code", type=Path, default=ROOT, help="the nmt source tree to run (default: this one)")
    r.add_argument("--seed", type=int, default=1, help="the training's seed (default 1)")
    commands.add_parser("table").add_argument("--dir", type=Path, required=True)
    sc = commands.add_parser("score")
    sc.add_argument("--dir", type=Path, required=True)
    sc.add_argument("--corpus", choices=CORPORA, required=True)
    sc.add_argument("--model", type=Path, required=True, help="an en->de model dir")
    sc.add_argument("--reverse-model", type=Path, help="a de->en model dir")
    args = parser.parse_args()
    if args.command == "corpora":
        corpora(args.out, tuple(args.corpus or CORPORA))
    elif args.command == "filters":
        filters(args.dir)
    elif args.command == "run":
        run(args.dir, args.corpus, args.condition, args.code.resolve(), args.seed)
    elif args.command == "score":
        score(args.dir, args.corpus, args.model, args.reverse_model)
    else:
        table(args.dir)


if __name__ == "__main__":
    main()
