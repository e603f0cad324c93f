"""Alignment error rate (AER) of `nmt translate --alignment` for every layer, head and average of the
encoder-decoder attention, against hand-made gold alignments: which attention DEFAULT_HEADS reads.

Gold: studies/data/demo_alignment_gold.tsv, 54 short pairs (199 links) of the demo corpus's test
split (nmtcli/data/demo: software messages, English -> German), aligned by hand over whitespace words
(punctuation stays with its word), sure links only: AER = 1 - 2 |A & S| / (|A| + |S|) (Och & Ney 2003
with P = S). The pairs are not in the training split.

A second gold set with no human in it: studies/data/rule_alignment_gold.tsv, 60 pairs of the
synthetic corpus of tests/corpus.py (adjectives follow their noun, the verb goes last), whose true
alignment is known by construction, for the test suite's model of that corpus (a model that has learned
its task: the attention of a weak model and of a good one prefer different layers).

Each choice aligns the gold targets given to the model (forced decoding: what `--forced-decoding
--alignment words` prints), at offset 0 (row t: the position that predicts target token t, as
fairseq reads it) and offset 1 (row t + 1: the position that reads token t), each column first divided by
its sum (piece_links, the reading `--alignment` uses), and at offset 0 with the plain argmax of each row
(the reading before). A peer in the same run: the monotone diagonal (target word j -> source word
round(j * S / T)), which needs no model.

With --readings, the choices are instead ways of reading links off the default attention (all layers and
heads, offset 0), each over every MODEL GOLD pair given, in one table: AER, and where inline tags land when they
are placed by that reading (the HTML and document paths' placement, documents/placement.py): each gold pair's
source is written as HTML with `<b>` around one word, every word in turn, the gold target is aligned by the
reading (each source word it leaves unlinked then linked to the target word attending to it most, as COVERING
does) and rendered; a tag is right where it wraps exactly the target words from the first to the last of its
word's gold links. Reported over all words and over each sentence's last word (where a weak model's stray
links made a tag swallow the sentence). The readings:

  argmax        each target piece -> its most attended source piece (`--alignment words` before wave 3)
  column        the same after dividing each source piece's column by its sum over the target pieces (a source
                piece that draws attention from every target position counts less): inference/alignment.py
                piece_links, what `--alignment pieces` reads (and `--alignment words` did before issue 51)
  sinkhorn      rows and columns normalised in turn, 5 times (Sinkhorn-Knopp), then the rows' argmax
  backward      each source piece -> the target piece that attends to it most (the columns' argmax)
  intersection  the links argmax and backward agree on (COVERING's before issue 51)
  grow-diag-final-and
                symmetrisation of argmax and backward as Moses does it (Koehn et al. 2003): from the
                intersection, grow into neighbouring links of the union whose source or target piece is
                unlinked, then any union link with both sides unlinked (inference/alignment.py grow_diag_final_and)
  column+gdfa   grow-diag-final-and over the column-normalised matrix
  word-column   over words: each target word's pieces' attention (averaged) on each source word's pieces (summed),
                each column divided by its sum, the rows' argmax (what glossary terms are placed by)
  word-balanced-intersection
                over words: that matrix balanced (Sinkhorn, 5 rounds), the links both directions agree on
                (COVERING's, before each source word left unlinked is linked)
  word-balanced-gdfa
                the balanced word matrix, grow-diag-final-and: what `--alignment words` reads

Usage:
  nmt prepare demo && nmt train --preset tiny --max-steps 1000 && nmt average   # a model of the demo corpus
  python studies/alignment_aer.py -m models/tiny-demo
  python studies/alignment_aer.py -m MODEL_OF_TESTS_CORPUS --gold studies/data/rule_alignment_gold.tsv
    (the `trained_model` of tests/conftest.py: nmt prepare + nmt train --preset tiny --max-steps 300 on tests/corpus.py's pairs)
  python studies/alignment_aer.py --readings --pair models/tiny-demo studies/data/demo_alignment_gold.tsv \
      --pair MODEL_OF_TESTS_CORPUS studies/data/rule_alignment_gold.tsv   # one table, a column group per pair
"""

from __future__ import annotations

import argparse
import html
import re
from pathlib import Path

import torch
from torch import Tensor

from nmtcli.documents.markup import parse
from nmtcli.inference.alignment import (DEFAULT_HEADS, agreed, balanced, grow_diag_final_and, pharaoh, piece_links, with_every_source_word,
                                        word_matrix, word_of_piece)
from nmtcli.inference.forced import AttentionHeads, force_ids
from nmtcli.inference.tokenizer import load_tokenizer
from nmtcli.inference.terms import word_links
from nmtcli.model.checkpoint import load_model

GOLD = Path(__file__).parent / "data" / "demo_alignment_gold.tsv"


def read_gold(path: Path) -> list[tuple[str, str, set[tuple[int, int]]]]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        _, source, target, links = line.split("\t")
        rows.append((source, target, {tuple(map(int, link.split("-"))) for link in links.split()}))
    return rows


def aer(found: list[set], gold: list[set]) -> float:
    """1 - 2|A & S| / (|A| + |S|): Och & Ney's AER with the possible links equal to the sure ones."""
    both = sum(len(a & s) for a, s in zip(found, gold))
    return 1 - 2 * both / (sum(map(len, found)) + sum(map(len, gold)))


def links(text: str) -> set[tuple[int, int]]:
    return {tuple(map(int, link.split("-"))) for link in text.split()}


def perplexity(model, sources: list[list[int]], targets: list[list[int]]) -> float:
    log_prob = sum(f.log_prob for f in force_ids(model, sources, targets, 4096, torch.device("cpu")))
    return float(torch.tensor(-log_prob / sum(len(t) + 1 for t in targets)).exp())


def diagonal(source: str, target: str) -> set[tuple[int, int]]:
    s, t = len(source.split()), len(target.split())
    return {(min(s - 1, round(j * s / t)), j) for j in range(t)}


# --- readings: (target pieces + 1, source pieces + 1) attention -> {(source piece, target piece)} -------------------


def _core(attention: Tensor) -> Tensor:
    """Offset 0, EOS's row and column left out."""
    return attention[: attention.size(0) - 1, : attention.size(1) - 1]


def _rows(a: Tensor) -> set[tuple[int, int]]:
    return {(s, t) for t, s in enumerate(a.argmax(dim=1).tolist())}


def _columns(a: Tensor) -> set[tuple[int, int]]:
    return {(s, t) for s, t in enumerate(a.argmax(dim=0).tolist())}


def _column_normalised(a: Tensor) -> Tensor:
    return a / a.sum(dim=0, keepdim=True)


READINGS = {
    "argmax": lambda att: _rows(_core(att)),
    "column": lambda att: set(piece_links(att)),
    "sinkhorn": lambda att: _rows(balanced(_core(att))),
    "backward": lambda att: _columns(_core(att)),
    "intersection": lambda att: agreed(_core(att)),
    "grow-diag-final-and": lambda att: grow_diag_final_and(_core(att)),
    "column+gdfa": lambda att: grow_diag_final_and(_column_normalised(_core(att))),
}
# Readings made over words, not pieces: (attention, source word of each piece, target word of each piece) -> word links.
WORD_READINGS = {
    # one link a target word: its pieces' attention (averaged) on each source word's pieces (summed), each source word's
    # column divided by its sum, argmax (inference/terms.py word_links: what glossary terms are placed by)
    "word-column": lambda att, sw, tw: {(s, t) for t, s in enumerate(word_links(att, sw, tw)[0])},
    # the word matrix balanced (Sinkhorn), the two directions agreed on: COVERING's links before each source word is covered
    "word-balanced-intersection": lambda att, sw, tw: agreed(balanced(word_matrix(_core(att), sw, tw))),
    # the same matrix, grow-diag-final-and: `--alignment words` (inference/alignment.py word_alignment)
    "word-balanced-gdfa": lambda att, sw, tw: grow_diag_final_and(balanced(word_matrix(_core(att), sw, tw))),
}
NOTES = {"column": "`--alignment pieces`; words before", "intersection": "COVERING before", "word-balanced-intersection": "COVERING now",
         "word-balanced-gdfa": "`--alignment words` now",
         "word-column": "glossary terms' placement"}


def placed(source: str, target: str, word: int, alignment: str) -> set[int] | None:
    """The target words the HTML path wraps in `<b>` put around source word `word` (None: the source is not one sentence)."""
    words = source.split()
    document = parse("<p>" + " ".join(f"<b>{html.escape(w)}</b>" if k == word else html.escape(w) for k, w in enumerate(words)) + "</p>", "en")
    if len(document.sentences) != 1:
        return None
    out = document.render([(target, alignment)])
    match = re.search(r"<b>(.*?)</b>", out)
    before = len(re.sub(r"<[^>]*>", " ", out[: match.start()]).split())
    return set(range(before, before + len(re.sub(r"<[^>]*>", " ", match.group(1)).split())))


def readings_table(pairs: list[tuple[Path, Path]]) -> None:
    """One table: a row per reading, for each (model, gold) pair its AER and where tags land (module docstring)."""
    cells: dict[str, list[str]] = {name: [] for name in (*READINGS, *WORD_READINGS)}
    heads = []
    for model_dir, gold_path in pairs:
        rows = read_gold(gold_path)
        model, values = load_model(model_dir, torch.device("cpu"))
        tokenizer = load_tokenizer(model_dir, values)
        pieces = tokenizer.pieces()
        sources = tokenizer.encode([s for s, _, _ in rows])
        targets = tokenizer.encode_target([t for _, t, _ in rows])
        forced = force_ids(model, sources, targets, 4096, torch.device("cpu"), heads=DEFAULT_HEADS)
        heads.append(chr(ord("A") + len(heads)))
        for name, reading in (*READINGS.items(), *WORD_READINGS.items()):
            found, right, words, right_last, lasts, skipped = [], 0, 0, 0, 0, 0
            for f, s, t, (source, target, gold) in zip(forced, sources, targets, rows):
                src_word, tgt_word = word_of_piece([pieces[i] for i in s]), word_of_piece([pieces[i] for i in t])
                if name in WORD_READINGS:
                    linked = reading(f.attention, src_word, tgt_word)
                else:
                    linked = {(src_word[a], tgt_word[b]) for a, b in reading(f.attention)}
                found.append(linked)
                alignment = " ".join(f"{a}-{b}" for a, b in with_every_source_word(linked, f.attention, src_word, tgt_word))
                last = len(source.split()) - 1
                for word in range(last + 1):
                    want = [j for i, j in gold if i == word]
                    if not want:
                        continue
                    got = placed(source, target, word, alignment)
                    if got is None:
                        skipped += 1
                        continue
                    ok = got == set(range(min(want), max(want) + 1))
                    words, right = words + 1, right + ok
                    if word == last:
                        lasts, right_last = lasts + 1, right_last + ok
            cells[name] += [f"{aer(found, [g for *_, g in rows]):.1%}", f"{right / words:.1%}", f"{right_last / lasts:.1%}"]
        print(f"# {heads[-1]}: {model_dir} on {gold_path.name} ({len(rows)} pairs, {sum(len(g) for *_, g in rows)} links, "
              f"gold targets' perplexity {perplexity(model, sources, targets):.1f}); tags on {words} words, {lasts} of them "
              f"last{f', {skipped} left out (their source is not one sentence)' if skipped else ''}")
    print("| reading | " + " | ".join(f"{h}: AER | {h}: tags right | {h}: on the last word" for h in heads) + " |")
    print("|---" * (1 + 3 * len(pairs)) + "|")
    for name, row in cells.items():
        print(f"| {name}{' (' + NOTES[name] + ')' if name in NOTES else ''} | " + " | ".join(row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", type=Path, help="a model dir trained on the demo corpus (en -> de)")
    parser.add_argument("--gold", type=Path, default=GOLD)
    parser.add_argument("--readings", action="store_true", help="compare ways of reading links off the default attention "
                        "(AER and where inline tags land) over each --pair, in one table")
    parser.add_argument("--pair", nargs=2, type=Path, action="append", metavar=("MODEL", "GOLD"), default=[],
                        help="with --readings: a model and its gold set (repeat for more columns)")
    args = parser.parse_args()
    if args.readings:
        readings_table(args.pair or [(args.model, args.gold)])
        return
    if args.model is None:
        parser.error("-m/--model is required")
    rows = read_gold(args.gold)
    model, values = load_model(args.model, torch.device("cpu"))
    tokenizer = load_tokenizer(args.model, values)
    pieces = tokenizer.pieces()
    sources = tokenizer.encode([s for s, _, _ in rows])
    targets = tokenizer.encode_target([t for _, t, _ in rows])
    gold = [g for _, _, g in rows]
    cfg = model.config
    choices = [AttentionHeads(None, None)] + [AttentionHeads(layer, None) for layer in range(cfg.decoder_layers)]
    choices += [AttentionHeads(layer, head) for layer in range(cfg.decoder_layers) for head in range(cfg.heads)]

    def name(c: AttentionHeads) -> str:
        layer = "all layers" if c.layer is None else f"layer {c.layer}"
        return f"{layer}, {'heads averaged' if c.head is None else f'head {c.head}'}"

    results = []  # (name, reading, AER); readings: piece_links (column-normalised) at offsets 0 and 1, plain argmax at 0
    for choice in choices:
        forced = force_ids(model, sources, targets, 4096, torch.device("cpu"), heads=choice)
        for reading, read in (("column 0", lambda a: piece_links(a, 0)), ("column 1", lambda a: piece_links(a, 1)),
                              ("argmax 0", lambda a: sorted(_rows(_core(a))))):
            found = [links(pharaoh(read(f.attention), [pieces[i] for i in s], [pieces[i] for i in t]))
                     for f, s, t in zip(forced, sources, targets)]
            results.append((name(choice) + (" (the default)" if choice == DEFAULT_HEADS else ""), reading, aer(found, gold)))
    print(f"# {len(rows)} pairs, {sum(map(len, gold))} gold links; model {args.model} ({cfg.decoder_layers} decoder layers x {cfg.heads} heads), "
          f"gold targets' perplexity {perplexity(model, sources, targets):.1f}")
    print("| attention | AER, offset 0 (the default) | offset 1 | plain argmax, offset 0 (before) |")
    print("|---|---|---|---|")
    by_name: dict[str, dict[str, float]] = {}
    for n, reading, value in results:
        by_name.setdefault(n, {})[reading] = value
    best = min(v for n, o, v in results)
    for n, values in by_name.items():
        cells = [f"**{values[o]:.1%}**" if values[o] == best else f"{values[o]:.1%}" for o in ("column 0", "column 1", "argmax 0")]
        print(f"| {n} | {' | '.join(cells)} |")
    print(f"| diagonal (no model) | {aer([diagonal(s, t) for s, t, _ in rows], gold):.1%} | - | - |")


if __name__ == "__main__":
    main()
