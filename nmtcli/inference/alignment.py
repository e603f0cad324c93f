"""Word alignments from the encoder-decoder attention of a teacher-forced pass (inference/forced.py).

Each target token is aligned to the source token its decoder position attends to most (the source's
EOS left out), as fairseq's `--print-alignment` and Marian's `--alignment hard` do, but with each source
token's attention first divided by the sum of what every target position gives it (its column's sum): a
source token that draws attention from every position counts less, and one most positions ignore counts
more where one attends to it. That lowers AER at every stage of training measured (the demo model at 200
steps 69% -> 62%; the rule task's at 60 steps 57% -> 46%, at 300 steps 5.4% -> 2.2%; docs/translating.md).
The target's EOS is not aligned. Links are written in Pharaoh format, "i-j" for source position i and
target position j, over sentencepiece pieces or over words: a word is a piece that starts with "▁" and
the pieces that follow it up to the next such piece, which are the whitespace-separated words of the
text. Two words are linked where any of their pieces are (the usual rule for subword alignments).

COVERING, what the HTML and document paths ask for (documents/placement.py places inline tags by it), reads
both directions of the same matrix: a piece pair is linked where they agree, the target piece attending to the
source piece most (its row's plain argmax) and the source piece attended to by that target piece most (its
column's argmax): the intersection that symmetrised alignments start from (Och & Ney 2003; Koehn et al. 2003's
grow-diag grows it). Each source word that leaves unlinked is then linked to the target word that attends to it
most (the target piece whose row puts the most attention on the word's pieces, EOS's row left out), so that an
inline tag around every word has a translation to wrap. Why not the links of `--alignment words`: a
weakly trained model's rows often put their most attention on a word far from their own (a stray link), and a
tag wraps every target word linked to its words, from the first to the last, so one stray link stretched a tag
on a sentence's last word over most of the sentence. Where the two directions agree, a source word has one
target word (unless its pieces agree on more), and the tags land on their words more often at every stage of
training measured (benchmarks/alignment_aer.py --readings; docs/translating.md, "Where inline tags land").
`--alignment` never reads it: by AER, the measure of a whole alignment, the rows' reading is better.

Which attention: DEFAULT_HEADS, chosen by alignment error rate on a hand-aligned sample of the demo
corpus and on a rule task (benchmarks/alignment_aer.py; the numbers are in docs/translating.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from nmtcli.inference.forced import AttentionHeads
from nmtcli.inference.tokenizer import WORD_BOUNDARY

UNITS = ("words", "pieces")
# Words, every source word linked (module docstring): asked for by the HTML path, not a choice of --alignment.
COVERING = "covering"

# The average of every layer's heads: the lowest AER of the choices measured where the model has learned
# its task, within a few links of the best on a weak one (docs/translating.md).
DEFAULT_HEADS = AttentionHeads(layer=None, head=None)
# Row t of the attention is the position that predicts target token t (OFFSET 0), as fairseq reads it.
DEFAULT_OFFSET = 0


def piece_links(attention: Tensor, offset: int = DEFAULT_OFFSET) -> list[tuple[int, int]]:
    """(source piece, target piece) for each target piece: its most attended source piece, each source piece's
    attention counted as a share of what all target pieces give it (its column divided by the column's sum).

    attention: (target pieces + 1, source pieces + 1) from `Forced.attention`, the last row and column
    being EOS's. offset 1 reads row t + 1 for token t: the position whose input is token t.
    """
    target, source = attention.size(0) - 1, attention.size(1) - 1
    if target == 0 or source == 0:
        return []
    core = attention[offset : offset + target, :source].float()
    best = (core / core.sum(dim=0, keepdim=True).clamp_min(1e-30)).argmax(dim=-1).tolist()
    return [(s, t) for t, s in enumerate(best)]


def word_of_piece(pieces: Sequence[str]) -> list[int]:
    """The index of the word each piece belongs to. A piece starting with "▁" starts a word (a lone "▁"
    starts the word its next pieces spell: sentencepiece's byte fallback and punctuation split so)."""
    words, index = -1, []
    for piece in pieces:
        if piece.startswith(WORD_BOUNDARY) or words < 0:
            words += 1
        index.append(words)
    return index


def pharaoh(links: list[tuple[int, int]], source_pieces: Sequence[str], target_pieces: Sequence[str], unit: str = "words") -> str:
    """Links over pieces as Pharaoh "i-j ..." over `unit` (words or pieces), sorted, each once."""
    if unit == "words":
        src_word, tgt_word = word_of_piece(source_pieces), word_of_piece(target_pieces)
        links = [(src_word[s], tgt_word[t]) for s, t in links]
    return " ".join(f"{s}-{t}" for s, t in sorted(set(links)))


def agreed_links(attention: Tensor, offset: int = DEFAULT_OFFSET) -> list[tuple[int, int]]:
    """(source piece, target piece) pairs both directions agree on: the target piece attends to the source piece
    most of the source pieces (its row's plain argmax), and the source piece is attended to by the target piece most of the
    target pieces (EOS's row and column left out on both sides). At most one link a piece on each side."""
    target, source = attention.size(0) - 1, attention.size(1) - 1
    if target == 0 or source == 0:
        return []
    core = attention[offset : offset + target, :source]
    most_attended, most_attending = core.argmax(dim=1).tolist(), core.argmax(dim=0).tolist()
    return [(s, t) for t, s in enumerate(most_attended) if most_attending[s] == t]


def covering_links(attention: Tensor, source_pieces: Sequence[str], target_pieces: Sequence[str],
                   offset: int = DEFAULT_OFFSET) -> list[tuple[int, int]]:
    """(source word, target word) links: those of the words' agreed_links, plus, for each source word none of them
    reaches, (the word, the target word whose piece attends to it most: the largest sum of a row's attention over
    the word's pieces, EOS's row and column left out)."""
    src_word, tgt_word = word_of_piece(source_pieces), word_of_piece(target_pieces)
    links = {(src_word[s], tgt_word[t]) for s, t in agreed_links(attention, offset)}
    return with_every_source_word(links, attention, src_word, tgt_word, offset)


def with_every_source_word(links: set[tuple[int, int]], attention: Tensor, src_word: Sequence[int], tgt_word: Sequence[int],
                           offset: int = DEFAULT_OFFSET) -> list[tuple[int, int]]:
    """Word links (sorted) with each source word that none of `links` reaches linked to the target word that attends
    to it most (src_word, tgt_word: word_of_piece of each side's pieces)."""
    target, source = attention.size(0) - 1, attention.size(1) - 1
    if target == 0 or source == 0:
        return sorted(links)
    words = src_word[-1] + 1
    # (target pieces, source words): what each target piece attends to each source word
    by_word = attention.new_zeros(target, words).index_add_(1, torch.tensor(src_word, device=attention.device), attention[offset : offset + target, :source])
    best = by_word.argmax(dim=0).tolist()
    linked = {s for s, _ in links}
    return sorted(links | {(w, tgt_word[best[w]]) for w in range(words) if w not in linked})


def alignment_text(attention: Tensor, source_pieces: Sequence[str], target_pieces: Sequence[str], unit: str) -> str:
    """A pair's alignment as Pharaoh "i-j ...": over `unit` (UNITS), or COVERING's links over words."""
    if unit == COVERING:
        return " ".join(f"{s}-{t}" for s, t in covering_links(attention, source_pieces, target_pieces))
    return pharaoh(piece_links(attention), source_pieces, target_pieces, unit)
