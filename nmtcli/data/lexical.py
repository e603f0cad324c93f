"""The `misaligned` filter of `nmt prepare`: pairs whose sides are not translations of each other (issue 53).

A misaligned pair (the target of another sentence, a fragment cut from elsewhere) passes every filter that reads one
pair at a time: both sides are fluent text of the right languages and lengths. What gives it away is that its words do
not translate each other. IBM Model 1 (Brown et al. 1993, "The Mathematics of Statistical Machine Translation"),
trained by EM on the corpus itself in both directions, gives each pair a lexical score: the mean over the target's
words of log (1 / (l + 1)) sum_i t(f_j | e_i), with e_0 the empty word, and the same from target to source; a pair's
score is the lower of the two, so a pair one side of which holds words the other lacks scores low (Zipporah and
Bicleaner's lexical features read corpora this way).

Which score is too low depends on the corpus and the sentences' lengths, so the threshold is not a constant: the
sample's sentences are paired at random (each source beside another pair's target, in a shuffled order, up to
NULL_ROUNDS times), and a pair is dropped when it scores no better than the best NULL_SHARE of random pairings of
sentences of its lengths (EDGES' buckets). A random pairing is what a misaligned pair is, so NULL_SHARE of them are
caught by construction; a right pair is dropped only when its words explain each other no better than chance would.

Each pair is also read word by word (_untranslated). A fragment cut from a longer pair with its target window a word
off ("big dog" -> "Hund rot") has one word of two translated: its mean is half a translation's, well above chance, so
the threshold keeps it, and a model that learns from such pairs learns to leave words out (301 of them kept cost a
model of studies/cleaning.py's reversal corpus 9 BLEU). And where the vocabulary is small, a random pairing of longer
sentences shares a few words by chance and scores above the threshold now and then. What both lack is a translation of
words that are nearly always translated: a word is one of those where, across the pairs the threshold keeps, the other
side's words explain it and the empty word does not (seen EVIDENCE times or more, the empty word's share of its
probability below USUALLY_EMPTY on average); a function word, a word often left out and a rare word are no evidence.
A pair both of whose sides have PARTIAL_WORDS words or fewer is dropped where one such word of a side goes untranslated
(the empty word holds more than half of its probability in this pair); a longer pair where half of a side's such words
do, LOST_WORDS at least. A word the model cannot read on the other side (a compound or form seen once) may be the
translation: each excuses one word ("Refresh File List" -> "Dateiliste aktualisieren" went for "file" before); and a
three-word side beside a two-word one is no fragment ("Interrupt the kernel" -> "Kernel unterbrechen" went for "the",
which the demo corpus's sentences nearly always translate).

Two guards keep that honest where words are rare. A model scoring the pairs it was trained on finds even a misaligned
pair likely when its words occur nowhere else (EM fits their t to that very pair: on the demo corpus of 4,228 UI
strings it caught none of the misaligned pairs): so the sample is cut into FOLDS folds, by a hash of the words the
model reads of each pair (copies of a pair share a fold), and each pair, random pairings included, is scored by models
trained on the other folds; copies are learnt from once. And only the words seen in MIN_COUNT distinct pairs of the
sample are read: a side with fewer than MIN_KNOWN of its words known (names, numbers, code, a rare word) is not judged,
nor is a side of no word at all.

Memory and time: the models are trained on a seeded sample of up to SAMPLE_PAIRS pairs (fewer where they hold more than
MAX_LINKS word pairs), learning only from pairs of TRAIN_WORDS words or fewer a side; each side is read to MAX_WORDS
words; the tables keep t >= PRUNE. The corpus is then judged in chunks of CHUNK pairs, in worker processes: memory does
not grow with the corpus. studies/cleaning.py measured what it drops of each kind of noise, and what a model trained
on what it keeps is worth (docs/data.md).
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing
import random
import re
import sys
import unicodedata
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nmtcli.data.cleaning import reservoir_add, with_filter
from nmtcli.data.text import read_lines
from nmtcli.files import atomic_path
from nmtcli.threads import exit_with_parent

# Why a pair is dropped, as cleaning.jsonl records it: its score is no better than chance's for its lengths, or the
# other side leaves words out that the corpus usually translates (_untranslated).
WHY = ("", "score", "untranslated words")
NULL_SHARE = 0.95  # of random pairings of the corpus's sentences, the share a pair must score above to be kept
NULL_ROUNDS = 4  # random pairings of the sample drawn to learn what chance scores
SAMPLE_PAIRS = 100_000
MAX_LINKS = 20_000_000  # word pairs (e_i, f_j) of the training sample, with the empty word: ~0.9 GB while it trains
MAX_WORDS = 50
MIN_COUNT = 2
MIN_KNOWN = 0.5  # of a side's words, those seen MIN_COUNT times in the sample, for the pair to be judged
FOLDS = 5  # each pair is scored by models trained on the other folds' pairs
ITERATIONS = 5  # of EM; Model 1's likelihood is convex, five steps get most of the way
CHUNK = 5_000
FLOOR = 1e-7  # the probability of a target word no source word explains (as far as the table goes)
PRUNE = 1e-3  # t(f | e) below this is left out of the table once trained (counted as 0)
TRAIN_WORDS = 30  # pairs with a side of more known words than this are judged but not learnt from (links grow as the square)
NULL_PAIRS = 40_000  # random pairings scored in all, at most
NULL = 0  # the empty word's id (source side of each direction)
# Length buckets (in words) of the thresholds: random pairings of sentences of the same buckets are compared.
EDGES = np.array([2, 3, 4, 6, 9, 13, 20])
MIN_BUCKET = 50  # random pairings a bucket needs for its own threshold; fewer: the threshold over all lengths
PARTIAL_WORDS = 2  # a pair with both sides of this many words or fewer is dropped for one usual word untranslated (_untranslated) ...
LOST_WORDS = 2  # ... a longer one for half its usual words untranslated, and this many at least
USUALLY_EMPTY = 0.2  # a word whose mean empty-word share is below this over the kept pairs is one usually translated ...
EVIDENCE = 50  # ... where it occurs this many times in them or more

NO_SPACES = "\u0E00-\u0E7F\u3040-\u30FF\u3400-\u4DBF\u4E00-\u9FFF"  # Thai, kana, CJK: a word a character


@functools.cache
def _word() -> re.Pattern[str]:
    """A character of a script without spaces, or a run of letters and digits of other scripts with the combining marks
    among them (Unicode's M categories). Python's \\w has no marks: without them Hindi's दुनिया read as द न य (its vowel
    signs dropped) and a decomposed é cut the word in two; and a Latin word ran on into the Chinese after it ("iphone手机")."""
    ranges: list[list[int]] = []  # [first, last] code points of each run of marks
    for c in range(sys.maxunicode + 1):
        if unicodedata.category(chr(c))[0] == "M":
            if ranges and ranges[-1][1] == c - 1:
                ranges[-1][1] = c
            else:
                ranges.append([c, c])
    marks = "".join(f"{chr(first)}-{chr(last)}" for first, last in ranges)
    letters = rf"[^\W_{NO_SPACES}]"
    return re.compile(rf"[{NO_SPACES}]|{letters}+(?:[{marks}]+{letters}*)*")


_ASCII_WORD = re.compile(r"[a-z0-9]+")  # the same words where the text is ASCII, read in half the time


def words(text: str) -> list[str]:
    """The words of a side (NFKC, lowercased), at most MAX_WORDS; a character each for scripts written without spaces."""
    if text.isascii():
        return _ASCII_WORD.findall(text.lower())[:MAX_WORDS]
    return _word().findall(unicodedata.normalize("NFKC", text).lower())[:MAX_WORDS]


class Vocabulary:
    """A side's word ids: the words seen MIN_COUNT times or more in the sample (the known words), from 1 (0: the empty word)."""

    def __init__(self, counts: Counter[str]):
        kept = sorted(w for w, n in counts.items() if n >= MIN_COUNT)
        self.ids = {w: i + 1 for i, w in enumerate(kept)}

    def __len__(self) -> int:
        return len(self.ids) + 1

    def encode(self, side: list[str]) -> np.ndarray | None:
        """The ids of the side's known words; None where fewer than MIN_KNOWN of its words are known (or none is): a
        side the model cannot read is not judged."""
        known = [self.ids[w] for w in side if w in self.ids]
        return np.array(known, dtype=np.int64) if known and len(known) >= MIN_KNOWN * len(side) else None


def _links(sources: list[np.ndarray], targets: list[np.ndarray], target_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every (e_i, f_j) of each pair, the empty word first on the source side: (key e * target_size + f, the target word
    it belongs to (a running index over all pairs' target words), each source side's length with the empty word).
    Built without a loop over the pairs, row by row: row (k, i) is e_i of pair k beside each f_j of pair k in turn. Four
    arrays the size of the links at most (a fifth of this took 0.85 GB for 16M links, the fit's budget)."""
    if not sources:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    e_lengths = np.array([len(e) + 1 for e in sources])
    f_lengths = np.array([len(f) for f in targets])
    e_start = np.cumsum(e_lengths) - e_lengths
    e_all = np.insert(np.concatenate(sources), e_start - np.arange(len(sources)), NULL)  # the empty word before each side
    f_all = np.concatenate(targets)
    f_start = np.cumsum(f_lengths) - f_lengths
    row_length = np.repeat(f_lengths, e_lengths)  # one row per source word (and empty word) of each pair
    row_start = np.cumsum(row_length) - row_length
    target_word = np.arange(int(row_length.sum()), dtype=np.int64)
    target_word += np.repeat(np.repeat(f_start, e_lengths) - row_start, row_length)  # j + the pair's first target word
    keys = np.repeat(e_all, row_length)
    keys *= target_size
    keys += f_all[target_word]
    return keys, target_word, e_lengths


@dataclass
class Model1:
    """t(f | e) of one direction, sparse: the sorted keys e * target_size + f of the word pairs seen, and their t."""

    keys: np.ndarray
    t: np.ndarray
    target_size: int

    @classmethod
    def train(cls, sources: list[np.ndarray], targets: list[np.ndarray], source_size: int, target_size: int) -> Model1:
        keys, groups, _ = _links(sources, targets, target_size)
        unique, index = np.unique(keys, return_inverse=True)
        of_source = unique // target_size
        t = np.full(len(unique), 1.0 / target_size)
        for _ in range(ITERATIONS):
            p = t[index]
            share = p / np.bincount(groups, weights=p)[groups]  # E: each e_i's share of explaining f_j
            counts = np.bincount(index, weights=share, minlength=len(unique))
            t = counts / np.bincount(of_source, weights=counts, minlength=source_size)[of_source]  # M: normalised per e
        kept = t >= PRUNE  # the long tail of chance co-occurrences: a small table is a fast one to look up
        return cls(unique[kept], t[kept].astype(np.float32), target_size)

    def read(self, sources: list[np.ndarray], targets: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(per pair: the mean over its target words of log P(f_j | e) under Model 1; per target word, each pair's in
        turn: the share of its probability the empty word holds, t(f_j | e_0) / sum_i t(f_j | e_i), near 0 where a word of
        the source translates it, near 1 where none does), from one pass over the pairs' links."""
        keys, groups, lengths = _links(sources, targets, self.target_size)
        at = np.minimum(np.searchsorted(self.keys, keys), max(len(self.keys) - 1, 0))
        p = np.where(self.keys[at] == keys, self.t[at], 0.0) if len(self.keys) else np.zeros(len(keys))
        target_lengths = np.array([len(f) for f in targets])
        explained = np.bincount(groups, weights=p, minlength=int(target_lengths.sum()))
        per_word = explained / np.repeat(lengths, target_lengths)
        owner = np.repeat(np.arange(len(targets)), target_lengths)
        scores = np.bincount(owner, weights=np.log(np.maximum(per_word, FLOOR)), minlength=len(targets)) / np.maximum(target_lengths, 1)
        empty = np.bincount(groups, weights=np.where(keys // self.target_size == NULL, p, 0.0), minlength=len(explained))
        return scores, (empty + FLOOR) / (explained + FLOOR)


def fold_of(sources: list[np.ndarray], targets: list[np.ndarray], seed: int) -> np.ndarray:
    """Each pair's fold (0 to FOLDS - 1), from the words the model reads of it and the seed: a hash, no table of the
    corpus. Copies of a pair (--keep-duplicates, or sides that differ only in case or punctuation) share a fold, so the
    models that judge a pair saw none of them (with folds by line, a misaligned pair in the demo corpus twice was caught
    19% of the time, three times 3%, against 96% once)."""
    return np.array([int.from_bytes(hashlib.blake2b(f"{seed}:{len(e)}:".encode() + e.tobytes() + f.tobytes(), digest_size=8).digest(), "little")
                     % FOLDS for e, f in zip(sources, targets)], dtype=np.int64)


@dataclass
class LexicalJudge:
    """Per fold, both directions' Model 1 trained on the other folds' pairs; the thresholds chance sets, per pair of
    length buckets. A pair is scored by the models of its fold, which never saw it: a model scoring the pairs it was
    trained on finds even a misaligned one likely where its words are rare (EM fits their t to that very pair)."""

    vocabularies: tuple[Vocabulary, Vocabulary]
    models: list[tuple[Model1, Model1]]
    thresholds: np.ndarray  # [source bucket, target bucket] -> the score a pair must beat
    seed: int
    usual: tuple[np.ndarray, np.ndarray]  # per word id of each side: True where the other side nearly always translates it

    @classmethod
    def fit(cls, pairs: list[tuple[str, str]], seed: int) -> LexicalJudge:
        """Train on the sample `pairs` (sample()) and learn what random pairings score."""
        split = [(words(s), words(t)) for s, t in pairs]
        # Words counted once a pair of words (its copies share its fold: a word seen only in them is one no model that
        # judges the pair has seen; counted in each copy, "midnight" -> "Mitternacht" twice scored the floor and went).
        distinct = dict.fromkeys((tuple(s), tuple(t)) for s, t in split)
        vocabularies = (Vocabulary(Counter(w for s, _ in distinct for w in s)), Vocabulary(Counter(w for _, t in distinct for w in t)))
        encoded = [(vocabularies[0].encode(s), vocabularies[1].encode(t)) for s, t in split]
        usable = np.array([e is not None and f is not None for e, f in encoded], dtype=bool)
        sources = [e for (e, _), ok in zip(encoded, usable) if ok]
        targets = [f for (_, f), ok in zip(encoded, usable) if ok]
        folds = fold_of(sources, targets, seed)
        sizes = (len(vocabularies[0]), len(vocabularies[1]))
        short = np.array([len(e) <= TRAIN_WORDS and len(f) <= TRAIN_WORDS for e, f in zip(sources, targets)], dtype=bool)
        if short.sum() < len(short) / 4:  # a corpus of long sentences: learn from them all
            short[:] = True
        # Each side's text as the model reads it, numbered. Copies of a pair are learnt from once (a pair repeated pulls its
        # words' translations towards its own); a source beside another pair's target is no random pairing where either
        # side is the same text (a repeated sentence, --keep-duplicates): it is a translation, and as likely.
        same_source, same_target = _numbered(sources), _numbered(targets)
        once = np.zeros(len(sources), dtype=bool)
        once[np.unique(same_source * (same_target.max(initial=0) + 1) + same_target, return_index=True)[1]] = True
        models = []
        for fold in range(FOLDS):
            rest = np.flatnonzero((folds != fold) & short & once)
            e, f = [sources[i] for i in rest], [targets[i] for i in rest]
            models.append((Model1.train(e, f, *sizes), Model1.train(f, e, *sizes[::-1])))
        judge = cls(vocabularies, models, np.full((len(EDGES) + 1,) * 2, -np.inf), seed, tuple(np.zeros(n, dtype=bool) for n in sizes))
        rng = np.random.default_rng(seed)
        chance, buckets = [], []
        rounds = min(NULL_ROUNDS, -(-NULL_PAIRS // max(len(sources), 1)))
        for fold in range(FOLDS):  # random pairings of a fold's sentences, scored by the models that saw neither
            inside = np.flatnonzero(folds == fold)
            if len(inside) < 2:
                continue
            if len(inside) > NULL_PAIRS // FOLDS:
                inside = np.sort(rng.choice(inside, NULL_PAIRS // FOLDS, replace=False))
            for _ in range(rounds):
                order = rng.permutation(inside)
                other = np.roll(order, 1)  # each source beside another's target
                apart = (same_source[order] != same_source[other]) & (same_target[order] != same_target[other])
                if not apart.any():
                    continue
                e, f = [sources[i] for i in order[apart]], [targets[i] for i in other[apart]]
                chance.append(judge._read(fold, e, f)[0])
                buckets.append(judge._buckets(e, f))
        if not chance:
            return judge
        chance, buckets = np.concatenate(chance), np.concatenate(buckets)
        overall = float(np.quantile(chance, NULL_SHARE))
        for b in np.unique(buckets):
            inside = chance[buckets == b]
            judge.thresholds.flat[b] = np.quantile(inside, NULL_SHARE) if len(inside) >= MIN_BUCKET else overall
        judge.thresholds[np.isneginf(judge.thresholds)] = overall
        judge.usual = judge._usually_translated(sources, targets, folds)
        return judge

    def _usually_translated(self, sources: list[np.ndarray], targets: list[np.ndarray], folds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per side, the words that a word of the other side translates in nearly every pair of the sample the filter
        keeps: seen EVIDENCE times or more there, the empty word's share of them below USUALLY_EMPTY on average (each pair
        read by its fold's models, as it is judged). A function word or a word often left out has a large share; a
        content word of a corpus of translations a small one."""
        sums = [np.zeros(len(v)) for v in self.vocabularies]
        counts = [np.zeros(len(v)) for v in self.vocabularies]
        for fold in range(FOLDS):
            inside = np.flatnonzero(folds == fold)
            for first in range(0, len(inside), CHUNK):  # the links of a chunk at a time
                at = inside[first:first + CHUNK]
                e, f = [sources[i] for i in at], [targets[i] for i in at]
                values, shares = self._read(fold, e, f)
                kept = values > self.thresholds.flat[self._buckets(e, f)]
                for side, words_ in enumerate((e, f)):
                    of_kept = np.repeat(kept, [len(w) for w in words_])
                    ids = np.concatenate(words_)[of_kept]
                    sums[side] += np.bincount(ids, weights=shares[side][of_kept], minlength=len(sums[side]))
                    counts[side] += np.bincount(ids, minlength=len(counts[side]))
        return tuple((n >= EVIDENCE) & (total < USUALLY_EMPTY * n) for total, n in zip(sums, counts))

    def _untranslated(self, sides: tuple[list[np.ndarray], list[np.ndarray]], shares: tuple[np.ndarray, np.ndarray],
                      short: np.ndarray, unknown: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Per pair: True where the other side translates too few of a side's usual words (`usual`; a word is left
        untranslated where the empty word holds more than half of its probability, `shares` as _read gives them): of a
        `short` pair one (a fragment of a translation, a word of it left out or one added), of another pair half of
        them and at least LOST_WORDS (a pairing of sentences that share a few words by chance, as a small vocabulary's
        do). `unknown`: per pair, each side's words the model cannot read."""
        drop = np.zeros(len(sides[0]), dtype=bool)
        for words_, empty_shares, usual, excused in ((sides[0], shares[0], self.usual[0], unknown[1]),
                                                     (sides[1], shares[1], self.usual[1], unknown[0])):
            ids = np.concatenate(words_)
            owner = np.repeat(np.arange(len(words_)), [len(w) for w in words_])
            # A word the other side's unknown words may translate (a rare compound, an inflected form, a name) is not
            # counted as left out: the model cannot read them, so it cannot tell (as a side it cannot read is not judged).
            lost = np.maximum(np.bincount(owner, weights=(empty_shares > 0.5) & usual[ids], minlength=len(words_)) - excused, 0)
            known = np.bincount(owner, weights=usual[ids], minlength=len(words_))
            drop |= np.where(short, lost >= 1, (lost >= LOST_WORDS) & (2 * lost >= known))
        return drop

    def _read(self, fold: int, sources: list[np.ndarray], targets: list[np.ndarray]) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]:
        """(each pair's score: the lower of its two directions'; the empty word's share of each source word and of each
        target word, Model1.read's) under the fold's models."""
        forward, backward = self.models[fold]
        (there, target_shares), (back, source_shares) = forward.read(sources, targets), backward.read(targets, sources)
        return np.minimum(there, back), (source_shares, target_shares)

    def _buckets(self, sources: list[np.ndarray], targets: list[np.ndarray]) -> np.ndarray:
        rows = np.searchsorted(EDGES, [len(s) for s in sources], side="right")
        cols = np.searchsorted(EDGES, [len(t) for t in targets], side="right")
        return rows * (len(EDGES) + 1) + cols

    def misaligned(self, pairs: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of the pairs: (True to drop a pair, its score (NaN where not judged), the rule that drops it: an index into
        WHY, 0 for a pair kept)."""
        split = [(words(s), words(t)) for s, t in pairs]
        encoded = [(self.vocabularies[0].encode(s), self.vocabularies[1].encode(t)) for s, t in split]
        judged = np.array([e is not None and f is not None for e, f in encoded], dtype=bool)
        short = np.array([max(len(s), len(t)) <= PARTIAL_WORDS for s, t in split], dtype=bool)
        unknown = tuple(np.array([len(side[k]) - (0 if e[k] is None else len(e[k])) for side, e in zip(split, encoded)]) for k in (0, 1))
        readable = np.flatnonzero(judged)
        folds = np.full(len(pairs), -1)  # -1: not judged
        folds[readable] = fold_of([encoded[i][0] for i in readable], [encoded[i][1] for i in readable], self.seed)
        scores = np.full(len(pairs), np.nan)
        why = np.zeros(len(pairs), dtype=np.int8)
        for fold in range(FOLDS):
            at = np.flatnonzero(folds == fold)
            if not len(at):
                continue
            sources, targets = [encoded[i][0] for i in at], [encoded[i][1] for i in at]
            values, shares = self._read(fold, sources, targets)
            scores[at] = values
            low = values <= self.thresholds.flat[self._buckets(sources, targets)]
            untranslated = self._untranslated((sources, targets), shares, short[at], (unknown[0][at], unknown[1][at]))
            why[at] = np.where(low, WHY.index("score"), np.where(untranslated, WHY.index("untranslated words"), 0))
        return why > 0, scores, why


def _numbered(sides: list[np.ndarray]) -> np.ndarray:
    """Each side's number, the same for the same word ids."""
    numbers: dict[bytes, int] = {}
    return np.array([numbers.setdefault(side.tobytes(), len(numbers)) for side in sides], dtype=np.int64)


def sample(pairs: Iterable[tuple[str, str]], total: int, seed: int) -> list[tuple[str, str]]:
    """A seeded sample of up to SAMPLE_PAIRS of the `total` pairs, fewer where they hold more than MAX_LINKS word pairs,
    in corpus order."""
    rng = np.random.default_rng(seed)
    chosen = set(rng.choice(total, size=SAMPLE_PAIRS, replace=False).tolist()) if total > SAMPLE_PAIRS else None
    picked = [pair for i, pair in enumerate(pairs) if chosen is None or i in chosen]
    # As the model counts them: a character a word in scripts without spaces, where str.split() sees one word a sentence.
    links = np.array([(len(words(s)) + 1) * len(words(t)) for s, t in picked], dtype=np.int64)
    if links.sum() > MAX_LINKS:  # a random part of the sample, in corpus order
        order = rng.permutation(len(picked))
        keep = np.sort(order[np.cumsum(links[order]) <= MAX_LINKS])
        picked = [picked[i] for i in keep]
    return picked


_judge: LexicalJudge | None = None  # a worker process's


def _start_worker(judge: LexicalJudge) -> None:
    global _judge
    _judge = judge
    exit_with_parent()


def _judge_chunk(chunk: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return _judge.misaligned(chunk)


def _chunks(pairs: Iterable[tuple[str, str]]) -> Iterator[tuple[int, list[tuple[str, str]]]]:
    chunk: list[tuple[str, str]] = []
    done = 0
    for pair in pairs:
        chunk.append(pair)
        if len(chunk) == CHUNK:
            yield done, chunk
            done += len(chunk)
            chunk = []
    if chunk:
        yield done, chunk


def judge_chunks(judge: LexicalJudge, pairs: Iterable[tuple[str, str]], progress: Callable[[int], None] = lambda n: None,
                 workers: int = 1) -> Iterator[tuple[list[tuple[str, str]], np.ndarray, np.ndarray, np.ndarray]]:
    """The pairs in chunks of CHUNK, in order: (chunk, which to drop, their scores, why: LexicalJudge.misaligned's). With `workers` > 1 the chunks are
    judged in that many processes (spawned: a clean interpreter each, the judge sent once), 2 a worker in flight, so
    memory holds a few chunks whatever the corpus; the result does not depend on them."""
    if workers <= 1:
        for first, chunk in _chunks(pairs):
            yield chunk, *judge.misaligned(chunk)
            progress(first + len(chunk))
        return
    with ProcessPoolExecutor(workers, multiprocessing.get_context("spawn"), initializer=_start_worker, initargs=(judge,)) as pool:
        pending: deque[tuple[int, list[tuple[str, str]], Future]] = deque()
        for first, chunk in _chunks(pairs):
            pending.append((first, chunk, pool.submit(_judge_chunk, chunk)))
            if len(pending) >= 2 * workers:
                first, chunk, future = pending.popleft()
                yield chunk, *future.result()
                progress(first + len(chunk))
        while pending:
            first, chunk, future = pending.popleft()
            yield chunk, *future.result()
            progress(first + len(chunk))


def misaligned_stage(work: Path, languages: tuple[str, str], seed: int, train: dict[str, Any], sample_size: int,
                     progress: Callable[[str, int, int | None], None], workers: int = 1) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The cleaned training pairs (work/train.<lang>, as the text filters left them) judged, the misaligned ones dropped
    in place (an atomic rewrite): returns the text stage's train counts with `misaligned` after the other filters, and a
    seeded sample of `sample_size` of the dropped pairs for cleaning.jsonl (worst first)."""
    paths = [work / f"train.{lang}" for lang in languages]
    pairs = train["clean_pairs"]

    def read() -> Iterator[tuple[str, str]]:
        return zip(read_lines(paths[0]), read_lines(paths[1]), strict=True)

    progress("learning word translations", 0, None)
    judge = LexicalJudge.fit(sample(read(), pairs, seed), seed)
    progress("judging alignment", 0, pairs)
    rng, dropped, kept_sample = random.Random(seed), 0, []
    with ExitStack() as stack:
        outs = [stack.enter_context(open(stack.enter_context(atomic_path(p)), "w", encoding="utf-8", newline="\n")) for p in paths]
        for chunk, drop, scores, why in judge_chunks(judge, read(), lambda n: progress("judging alignment", n, pairs),
                                                        workers if pairs > 4 * CHUNK else 1):
            for (s, t), gone, score, rule in zip(chunk, drop.tolist(), scores.tolist(), why.tolist()):
                if not gone:
                    outs[0].write(s + "\n")
                    outs[1].write(t + "\n")
                    continue
                dropped += 1
                reservoir_add(kept_sample, (score, WHY[rule], s, t), dropped, sample_size, rng)  # as the text filters sample theirs
        for f in outs:
            f.close()  # flushed before the atomic renames
    records = [{"filter": "misaligned", "score": round(score, 3), "why": why, "source": s, "target": t}
               for score, why, s, t in sorted(kept_sample)]
    return with_filter(train, "misaligned", dropped), records
