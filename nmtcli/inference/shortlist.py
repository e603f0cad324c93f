"""Lexical shortlists: a beam search that scores only the target pieces its batch's sources can translate to.

A decoding step ends in the output projection and the softmax over the whole vocabulary: for a student model
(student-tiny: d_model 256, two decoder layers) with 32,000 pieces that is three quarters of a step's multiply-adds,
and on a CPU most of its time. Most of those pieces are in no translation of the batch's sentences. A lexical
shortlist (Jean et al. 2015, "On Using Very Large Target Vocabulary for NMT"; Marian's `--shortlist`, which the
Bergamot students ship with) lists, for each source piece, the target pieces that translate it, and a batch is
decoded over the union of its sources' lists:

- IBM Model 1's t(f | e) learnt by EM from the training pairs' pieces (data/lexical.py's Model1, the misaligned
  filter's), its PER_PIECE most probable target pieces for each source piece e;
- the FREQUENT most frequent target pieces, and those the empty word generates (function words and punctuation a
  translation adds without a source word for them);
- the batch's own source pieces (names, numbers and code copy through), EOS and UNK, and every piece a target prefix
  forces (a multilingual model's language tag among them).

The softmax is taken over those pieces alone, as Marian's is: a hypothesis's log-probability is its probability
within the shortlist, a little higher than under the whole vocabulary. What is kept of a model's output is measured
in docs/speed.md (BLEU with and without, the same lines), and what it saves in benchmarks/shortlist_speed.py.

A shortlist belongs to a model dir (`shortlist.safetensors`, written by `nmt shortlist`, or by `nmt distill` for its
student) and is used by every beam and greedy search of that model unless `--no-shortlist`; sampling draws from the
whole vocabulary, forced decoding (`--forced-decoding`, alignments, the coverage penalty's and the glossary's passes)
scores over the whole vocabulary, and a beam search given CUDA graphs (a GPU, where the projection is cheap) does
without, also where the graphs turn themselves off. A multilingual model's shortlist lists the target pieces of the
directions of the data it was learnt from (`info["directions"]`): its other directions search the whole vocabulary.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from nmtcli.data.vocabulary import read_vocabulary
from nmtcli.errors import NmtError
from nmtcli.files import atomic_path
from nmtcli.inference.cpu import Int8Linear, PackedLinear
from nmtcli.inference.precision import HalfOutput
from nmtcli.model.checkpoint import SHORTLIST_FILE
from nmtcli.model.transformer import Transformer

FORMAT = "nmt-shortlist"
PER_PIECE = 50  # target pieces kept for each source piece (Marian's students: 50 best translations + 50 most frequent)
FREQUENT = 100  # the most frequent target pieces, always in
MAX_LINKS = 20_000_000  # (e_i, f_j) piece pairs Model 1 learns from: ~0.9 GB while it trains (data/lexical.py)
MAX_PIECES = 64  # pairs with a longer side are counted but not learnt from (links grow as the square)
SAMPLE = 200_000  # pairs drawn (seeded) before the link budget takes the first of them


@dataclass
class Shortlist:
    """table (V, per_piece): the target ids each source id translates to, best first, -1 where it has fewer;
    always (A,): the ids every batch decodes with. `info`: how it was learnt (recorded in the file)."""

    table: Tensor
    always: Tensor
    info: dict[str, Any]

    @property
    def vocab_size(self) -> int:
        return self.table.size(0)

    def serves(self, source: str, target: str) -> bool:
        """Whether a multilingual model translating source -> target (its codes) searches with this shortlist: a direction
        of the data it was learnt from (`info["directions"]`, "SRC-TGT"); one learnt without directions serves any."""
        directions = self.info.get("directions")
        return not directions or f"{source}-{target}" in directions

    def lists(self, src: Tensor, forced: Sequence[Sequence[int]] = (), specials: Sequence[int] = (), pad: int = 0) -> list[Tensor]:
        """Each sentence's target ids (unsorted, with repeats) of a batch (B, S) of source ids right-padded with `pad`: its
        pieces' lists, the pieces every sentence has, its own pieces, `specials` (EOS, UNK) and its `forced` ones (its
        prefix). The padding is none of its pieces: a sentence has the same list alone and in a batch."""
        table = self.table.to(src.device)
        always = torch.cat([self.always.to(src.device), torch.tensor(list(specials), dtype=torch.long, device=src.device)])
        out = []
        for b in range(src.size(0)):
            own = src[b][(src[b] >= 0) & (src[b] < self.vocab_size) & (src[b] != pad)]
            listed = table.index_select(0, own).flatten()
            prefix = torch.tensor(list(forced[b]) if b < len(forced) else [], dtype=torch.long, device=src.device)
            ids = torch.cat([listed[listed >= 0], always, own, prefix])
            out.append(ids[(ids >= 0) & (ids < self.vocab_size)])
        return out

    def save(self, model_dir: Path) -> Path:
        from safetensors.torch import save_file

        path = Path(model_dir) / SHORTLIST_FILE
        metadata = {"format": FORMAT, "info": json.dumps(self.info)}
        with atomic_path(path) as tmp:
            save_file({"table": self.table.to(torch.int32).contiguous(), "always": self.always.to(torch.int32).contiguous()}, str(tmp), metadata)
        return path


class ForeignShortlist(NmtError):
    """A shortlist file learnt for another vocabulary than its model dir's (a model dir written over another's)."""


def load(model_dir: Path, vocab_size: int) -> Shortlist | None:
    """The model dir's shortlist, None where it has none; one clear error where the file is not one for this model."""
    from safetensors import safe_open

    path = Path(model_dir) / SHORTLIST_FILE
    if not path.exists() and not path.is_symlink():
        return None
    hint = f"delete {path} and make it again: `nmt shortlist {model_dir} --data DIR`"
    if not path.is_file():  # a dir, or a link to nothing: meant as one, so not passed over in silence
        raise NmtError(f"{path} is not a file", hint)
    try:
        with safe_open(str(path), "pt") as f:
            metadata = dict(f.metadata() or {})
            table, always = f.get_tensor("table"), f.get_tensor("always")
        info = json.loads(metadata.get("info") or "{}")
    except Exception as e:  # safetensors raises its own errors for a file cut short or not its format
        raise NmtError(f"{path} is not a readable shortlist ({str(e).splitlines()[0] if str(e) else type(e).__name__})", hint) from None
    integer = not (table.is_floating_point() or table.is_complex() or table.dtype == torch.bool
                   or always.is_floating_point() or always.is_complex() or always.dtype == torch.bool)
    if metadata.get("format") != FORMAT or not isinstance(info, dict) or table.dim() != 2 or always.dim() != 1 or not integer:
        raise NmtError(f"{path} is not an nmt shortlist", hint)
    table, always = table.long(), always.long()
    if table.size(0) != vocab_size:
        raise ForeignShortlist(f"{path} was made for a vocabulary of {table.size(0):,} pieces, but the model has {vocab_size:,}", hint)
    if bool(((table < -1) | (table >= vocab_size)).any()) or bool(((always < 0) | (always >= vocab_size)).any()):
        raise NmtError(f"{path} lists ids outside the model's vocabulary of {vocab_size:,} pieces", hint)
    if info.get("vocabulary") and info["vocabulary"] != read_vocabulary(model_dir).files:  # another model's pieces, as many
        raise ForeignShortlist(f"{path} was made for another vocabulary than {model_dir}'s (its tokenizer files differ)", hint)
    return Shortlist(table, always, info)


def drop_foreign(model_dir: Path, vocab_size: int) -> Path | None:
    """The model dir's shortlist removed where it was learnt for another vocabulary than the model's: what `nmt average
    -o`, `nmt import -o` and `nmt pull -o` leave of the model they write over (they replace its files, and keep others),
    which no search of the new model could use. Returns the path removed, or None (none, this model's, or damaged)."""
    try:
        load(model_dir, vocab_size)
    except ForeignShortlist:
        path = Path(model_dir) / SHORTLIST_FILE
        path.unlink()
        return path
    except NmtError:  # damaged: nmt translate and nmt info say so
        pass
    return None


class Restricted:
    """The output projection of `model` restricted to the union of a batch's sentences' shortlists, S sorted target ids
    `ids`: `project(hidden)` gives the logits (..., S) of those ids, in the model's own way (oneDNN-packed fp32 or int8
    on a CPU, half on a GPU); `mask` (B, S) is 0 where an id is in the sentence's own list and -inf elsewhere, so
    each sentence is searched over its own list whatever else shares its batch (a line translates the same alone, in
    any batch, in `nmt serve` beside any request); `column(ids)` where each of `ids` is among the S. `whole`: the S are
    the whole vocabulary, projected by the model's own output layer (no rows gathered), each sentence still masked."""

    def __init__(self, model: Transformer, lists: list[Tensor], ids: Tensor, whole: bool = False):
        """`ids`: the union of `lists`, sorted (for_batch has it); with `whole`, every id of the vocabulary instead."""
        device = lists[0].device
        if whole:
            self.ids = torch.arange(model.config.vocab_size, device=device)
            self.project: Callable[[Tensor], Tensor] = model.logits
        else:
            self.ids = ids
            weight = model.embedding.tokens.weight.detach().index_select(0, self.ids)
            bias = None if model.final_logits_bias is None else model.final_logits_bias.detach().index_select(0, self.ids)
            kind = model.packed_output
            if isinstance(kind, Int8Linear):
                self.project = Int8Linear(weight, bias)
            elif isinstance(kind, PackedLinear):
                self.project = PackedLinear(weight, bias)
            elif isinstance(kind, HalfOutput):
                self.project = HalfOutput(weight, bias, kind.weight.dtype)
            else:
                self.project = lambda hidden: F.linear(hidden, weight, bias)
        self._column = torch.zeros(model.config.vocab_size, dtype=torch.long, device=device)
        self._column[self.ids] = torch.arange(len(self.ids), device=device)
        self.mask = torch.full((len(lists), len(self.ids)), float("-inf"), device=device)
        for b, ids in enumerate(lists):
            self.mask[b, self._column[ids]] = 0.0

    def __len__(self) -> int:
        return len(self.ids)

    def column(self, ids: Tensor) -> Tensor:
        """The positions of vocabulary ids among the S (ids outside them: 0, for padding that is never read)."""
        return self._column[ids]

    def columns_among(self, ids: Tensor) -> Tensor:
        """The positions of those of the vocabulary ids `ids` that are among the S (a search's banned ids, as columns)."""
        return torch.isin(self.ids, ids).nonzero().flatten()


WORTH = 0.8  # a batch whose union of lists holds more of the vocabulary than this projects onto the whole of it


def for_batch(model: Transformer, shortlist: Shortlist | None, src: Tensor, prefixes: Sequence[Sequence[int]] | None) -> Restricted | None:
    """The restricted projection a search of the batch `src` runs with, or None (no shortlist). Where the batch's lists
    leave out too little of the vocabulary to be worth gathering its rows, the projection is the model's own over the
    whole vocabulary, each sentence still masked to its own list: the choice changes a batch's speed, never a line's
    translation (which is its translation alone)."""
    if shortlist is None or src.size(0) == 0:
        return None
    cfg = model.config
    lists = shortlist.lists(src, prefixes or (), (cfg.eos_id, cfg.unk_id), cfg.pad_id)
    union = torch.unique(torch.cat(lists))
    return Restricted(model, lists, union, whole=len(union) > WORTH * cfg.vocab_size)


# --- learning one -----------------------------------------------------------------------------------------


def learn(pairs: Iterable[tuple[np.ndarray, np.ndarray]], vocab_size: int, per_piece: int = PER_PIECE, frequent: int = FREQUENT,
          seed: int = 1, sample: int = SAMPLE, max_links: int = MAX_LINKS) -> Shortlist:
    """A shortlist from (source ids, target ids) pairs of one model's vocabulary (streamed once): every target piece
    counted, a seeded sample of `sample` pairs drawn, and Model 1 learnt from the first of them that fit `max_links`."""
    from nmtcli.data.cleaning import reservoir_add
    from nmtcli.data.lexical import Model1

    rng = random.Random(seed)
    counts = np.zeros(vocab_size, np.int64)
    drawn: list[tuple[np.ndarray, np.ndarray]] = []
    total = 0
    for source, target in pairs:
        counts += np.bincount(target, minlength=vocab_size)[:vocab_size]
        if 0 < len(source) <= MAX_PIECES and 0 < len(target) <= MAX_PIECES:
            total += 1
            reservoir_add(drawn, (np.asarray(source, np.int64), np.asarray(target, np.int64)), total, sample, rng)
    if not drawn:
        raise NmtError("no pair to learn a shortlist from (every pair is empty or longer than "
                       f"{MAX_PIECES} pieces a side)", "give the training data the model was trained on (--data DIR)")
    sources, targets, links = [], [], 0
    for source, target in drawn:
        links += (len(source) + 1) * len(target)
        if links > max_links:
            break
        sources.append(source)
        targets.append(target)
    model1 = Model1.train(sources, targets, vocab_size, vocab_size)  # t(f | e); id 0 (PAD, in no sentence) is the empty word
    e, f, t = model1.keys // vocab_size, model1.keys % vocab_size, model1.t
    order = np.lexsort((-t, e))  # by source piece, most probable first
    e, f = e[order], f[order]
    starts = np.searchsorted(e, e, side="left")
    rank = np.arange(len(e)) - starts
    kept = rank < per_piece
    table = np.full((vocab_size, per_piece), -1, np.int64)
    table[e[kept], rank[kept]] = f[kept]
    empty_word = table[0][table[0] >= 0]  # what Model 1's empty word generates
    table[0] = -1
    by_count = np.argsort(-counts, kind="stable")[:frequent]
    always = np.unique(np.concatenate([by_count[counts[by_count] > 0], empty_word]))
    info = {"per_piece": per_piece, "frequent": frequent, "pairs": total, "learnt_from": len(sources), "seed": seed,
            "source_pieces": int((table[:, 0] >= 0).sum())}
    return Shortlist(torch.from_numpy(table), torch.from_numpy(always.astype(np.int64)), info)
