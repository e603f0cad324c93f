"""Text in, text out: sentencepiece-encode, batch by length, beam search, decode, restore input order.

Input is consumed in windows of `window` lines: each window is sorted by length, cut into batches of
at most `batch_tokens` padded source tokens, translated (inference/batches.py), and written back in input
order before the next window is read. What a search is asked for is a SearchSettings (inference/settings.py). Memory stays bounded on any input size and output starts before input ends.
The defaults depend on the device: a CPU is fastest with batches of a few thousand tokens, a GPU
needs thousands of sentences at once to be busy. A GPU that runs out of memory halves the batch
(with a warning) and goes on.

One output for every input line, always: empty or blank lines give empty outputs, over-long lines
are truncated to what the model can read (and reported), never dropped.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor

from nmtcli.errors import NmtError
from nmtcli.inference.alignment import COVERING, DEFAULT_HEADS, alignment_text
from nmtcli.inference.batches import BatchBudget, Warn, translate_ids
from nmtcli.inference.beam import Hypothesis
from nmtcli.inference.confidence import confidence
from nmtcli.inference.engine import Engine
from nmtcli.inference.cpu import keep_freed_memory, pack_for_cpu
from nmtcli.inference.coverage import coverage_penalty
from nmtcli.inference.forced import AttentionHeads, Forced, Scored, force_ids, scored
from nmtcli.inference.graphs import StepGraphs
from nmtcli.inference.terms import put_terms
from nmtcli.inference.memory import gpu_batch
from nmtcli.inference.precision import HALF, to_half
from nmtcli.inference.precision import autocast as half_autocast
from nmtcli.inference.results import Translation
from nmtcli.inference.sampling import check_sampling
from nmtcli.inference.settings import SearchSettings, batching_for, check_brevity, check_coverage, check_search
from nmtcli.inference.shortlist import load as load_shortlist
from nmtcli.inference.language_codes import resolve
from nmtcli.inference.tokenizer import MultilingualVocabulary, Tokenizer, load_tokenizer
from nmtcli.model.checkpoint import load_model

# --precision: what the search computes in. bf16/fp16 (HALF) are a GPU's half precision (inference/precision.py);
# int8 is a CPU's (inference/cpu.py); fp32 is exact everywhere.
PRECISIONS = ("fp32", *HALF, "int8")


# Every character str.splitlines() breaks a line at, each made a space in a translation.
LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def one_line(text: str) -> str:
    """A decoded translation as one line: byte-fallback pieces can spell a line break, and one output line per
    input line is the contract, also for readers that split where Python's str.splitlines() does (U+2028, ...)."""
    return text.translate(LINE_BREAKS)


class Translator(Engine):
    """A model dir loaded once, in inference mode, ready to translate streams of lines: the native engine."""

    name = "native"

    def __init__(
        self,
        model_dir: Path,
        device: str | torch.device = "cpu",
        settings: SearchSettings = SearchSettings(),
        precision: str = "fp32",
        warn: Warn | None = None,
        languages: tuple[str | None, str | None] = (None, None),
    ):
        device = torch.device(device)
        if precision not in PRECISIONS:
            raise NmtError(f"unknown --precision {precision!r}", f"choose one of {', '.join(PRECISIONS)}", exit_code=2)
        if precision in HALF and device.type != "cuda":
            raise NmtError(f"--precision {precision} needs a GPU", "use --precision fp32 (exact) or int8 (faster) on the CPU", exit_code=2)
        if precision == "int8" and device.type != "cpu":
            raise NmtError("--precision int8 is for CPUs", "use --precision bf16 or fp16 on a GPU", exit_code=2)
        check_sampling(settings.sampling, settings.temperature, settings.seed)
        if settings.nbest > settings.beam and settings.sampling is None:
            raise NmtError(f"--nbest {settings.nbest} exceeds --beam {settings.beam}", "n-best lists come from the beam", exit_code=2)
        check_coverage(settings, "--coverage-penalty")
        check_brevity(settings, "--brevity-penalty")
        self.model, self.config_values = load_model(model_dir, device)
        self.precision = precision
        if precision in HALF:
            to_half(self.model, precision)  # half-precision products, fp32 residuals and norms (inference/precision.py)
        if device.type == "cpu":
            # oneDNN-packed fp32 weights (the model as it is where unsupported), or int8 ones (inference/cpu.py)
            if not pack_for_cpu(self.model, "int8" if precision == "int8" else "packed") and precision == "int8":
                raise NmtError("--precision int8 is not available: this PyTorch build lacks its int8 linear ops (fbgemm)",
                               "use --precision fp32")
            keep_freed_memory()  # no page faults for every step's large tensors (inference/cpu.py)
        self.tokenizer = load_tokenizer(Path(model_dir), self.config_values)
        self.pieces = self.tokenizer.pieces()
        self.device = device
        batch_tokens, self.window = batching_for(settings, device.type)
        sentences = None
        if device.type == "cuda":  # the card's default batch, capped in sentences too (inference/memory.py)
            tokens, sentences = gpu_batch(torch.cuda.get_device_properties(device).total_memory)
            batch_tokens = settings.batch_tokens or tokens
        self.budget = BatchBudget(batch_tokens, sentences)
        self.settings = self.own_length(settings)
        self.warn = warn or (lambda message: None)
        self.graphs = StepGraphs(warn=self.warn) if device.type == "cuda" and settings.cuda_graphs else None
        cfg = self.model.config
        if self.tokenizer.size > cfg.vocab_size:
            raise NmtError(
                f"{model_dir}: the tokenizer has {self.tokenizer.size} pieces but the model only {cfg.vocab_size}",
                "the model dir mixes files of different models",
            )
        # The model dir's lexical shortlist (inference/shortlist.py), or None; not even read where the settings turn it off
        # (a damaged file then stands in no one's way). `shortlist`: the one this direction searches with (set_languages).
        self.model_shortlist = load_shortlist(Path(model_dir), cfg.vocab_size) if settings.shortlist else None
        self.shortlist = self.model_shortlist
        self.max_source_tokens = cfg.max_positions - 1  # one position for EOS
        self.languages: tuple[str, str] | None = None  # a multilingual model's (source, target) codes
        self._tags: tuple[int, int] | None = None  # and their tags' ids
        self.set_languages(*languages, model=str(model_dir))

    def own_length(self, settings: SearchSettings) -> SearchSettings:
        """`settings` with the brevity penalty and length ratio they leave to the model (None) made the model's own: those
        `nmt average` calibrated on its validation split (config.json's "search"), else 0 (off) and 1.0."""
        own = self.config_values.get("search") or {}
        if settings.brevity_penalty is None:
            settings = replace(settings, brevity_penalty=own.get("brevity_penalty") or 0.0)
        if settings.length_ratio is None:
            settings = replace(settings, length_ratio=own.get("length_ratio") or 1.0)
        check_brevity(settings, "the brevity penalty")
        return settings

    def set_languages(self, source: str | None, target: str | None, model: str = "MODEL") -> None:
        """The direction to translate in: codes of the model's (`deu_Latn`), ISO 639-1 (`de`) or ISO 639-3 (`deu`).
        A multilingual model needs `target` (the source defaults to English, as transformers' tokenizers have it);
        a one-direction model takes its own languages only."""
        if isinstance(self.tokenizer, MultilingualVocabulary):
            if target is None:
                raise NmtError(f"{model} is multilingual ({len(self.tokenizer.languages)} languages): name the language to translate into "
                               "with --target-lang", f"`nmt info {model}` lists its languages", exit_code=2)
            pair = (self.tokenizer.code(source or "en", "source", model), self.tokenizer.code(target, "target", model))
            self.languages, self._tags = pair, (self.tokenizer.languages[pair[0]], self.tokenizer.languages[pair[1]])
            # a shortlist lists the target pieces of the directions it was learnt for: another decodes over the whole vocabulary
            listed = self.model_shortlist is not None and self.model_shortlist.serves(*pair)
            self.shortlist = self.model_shortlist if listed else None
            return
        own = self.config_values.get("languages") or {}
        for side, given in (("source", source), ("target", target)):
            if given is not None and own.get(side) and resolve(given, [own[side]]) is None:
                raise NmtError(f"{model} translates {own.get('source')} -> {own.get('target')} only, not from/into {given!r} (--{side}-lang)",
                               f"use a model for that direction, or leave --{side}-lang out", exit_code=2)

    def with_languages(self, source: str, target: str) -> Translator:
        """This engine translating source -> target: a multilingual model's every direction served by one set of weights
        (`nmt serve`). A shallow copy: the model, tokenizer, batch budget and graphs are this engine's own objects, only
        the direction is the copy's, so the copies must translate one at a time (serve's one worker thread does)."""
        other = copy.copy(self)
        other.set_languages(source, target)
        return other

    @property
    def batch_tokens(self) -> int:
        """Padded source tokens per batch now (lower than asked for after running out of memory)."""
        return self.budget.tokens

    def translate(self, lines: Iterable[str], prefixes: Iterable[str] | None = None) -> Iterator[str]:
        """The best translation of each line, in order."""
        for hyps in self.translate_nbest(lines, prefixes):
            yield hyps[0].text if hyps else ""

    def translate_nbest(self, lines: Iterable[str], prefixes: Iterable[str] | None = None,
                        settings: SearchSettings | None = None, covering: Callable[[int], bool] | None = None) -> Iterator[list[Translation]]:
        """The `nbest` best translations of each line (best first), in order; [] for an empty line.
        `prefixes`: one target prefix per line ("" for none), which each translation starts with.
        `settings` overrides the search settings for this call (as translate_lines). `covering(n)`: whether line n
        (from 1) gets the COVERING word alignment instead of the settings' (protected spans are placed by it)."""
        if settings is not None:
            check_search(settings)
        for window, window_prefixes in numbered_windows(lines, self.window, prefixes):
            wanted = [covering(number) for number, _ in window] if covering is not None else None
            for hyps in self._translate_window(window, settings, window_prefixes, wanted):
                yield [self._detokenize(h) for h in hyps]

    def translate_lines(self, lines: Sequence[str], settings: SearchSettings | None = None,
                        prefixes: Sequence[str] | None = None, numbers: Sequence[int] | None = None,
                        covering: Sequence[bool] | None = None) -> list[list[Translation]]:
        """The n-best lists of `lines` translated as one unit: sorted by length together, searched in batches
        of `batch_tokens`, returned in input order. `settings` overrides the search settings (beam, alpha,
        nbest, ...) for this call only; `nmt serve` batches the lines of concurrent requests through here.
        `prefixes`: one target prefix per line ("" for none). `numbers`: each line's number, which keys its
        samples (default 1, 2, ...; serve: within its request). `covering`: which lines get the COVERING alignment."""
        settings = settings or self.settings
        check_search(settings)
        if prefixes is not None and len(prefixes) != len(lines):
            raise ValueError(f"{len(prefixes)} prefixes for {len(lines)} lines")
        window = list(zip(numbers or range(1, len(lines) + 1), lines))
        return [[self._detokenize(h) for h in hyps] for hyps in self._translate_window(window, settings, prefixes, covering)]

    @property
    def cpu_threads(self) -> int | None:
        """The CPU threads a search runs on, or None on a GPU."""
        return torch.get_num_threads() if self.device.type == "cpu" else None

    def close(self) -> None:
        """The weights and the step graphs let go (with the GPU's cached memory): the engine translates no more."""
        if self.graphs is not None:
            self.graphs.release()
            self.graphs = None
        self.model = None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _detokenize(self, hyp: Hypothesis) -> Translation:
        text = self.decoded(hyp)
        shown = hyp.tokens[1:] if self._tags and hyp.tokens[:1] == [self._tags[1]] else hyp.tokens  # the target tag is no word of it
        return Translation(text, hyp.score, hyp.log_prob, [self.pieces[t] for t in shown], hyp.alignment,
                           confidence(hyp.log_prob, len(shown)))  # the tag's log-probability is 0: it counts as no token

    def _tagged(self, sentences: list[list[int]], prefixes: list[list[int]] | None) -> tuple[list[list[int]], list[list[int]] | None]:
        """A multilingual model's input: each source `SOURCE_TAG ids` (EOS follows), each output forced to start with the
        target tag (then the line's prefix); an empty line stays empty. Other models' as they are."""
        if self._tags is None:
            return sentences, prefixes
        source, target = self._tags
        prefixes = prefixes or [[] for _ in sentences]
        return ([[source, *ids] if ids else [] for ids in sentences],
                [[target, *p] if ids or p else [] for ids, p in zip(sentences, prefixes)])

    def _translate_window(self, window: list[tuple[int, str]], settings: SearchSettings | None = None,
                          prefixes: Sequence[str] | None = None, covering: Sequence[bool] | None = None) -> list[list[Hypothesis]]:
        def truncated(index: int, tokens: int) -> None:
            self.warn(f"line {window[index][0]}: {tokens} tokens, truncated to the model's {self.max_source_tokens}")

        tag = 1 if self._tags else 0  # a multilingual model's language tag takes a position on each side
        sentences = encode_lines(self.tokenizer.encode, [line for _, line in window], self.max_source_tokens - tag, truncated)
        prefix_ids = None if prefixes is None else encode_prefixes(self.tokenizer, [number for number, _ in window], prefixes,
                                                                    self.max_source_tokens - 1 - tag, self.warn)
        settings = self.own_length(settings or self.settings)
        if prefix_ids is not None and any(prefix_ids) and settings.sampling is not None:
            raise NmtError("target prefixes work with beam and greedy search, not with sampling",
                           "drop the prefixes, or search with --beam instead of --sampling", exit_code=2)
        if self._tags is not None and settings.sampling is not None:
            raise NmtError("sampling from a multilingual model is not available yet (its target tag is forced like a prefix)",
                           "search with --beam instead", exit_code=2)
        if settings.glossary is not None and settings.sampling is not None:
            raise NmtError("a glossary works with beam and greedy search, not with sampling",
                           "drop the glossary, or search with --beam instead of --sampling", exit_code=2)
        sentences, prefix_ids = self._tagged(sentences, prefix_ids)
        covered = settings.coverage_penalty > 0 and settings.sampling is None and settings.beam > 1  # the penalty reranks all K
        results = translate_ids(self.model, sentences, replace(settings, nbest=settings.beam) if covered else settings, self.budget,
                                self.device, autocast=lambda: half_autocast(self.device, self.precision), graphs=self.graphs,
                                warn=self.warn, prefixes=prefix_ids, numbers=[number for number, _ in window],
                                shortlist=self.shortlist if settings.shortlist else None)
        attention: dict[int, Tensor] = {}  # id(hypothesis) -> its attention, read once for the penalty and the alignments
        if covered:
            attention = self._rerank(sentences, results, settings.coverage_penalty)
            results = [hyps[: settings.nbest] for hyps in results]
        if settings.glossary is not None:
            put_terms(self, window, sentences, results, settings, prefixes, attention)
        units = [COVERING if covering is not None and covering[i] else settings.alignment for i in range(len(window))]
        if any(units):
            self._align(sentences, results, units, attention)
        return results

    def decoded(self, hyp: Hypothesis) -> str:
        """A hypothesis's text, as one line."""
        return hyp.text if hyp.text is not None else one_line(self.tokenizer.decode(hyp.tokens))

    def _attention(self, sentences: list[list[int]], pairs: list[tuple[int, Hypothesis]]) -> list[Tensor]:
        """The encoder-decoder attention (DEFAULT_HEADS) of each (line, hypothesis) pair, from one teacher-forced pass."""
        if not pairs:
            return []
        return [f.attention for f in self.forced([sentences[i] for i, _ in pairs], [h.tokens for _, h in pairs], DEFAULT_HEADS, log_probs=False)]

    def forced(self, sources: Sequence[list[int]], targets: Sequence[list[int]], heads: AttentionHeads | None = None,
               log_probs: bool = True) -> list[Forced]:
        """One teacher-forced pass over (source, target) id pairs (inference/forced.py) on this engine's device, batch
        budget and precision: the alignments', the coverage penalty's, the glossary's and forced scores' pass. A
        multilingual model's target tag, first of a target, gets no probability of its own: the search forces it."""
        forced = force_ids(self.model, sources, targets, self.budget.tokens, self.device, lambda: half_autocast(self.device, self.precision),
                           heads, self.warn, log_probs=log_probs)
        if log_probs and self._tags:
            for f, target in zip(forced, targets):
                if target[:1] == [self._tags[1]]:
                    f.log_probs[0] = 0.0
        return forced

    def _rerank(self, sentences: list[list[int]], results: list[list[Hypothesis]], beta: float) -> dict[int, Tensor]:
        """In place: the hypotheses of each line scored by s(Y, X) = score + cp(X; Y) (inference/coverage.py) and sorted by
        it, best first. Returns their attention by id(), for the alignments to reuse."""
        pairs = [(i, h) for i, hyps in enumerate(results) for h in hyps]
        attention = self._attention(sentences, pairs)
        first = 1 if self._tags else 0  # a multilingual model's language tag is no source word to cover
        for (_, h), a in zip(pairs, attention):
            h.score += coverage_penalty(a, beta, first)
        for hyps in results:
            hyps.sort(key=lambda h: h.score, reverse=True)
        return {id(h): a for (_, h), a in zip(pairs, attention)}

    def _align(self, sentences: list[list[int]], results: list[list[Hypothesis]], units: Sequence[str | None],
               attention: dict[int, Tensor]) -> None:
        """Each hypothesis's alignment to its source in its line's unit (`--alignment`; None: none), from the attention
        `_rerank` read (by id of the hypothesis) or one teacher-forced pass over the others."""
        pairs = [(i, h) for i, hyps in enumerate(results) if units[i] for h in hyps]
        unread = [(i, h) for i, h in pairs if id(h) not in attention]
        attention = {**attention, **{id(h): a for (_, h), a in zip(unread, self._attention(sentences, unread))}}
        for i, h in pairs:
            h.alignment = self._alignment(attention[id(h)], sentences[i], h.tokens, units[i])

    def _alignment(self, attention: Tensor, source: list[int], target: list[int], unit: str) -> str:
        """A pair's alignment text (alignment_text) over its words or pieces: a multilingual model's language tags, the
        first token of each side, are no word of either, so their row and column are left out (positions count from
        the first word)."""
        s = 1 if self._tags and source[:1] == [self._tags[0]] else 0
        t = 1 if self._tags and target[:1] == [self._tags[1]] else 0
        return alignment_text(attention[t:, s:], [self.pieces[i] for i in source[s:]], [self.pieces[i] for i in target[t:]], unit)

    def score(self, lines: Iterable[str], targets: Iterable[str], alignment: str | None = None,
              settings: SearchSettings | None = None) -> Iterator[Scored]:
        """Forced decoding (`--score-only`): each (line, target) pair's score, in order, a window at a time;
        with `alignment` ("words" or "pieces") also the target's alignment to the line. `settings` (alpha,
        length_penalty, brevity_penalty) overrides the translator's for this call."""
        s = self.own_length(settings or self.settings)
        for window, texts in numbered_windows(lines, self.window, targets, "targets", "give exactly one target line per input line"):
            def truncated(side: str) -> Callable[[int, int], None]:
                return lambda i, n: self.warn(f"line {window[i][0]}: {side} of {n} tokens truncated to the model's {self.max_source_tokens}")

            tag = 1 if self._tags else 0
            sources = encode_lines(self.tokenizer.encode, [line for _, line in window], self.max_source_tokens - tag, truncated("source"))
            given = encode_lines(self.tokenizer.encode_target, texts, self.max_source_tokens - tag, truncated("target"))
            sources, given = self._tagged(sources, given)
            forced = self.forced(sources, given, DEFAULT_HEADS if alignment else None)
            for src, tgt, f in zip(sources, given, forced):
                first = 1 if self._tags and tgt[:1] == [self._tags[1]] else 0  # the target tag is no word of it
                result = scored(f, [self.pieces[t] for t in tgt[first:]], s.alpha, s.length_penalty, s.brevity.of(len(src), len(tgt)))
                result.token_log_probs = result.token_log_probs[first:]
                if alignment:
                    result.alignment = self._alignment(f.attention, src, tgt, alignment)
                yield result


def encode_prefixes(tokenizer: Tokenizer, numbers: list[int], prefixes: Sequence[str], limit: int, warn: Warn) -> list[list[int]]:
    """Target prefixes (of input lines `numbers`) as target ids: [] for an empty or blank one; one of more than
    `limit` tokens, the most the output can hold before EOS, is cut to fit (and reported)."""

    def truncated(index: int, tokens: int) -> None:
        warn(f"line {numbers[index]}: the prefix has {tokens} tokens, truncated to the model's {limit}")

    encoded = encode_lines(tokenizer.encode_target, prefixes, limit, truncated)
    for number, ids in zip(numbers, encoded):
        if tokenizer.unk_id is not None and tokenizer.unk_id in ids:
            warn(f"line {number}: the prefix holds text the model's vocabulary lacks: the translation holds <unk> there "
                 "(its text does not start with the prefix's)")
    return encoded


def paired(lines: Iterable[str], others: Iterable[str], name: str, hint: str) -> Iterator[tuple[str, str]]:
    """(line, other) pairs of two streams read side by side (target prefixes, translations to score: their
    `name`); NmtError (with `hint`) as soon as one runs out before the other, before the window holding
    that line is translated."""
    others = iter(others)
    count = 0
    for count, line in enumerate(lines, start=1):
        other = next(others, None)
        if other is None:
            raise NmtError(f"the {name} end after line {count - 1:,} but the input goes on", hint, exit_code=2)
        yield line, other
    if next(others, None) is not None:
        raise NmtError(f"the input ends after line {count:,} but the {name} go on", hint, exit_code=2)


PREFIX_HINT = "give one prefix per input line, an empty line for none"


def numbered_windows(lines: Iterable[str], size: int, others: Iterable[str] | None = None, name: str = "prefixes",
                     hint: str = PREFIX_HINT) -> Iterator[tuple[list[tuple[int, str]], list[str] | None]]:
    """The lines numbered from 1, `size` at a time, each window with its lines of `others` read side by side
    (target prefixes, or translations to score: see `paired`), None without."""
    pairs = ((line, None) for line in lines) if others is None else paired(lines, others, name, hint)
    numbered = enumerate(pairs, start=1)
    while window := list(itertools.islice(numbered, size)):
        yield [(n, line) for n, (line, _) in window], None if others is None else [other for _, (_, other) in window]


def encode_lines(encode: Callable[[list[str]], list[list[int]]], lines: Sequence[str], max_tokens: int,
                 truncated: Callable[[int, int], None] | None = None) -> list[list[int]]:
    """The token ids the search reads for each line: none for an empty or blank line (it translates to an
    empty line), at most `max_tokens` for a longer one; truncated(index, tokens) hears of each cut."""
    sentences = encode([line if line.strip() else "" for line in lines])
    for i, ids in enumerate(sentences):
        if len(ids) > max_tokens:
            if truncated is not None:
                truncated(i, len(ids))
            sentences[i] = ids[:max_tokens]
    return sentences
