"""Text in, text out: sentencepiece-encode, batch by length, beam search, decode, restore input order.

One output line for every input line, always: empty or blank lines give empty lines, over-long
lines are truncated to what the model can read (and reported), never dropped.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from nmtcli.inference.beam import Hypothesis, beam_search
from nmtcli.inference.greedy import greedy_search
from nmtcli.inference.tokenizer import load_tokenizer
from nmtcli.model.checkpoint import load_model

# warn(message): the CLI prints it on stderr; the core only reports.
Warn = Callable[[str], None]


@dataclass(frozen=True)
class SearchSettings:
    beam: int = 4  # sec. 6.1
    alpha: float = 0.6  # sec. 6.1, GNMT length penalty
    max_len_a: float = 1.0  # output length at most a * |x| + b: "input length + 50" (sec. 6.1)
    max_len_b: int = 50
    nbest: int = 1
    length_penalty: str = "gnmt"
    batch_tokens: int = 4096  # padded source tokens per batch
    chunk_lines: int = 1000  # lines read, translated and written at a time


class Translator:
    def __init__(self, model_dir: Path, device: str | torch.device = "cpu", settings: SearchSettings = SearchSettings(), warn: Warn | None = None):
        self.model, self.config_values = load_model(model_dir, device)
        self.tokenizer = load_tokenizer(Path(model_dir), self.config_values)
        self.device = torch.device(device)
        self.settings = settings
        self.warn = warn or (lambda message: None)
        cfg = self.model.config
        if self.tokenizer.size > cfg.vocab_size:
            raise ValueError(f"the tokenizer has {self.tokenizer.size} pieces but the model only {cfg.vocab_size}")
        self.max_source_tokens = cfg.max_positions - 1  # one position for EOS

    def translate(self, lines: Iterable[str]) -> Iterator[str]:
        """Translations of `lines`, in order, produced chunk by chunk (output starts before input ends)."""
        numbered = enumerate(lines, start=1)
        while chunk := list(itertools.islice(numbered, self.settings.chunk_lines)):
            for hyps in self._translate_chunk(chunk):
                yield self.detokenize(hyps[0].tokens) if hyps else ""

    def translate_nbest(self, lines: Iterable[str]) -> Iterator[list[tuple[str, Hypothesis]]]:
        numbered = enumerate(lines, start=1)
        while chunk := list(itertools.islice(numbered, self.settings.chunk_lines)):
            for hyps in self._translate_chunk(chunk):
                yield [(self.detokenize(h.tokens), h) for h in hyps]

    def detokenize(self, tokens: list[int]) -> str:
        # Byte-fallback pieces can spell a line break; one output line per input line is the contract.
        return self.tokenizer.decode(tokens).replace("\r", " ").replace("\n", " ")

    def _translate_chunk(self, chunk: list[tuple[int, str]]) -> list[list[Hypothesis]]:
        results: list[list[Hypothesis]] = [[] for _ in chunk]
        encoded: list[tuple[int, list[int]]] = []
        texts = [line for _, line in chunk]
        ids_all = self.tokenizer.encode([t if t.strip() else "" for t in texts])
        for pos, ((number, _), ids) in enumerate(zip(chunk, ids_all)):
            if not ids:
                continue  # an empty or blank line translates to an empty line
            if len(ids) > self.max_source_tokens:
                self.warn(f"line {number}: {len(ids)} tokens, truncated to the model's {self.max_source_tokens}")
                ids = ids[: self.max_source_tokens]
            encoded.append((pos, ids))
        # Sorting by length keeps padding low; results go back to their input positions.
        encoded.sort(key=lambda item: len(item[1]))
        for batch in self._batches(encoded):
            src = self._pad([ids for _, ids in batch])
            s = self.settings
            if s.beam == 1:
                hyps = greedy_search(self.model, src, s.max_len_a, s.max_len_b)
            else:
                hyps = beam_search(self.model, src, s.beam, s.alpha, s.max_len_a, s.max_len_b, s.nbest, s.length_penalty)
            for (pos, _), h in zip(batch, hyps):
                results[pos] = h
        return results

    def _batches(self, encoded: list[tuple[int, list[int]]]) -> Iterator[list[tuple[int, list[int]]]]:
        batch: list[tuple[int, list[int]]] = []
        for item in encoded:
            longest = len(item[1]) + 1  # sorted ascending: the newest item is the longest
            if batch and longest * (len(batch) + 1) > self.settings.batch_tokens:
                yield batch
                batch = []
            batch.append(item)
        if batch:
            yield batch

    def _pad(self, sentences: list[list[int]]) -> torch.Tensor:
        cfg = self.model.config
        width = max(len(s) for s in sentences) + 1
        src = torch.full((len(sentences), width), cfg.pad_id, dtype=torch.long)
        for i, ids in enumerate(sentences):
            src[i, : len(ids)] = torch.tensor(ids)
            src[i, len(ids)] = cfg.eos_id
        return src.to(self.device)
