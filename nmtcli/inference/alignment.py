"""Word alignments from the encoder-decoder attention of a teacher-forced pass (inference/forced.py).

`--alignment words` reads words, not pieces: each target word's pieces' attention (averaged) on each source word's
pieces (summed) makes a (target words, source words) matrix, EOS's row and column left out; its rows and columns
are normalised in turn (Sinkhorn's balancing, 5 rounds: a source word every target word attends to counts less, and
a target word's links compete with the other target words'), and the links are Moses' grow-diag-final-and
(Koehn et al. 2003) of the two directions read off it: each target word's most attended source word (the rows'
argmax) and each source word's most attending target word (the columns'), starting from where they agree and
growing into the neighbouring links of either. A word of five pieces then gets its own one link or two, not one a
piece: on a rule task whose words are several pieces each (`--vocab-size 300`) the links were 2.4 a target word and
35-46% right when each piece's link was kept (issue 51), and are now 99.6% right with every true link found; on the
demo corpus's hand-aligned set the alignment error rate fell from 32.4% to 30.4% (docs/translating.md, "Readings
over words"). `--alignment pieces` keeps the pieces' reading: each target piece aligned to the source piece its
decoder position attends to most (fairseq's `--print-alignment`, Marian's `--alignment hard`), each source piece's
attention first divided by the sum of what every target position gives it (its column's sum). The target's EOS
is not aligned. Links are written in Pharaoh format, "i-j" for source position i and target position j: a word is
a piece that starts with "▁" and the pieces that follow it up to the next such piece, which are the
whitespace-separated words of the text.

COVERING, what the HTML and document paths ask for (documents/placement.py places inline tags by it), reads the
same balanced word matrix but keeps only the links both directions agree on (the intersection symmetrised
alignments start from; Och & Ney 2003), then links each source word left unlinked to the target word that attends
to it most (the target piece whose row puts the most attention on the word's pieces, EOS's row left out), so that
an inline tag around every word has a translation to wrap. A tag wraps every target word linked to its words,
from the first to the last, so a stray link stretches it: where the two directions agree, a source word has one
target word, and the tags land on their words more often at every stage of training measured
(studies/alignment_aer.py --readings; docs/translating.md, "Where inline tags land").

Which attention: DEFAULT_HEADS, chosen by alignment error rate on a hand-aligned sample of the demo
corpus and on a rule task (studies/alignment_aer.py; the numbers are in docs/translating.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

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
# Sinkhorn rounds of the word matrix: 5 is where the AER of the sets measured stops moving (1: 2.0% on the rule task
# at --vocab-size 300, 5: 0.3%, 20: 0.2%; the demo set 30.0%, 30.1%, 30.6%).
BALANCING_ROUNDS = 5


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


def word_matrix(attention: Tensor, source_words: Sequence[int], target_words: Sequence[int]) -> Tensor:
    """(target words, source words): each target word's pieces' attention (averaged) on each source word's pieces
    (summed). attention: (target pieces, source pieces), EOS's row and column left out; source_words, target_words:
    each piece's word (word_of_piece, or any unit index: a unit with no piece gets a row or column of zeros)."""
    a = attention.float()
    index = partial(torch.tensor, device=a.device)
    by_source = a.new_zeros(a.size(0), max(source_words) + 1).index_add_(1, index(source_words), a)
    rows = max(target_words) + 1
    summed = a.new_zeros(rows, by_source.size(1)).index_add_(0, index(target_words), by_source)
    return summed / torch.bincount(index(target_words), minlength=rows).clamp_min(1).unsqueeze(1)


def balanced(matrix: Tensor, rounds: int = BALANCING_ROUNDS) -> Tensor:
    """Rows and columns divided by their sums in turn (Sinkhorn's balancing), `rounds` times each."""
    for _ in range(rounds):
        matrix = matrix / matrix.sum(dim=1, keepdim=True).clamp_min(1e-30)
        matrix = matrix / matrix.sum(dim=0, keepdim=True).clamp_min(1e-30)
    return matrix


def agreed(matrix: Tensor) -> set[tuple[int, int]]:
    """(source, target) pairs of a (target, source) matrix that both directions agree on: the source is the target's
    row's argmax and the target is the source's column's argmax."""
    most_attended, most_attending = matrix.argmax(dim=1).tolist(), matrix.argmax(dim=0).tolist()
    return {(s, t) for t, s in enumerate(most_attended) if most_attending[s] == t}


def grow_diag_final_and(matrix: Tensor) -> set[tuple[int, int]]:
    """Moses' grow-diag-final-and of the two directions of a (target, source) matrix: the rows' argmax and the
    columns'. From the links they agree on, add each link of either direction next to a link (diagonals too) whose
    source or target is still unlinked, until none is added; then each link of either whose source and target are
    both unlinked."""
    union = {(s, t) for t, s in enumerate(matrix.argmax(dim=1).tolist())} | set(enumerate(matrix.argmax(dim=0).tolist()))
    links = agreed(matrix)
    sources, targets = {s for s, _ in links}, {t for _, t in links}

    def add(link: tuple[int, int]) -> None:
        links.add(link)
        sources.add(link[0])
        targets.add(link[1])

    grown = True
    while grown:
        grown = False
        for s, t in sorted(links):
            for link in ((s + ds, t + dt) for ds in (-1, 0, 1) for dt in (-1, 0, 1) if ds or dt):
                if link in union and link not in links and (link[0] not in sources or link[1] not in targets):
                    add(link)
                    grown = True
    for s, t in sorted(union):
        if s not in sources and t not in targets:
            add((s, t))
    return links


def _balanced_words(attention: Tensor, source_pieces: Sequence[str], target_pieces: Sequence[str],
                    offset: int) -> tuple[Tensor, list[int], list[int]] | None:
    """The balanced (target words, source words) matrix of a pair's attention and each side's word of each piece
    (None: a side has no piece but EOS)."""
    target, source = attention.size(0) - 1, attention.size(1) - 1
    if target == 0 or source == 0:
        return None
    src_word, tgt_word = word_of_piece(source_pieces), word_of_piece(target_pieces)
    return balanced(word_matrix(attention[offset : offset + target, :source], src_word, tgt_word)), src_word, tgt_word


def word_alignment(attention: Tensor, source_pieces: Sequence[str], target_pieces: Sequence[str],
               offset: int = DEFAULT_OFFSET) -> list[tuple[int, int]]:
    """(source word, target word) links of `--alignment words` (module docstring), sorted. attention: (target
    pieces + 1, source pieces + 1) from `Forced.attention`, the last row and column being EOS's."""
    read = _balanced_words(attention, source_pieces, target_pieces, offset)
    return sorted(grow_diag_final_and(read[0])) if read else []


def covering_links(attention: Tensor, source_pieces: Sequence[str], target_pieces: Sequence[str],
                   offset: int = DEFAULT_OFFSET) -> list[tuple[int, int]]:
    """(source word, target word) links: those both directions of the balanced word matrix agree on, plus, for each
    source word none of them reaches, (the word, the target word whose piece attends to it most: the largest sum of
    a row's attention over the word's pieces, EOS's row and column left out)."""
    read = _balanced_words(attention, source_pieces, target_pieces, offset)
    if read is None:
        return []
    matrix, src_word, tgt_word = read
    return with_every_source_word(agreed(matrix), attention, src_word, tgt_word, offset)


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


def _without_bare_boundaries(attention: Tensor, source_pieces: Sequence[str], target_pieces: Sequence[str]):
    """The pair without the lone "▁" pieces that end a side (a translation of nothing but a space: no word of its
    text), their rows and columns left out of the attention, EOS's kept last."""
    def spoken(pieces: Sequence[str]) -> int:
        n = len(pieces)
        while n and pieces[n - 1] == WORD_BOUNDARY:
            n -= 1
        return n

    s, t = spoken(source_pieces), spoken(target_pieces)
    if (s, t) == (len(source_pieces), len(target_pieces)):
        return attention, source_pieces, target_pieces
    rows = [*range(t), attention.size(0) - 1]
    columns = [*range(s), attention.size(1) - 1]
    return attention[rows][:, columns], source_pieces[:s], target_pieces[:t]


def alignment_text(attention: Tensor, source_pieces: Sequence[str], target_pieces: Sequence[str], unit: str) -> str:
    """A pair's alignment as Pharaoh "i-j ...": over `unit` (UNITS), or COVERING's links over words."""
    if unit == "pieces":
        return pharaoh(piece_links(attention), source_pieces, target_pieces, unit)
    attention, source_pieces, target_pieces = _without_bare_boundaries(attention, source_pieces, target_pieces)
    links = covering_links if unit == COVERING else word_alignment
    return " ".join(f"{s}-{t}" for s, t in links(attention, source_pieces, target_pieces))
