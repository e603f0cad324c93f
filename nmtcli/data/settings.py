"""What `nmt prepare` is asked to do: its settings, the corpora it reads (PairSource) and the progress it reports.

Every stage (data/prepare.py lists them) takes the same `PrepareSettings`; the fields that say how the work is done
(workers, chunk sizes) are left out of the stages' fingerprints (data/fingerprints.py), the others are in them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from nmtcli.data.cleaning import TextFilter
from nmtcli.data.text import MAX_RATIO, MAX_TOKENS, RATIO_SLACK
from nmtcli.threads import usable_cpus

SAMPLES = 20  # pairs each text filter's drops are sampled to (cleaning.jsonl, --clean-report)

# progress(task, done, total): the CLI draws it; the core only reports.
Progress = Callable[[str, int, "int | None"], None]


def no_progress(task: str, done: int, total: int | None) -> None:
    pass


@dataclass(frozen=True)
class PrepareSettings:
    source_lang: str
    target_lang: str
    vocab_size: int | None = None  # None: from the training pairs (vocab_size.py); sec. 5.1's 37,000 is for 4.5M pairs
    max_tokens: int = MAX_TOKENS
    max_ratio: float = MAX_RATIO
    ratio_slack: int = RATIO_SLACK  # tokens the longer side may have beyond max_ratio x the shorter (text.keep_pair)
    spm_sentences: int = 1_000_000  # training pairs sampled (seeded) to train sentencepiece: 2M lines
    seed: int = 1
    drop_duplicates: bool = True
    drop_markup: bool = False
    drop_wrong_script: bool = False
    # The filters of issue 53 (cleaning.py), on by default: studies/cleaning.py measured them.
    drop_long_words: bool = True
    drop_non_alphabetic: bool = True
    drop_url_mismatch: bool = True
    drop_number_mismatch: bool = True
    drop_copies: bool = True
    drop_wrong_language: bool = True
    drop_misaligned: bool = True  # a second pass over the cleaned pairs (lexical.py)
    # How the work is done, not what it produces (left out of the fingerprints):
    workers: int = 0  # encoding processes and sentencepiece training threads; 0: all cores
    chunk_pairs: int = 100_000  # pairs per encoding chunk: the unit of resume

    def fingerprint_fields(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("workers", "chunk_pairs")}

    def text_filter(self) -> TextFilter:
        """The text filters these settings switch on, sampling what each drops for cleaning.jsonl."""
        return TextFilter(self.source_lang, self.target_lang, SAMPLES, self.seed, self.workers or usable_cpus(), markup=self.drop_markup, script=self.drop_wrong_script,
                          long_word=self.drop_long_words, non_alphabetic=self.drop_non_alphabetic, url_mismatch=self.drop_url_mismatch,
                          number_mismatch=self.drop_number_mismatch, copy=self.drop_copies, wrong_language=self.drop_wrong_language,
                          duplicate=self.drop_duplicates)


class PairSource(Protocol):
    def count(self) -> int: ...
    def batches(self) -> Iterator[list[tuple[str, str]]]: ...
    def identity(self) -> dict[str, Any]: ...
    def describe(self) -> Any: ...

