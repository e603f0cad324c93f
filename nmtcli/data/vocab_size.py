"""How many BPE pieces a corpus supports, when `nmt prepare` is not told (`--vocab-size`).

The paper's 37,000 pieces (sec. 5.1) were learned from 4.5 million sentence pairs. A corpus of tens
of thousands of pairs spread over that many pieces sees most of them a handful of times: the
embeddings of rare pieces are barely trained, and every step pays for a 37,000-way softmax.
Studies of BPE size on small corpora find a few thousand merges best below ~100k pairs (Sennrich &
Zhang 2019, "Revisiting Low-Resource Neural Machine Translation"; Ding et al. 2019, "A Call for Prudent
Choice of Subword Merge Operations in Neural Machine Translation": for Transformers a smaller BPE size
tends to be the better one), and fairseq's IWSLT14 de-en recipe (160k pairs) learns 10,000.

The rule: the vocabulary grows with the square root of the training pairs, through the paper's
point (4.5M pairs, 37,000 pieces), rounded to the nearest 1,000, at least 1,000 and at most 37,000:

      pairs     pieces          pairs     pieces
      5,000      1,000        200,000      8,000
     30,000      3,000      1,000,000     17,000
    100,000      6,000      4,500,000     37,000

With a square root the mean number of times a piece occurs in the training text also grows as
sqrt(pairs): a larger corpus gets both more pieces and better-trained ones, and a small one is not
spread over pieces it sees a few times. Named corpora keep their recipe's value (the paper's 37,000 and
32,000 for WMT14); `--vocab-size` always wins.
"""

from __future__ import annotations

import math
from typing import Any

PAPER_PIECES, PAPER_PAIRS = 37_000, 4_500_000  # sec. 5.1: WMT14 en-de
MIN_PIECES, STEP = 1_000, 1_000
RULE = "37,000 x sqrt(pairs / 4.5M), to the nearest 1,000, from 1,000 to 37,000"


def vocab_size_for(pairs: int) -> int:
    """The joint BPE vocabulary for a corpus of `pairs` training sentence pairs (see the module's rule)."""
    pieces = PAPER_PIECES * math.sqrt(max(pairs, 0) / PAPER_PAIRS)
    return int(min(PAPER_PIECES, max(MIN_PIECES, STEP * math.floor(pieces / STEP + 0.5))))


def vocab_choice(given: int | None, pairs: int, recipe: dict[str, Any] | None = None) -> dict[str, Any]:
    """The vocabulary size asked of sentencepiece and why, as the manifest records it.

    `by` is "corpus" (the rule, `given` None), "recipe" (a named corpus' own value) or "given".
    """
    if given is None:
        return {"asked": vocab_size_for(pairs), "by": "corpus", "training_pairs": pairs, "rule": RULE}
    by = "recipe" if recipe is not None and recipe.get("vocab_size") == given else "given"
    return {"asked": given, "by": by, "training_pairs": pairs}
