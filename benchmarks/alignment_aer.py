"""Alignment error rate (AER) of `nmt translate --alignment` for every layer, head and average of the
encoder-decoder attention, against hand-made gold alignments: which attention DEFAULT_HEADS reads.

Gold: benchmarks/data/demo_alignment_gold.tsv, 54 short pairs (199 links) of the demo corpus's test
split (nmtcli/data/demo: software messages, English -> German), aligned by hand over whitespace words
(punctuation stays with its word), sure links only: AER = 1 - 2 |A & S| / (|A| + |S|) (Och & Ney 2003
with P = S). The pairs are not in the training split.

A second gold set with no human in it: benchmarks/data/rule_alignment_gold.tsv, 60 pairs of the
synthetic corpus of tests/corpus.py (adjectives follow their noun, the verb goes last), whose true
alignment is known by construction, for the test suite's model of that corpus (a model that has learned
its task: the attention of a weak model and of a good one prefer different layers).

Each choice aligns the gold targets given to the model (forced decoding: what `--forced-decoding
--alignment words` prints), at offset 0 (row t: the position that predicts target token t, as
fairseq reads it) and offset 1 (row t + 1: the position that reads token t). A peer in the same run:
the monotone diagonal (target word j -> source word round(j * S / T)), which needs no model.

Usage:
  nmt prepare demo && nmt train --preset tiny --max-steps 1000 && nmt average   # a model of the demo corpus
  python benchmarks/alignment_aer.py -m models/tiny-demo
  python benchmarks/alignment_aer.py -m MODEL_OF_TESTS_CORPUS --gold benchmarks/data/rule_alignment_gold.tsv
    (the `trained_model` of tests/conftest.py: nmt prepare + nmt train --preset tiny --max-steps 300 on tests/corpus.py's pairs)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from nmtcli.inference.alignment import DEFAULT_HEADS, pharaoh, piece_links
from nmtcli.inference.forced import AttentionHeads, force_ids
from nmtcli.inference.tokenizer import load_tokenizer
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


def diagonal(source: str, target: str) -> set[tuple[int, int]]:
    s, t = len(source.split()), len(target.split())
    return {(min(s - 1, round(j * s / t)), j) for j in range(t)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", "--model", required=True, type=Path, help="a model dir trained on the demo corpus (en -> de)")
    parser.add_argument("--gold", type=Path, default=GOLD)
    args = parser.parse_args()
    rows = read_gold(args.gold)
    model, values = load_model(args.model, torch.device("cpu"))
    tokenizer = load_tokenizer(args.model, values)
    pieces = tokenizer.pieces()
    sources = tokenizer.encode([s for s, _, _ in rows])
    targets = tokenizer.encode_target([t for _, t, _ in rows])
    gold = [g for _, _, g in rows]
    cfg = model.config
    choices = [AttentionHeads(None, None)] + [AttentionHeads(layer, None) for layer in range(cfg.layers)]
    choices += [AttentionHeads(layer, head) for layer in range(cfg.layers) for head in range(cfg.heads)]

    def name(c: AttentionHeads) -> str:
        layer = "all layers" if c.layer is None else f"layer {c.layer}"
        return f"{layer}, {'heads averaged' if c.head is None else f'head {c.head}'}"

    results = []
    for choice in choices:
        forced = force_ids(model, sources, targets, 4096, torch.device("cpu"), heads=choice)
        for offset in (0, 1):
            found = [links(pharaoh(piece_links(f.attention, offset), [pieces[i] for i in s], [pieces[i] for i in t]))
                     for f, s, t in zip(forced, sources, targets)]
            results.append((name(choice) + (" (the default)" if choice == DEFAULT_HEADS else ""), offset, aer(found, gold)))
    log_prob = sum(f.log_prob for f in force_ids(model, sources, targets, 4096, torch.device("cpu")))
    tokens = sum(len(t) + 1 for t in targets)
    print(f"# {len(rows)} pairs, {sum(map(len, gold))} gold links; model {args.model} ({cfg.layers} layers x {cfg.heads} heads), "
          f"gold targets' perplexity {torch.tensor(-log_prob / tokens).exp():.1f}")
    print("| attention | offset 0 AER | offset 1 AER |")
    print("|---|---|---|")
    by_name: dict[str, dict[int, float]] = {}
    for n, offset, value in results:
        by_name.setdefault(n, {})[offset] = value
    best = min(v for n, o, v in results)
    for n, values in by_name.items():
        cells = [f"**{values[o]:.1%}**" if values[o] == best else f"{values[o]:.1%}" for o in (0, 1)]
        print(f"| {n} | {cells[0]} | {cells[1]} |")
    print(f"| diagonal (no model) | {aer([diagonal(s, t) for s, t, _ in rows], gold):.1%} | - |")


if __name__ == "__main__":
    main()
