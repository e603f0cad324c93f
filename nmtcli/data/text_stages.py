"""The stages of `nmt prepare` over text: 1, the text filters and the plain-text references; 2, the joint BPE.

  text            source pairs -> text filters (empty, markup, script, duplicates, ... cleaning.py) -> .work/train.<lang>,
                  then the short copies nothing vouches for (short_copies.py) and the misaligned pairs (lexical.py) out,
                  each a pass of its own, a sample of what each filter dropped ->
                  cleaning.jsonl, and the plain-text valid/test references
  sentencepiece   a seeded sample of the cleaned training pairs -> sentencepiece.model

Each streams its input: memory does not grow with the corpus.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from nmtcli.data.lexical import misaligned_stage
from nmtcli.data.settings import PairSource, PrepareSettings, Progress
from nmtcli.data.short_copies import short_copy_stage
from nmtcli.data.sources import TextFiles
from nmtcli.data.text import SPM_FILE, read_lines, train_sentencepiece
from nmtcli.errors import NmtError
from nmtcli.files import atomic_copy, atomic_path

CLEANING_SAMPLE = "cleaning.jsonl"  # up to SAMPLES pairs each text filter dropped, drawn with the seed: --clean-report
CHUNK = 10_000  # sentences read or sampled between two progress reports


def text_stage(out_dir: Path, work: Path, sources: dict[str, PairSource], settings: PrepareSettings, progress: Progress) -> dict[str, Any]:
    """Stage 1: the training pairs through the text filters into `work`/train.<lang>, their sample of drops into
    `out_dir`/cleaning.jsonl, and the valid and test pairs as they are into `out_dir`; returns the counts."""
    src, tgt = settings.source_lang, settings.target_lang
    counts: dict[str, Any] = {}
    text_filter = settings.text_filter()
    total = sources["train"].count()
    seen = 0
    progress("cleaning train", 0, total)
    with ExitStack() as stack:
        stack.enter_context(text_filter)  # its worker processes end with the stage
        files = [stack.enter_context(open(stack.enter_context(atomic_path(work / f"train.{lang}")), "w", encoding="utf-8", newline="\n")) for lang in (src, tgt)]
        for batch in sources["train"].batches():
            kept = text_filter.keep(batch)
            files[0].write("".join(s + "\n" for s, _ in kept))
            files[1].write("".join(t + "\n" for _, t in kept))
            seen += len(batch)
            progress("cleaning train", seen, total)
        for f in files:
            f.close()  # flushed before the atomic rename of the ExitStack
    filters = text_filter.counts()
    train = {
        "input_pairs": seen,
        "clean_pairs": filters[-1]["after"] if filters else seen,
        "filters": filters,
        "dropped": {k: v for k, v in text_filter.dropped.items() if v},
        **({"language_unknown": text_filter.languages_unknown} if text_filter.languages_unknown else {}),
    }
    records = [{"filter": name, "source": s, "target": t} for name, sample in text_filter.samples.items() for s, t in sample]
    if settings.drop_copies and train["clean_pairs"]:  # the copy filter's second part: short copies nothing vouches for
        train, copies = short_copy_stage(work, (src, tgt), settings.seed, train, text_filter.sample_size, progress)
        records += copies
    if settings.drop_misaligned and train["clean_pairs"]:
        train, misaligned = misaligned_stage(work, (src, tgt), settings.seed, train, text_filter.sample_size, progress, text_filter.workers)
        records += misaligned
    counts["train"] = train
    write_samples(out_dir / CLEANING_SAMPLE, records)
    if counts["train"]["clean_pairs"] == 0:
        if misaligned := train["dropped"].get("misaligned"):
            raise NmtError(f"no training pair survived cleaning: the misaligned filter dropped the last {misaligned:,} (their words do not "
                           "translate each other)", "check that each line of the source file is the translation of the same line of the "
                           "target file, or pass --keep-misaligned")
        last = train["filters"][-1] if train["filters"] else {}
        if last.get("filter") == "short_copy" and last["before"]:
            raise NmtError(f"no training pair survived cleaning: the last {last['before']:,} were one- or two-word copies (the target is the "
                           "source) that no other pair's target vouches for", "check that the target file is a translation, or pass --keep-copies")
        raise NmtError("no training pair survived cleaning", "check that the files are aligned and not empty")

    # Plain-text references: every line, uncleaned, in order (what `nmt score` compares against).
    for split in ("valid", "test"):
        if split not in sources:
            continue
        source = sources[split]
        if isinstance(source, TextFiles):
            for lang, path in zip((src, tgt), (source.src, source.tgt)):
                atomic_copy(path, out_dir / f"{split}.{lang}")
            lines = source.count()
        else:
            lines = 0
            with ExitStack() as stack:
                files = [stack.enter_context(open(stack.enter_context(atomic_path(out_dir / f"{split}.{lang}")), "w", encoding="utf-8", newline="\n")) for lang in (src, tgt)]
                for batch in source.batches():
                    files[0].write("".join(s + "\n" for s, _ in batch))
                    files[1].write("".join(t + "\n" for _, t in batch))
                    lines += len(batch)
                for f in files:
                    f.close()
        counts[split] = {"lines": lines}
    return counts


def read_text_pairs(work_or_out: Path, split: str, settings: PrepareSettings) -> Iterator[tuple[str, str]]:
    """The pairs of `<split>.<src>` and `<split>.<tgt>` in a dir, streamed (unequal line counts raise)."""
    return zip(
        read_lines(work_or_out / f"{split}.{settings.source_lang}"),
        read_lines(work_or_out / f"{split}.{settings.target_lang}"),
        strict=True,
    )


def write_samples(path: Path, records: list[dict[str, str]]) -> None:
    """The dropped pairs sampled, one JSON object a line (a line of text may hold a tab)."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


def write_clean_report(data_dir: Path, path: Path) -> int:
    """--clean-report FILE: the data dir's sample of what each text filter dropped, copied to `path`; returns its pairs."""
    sample = Path(data_dir) / CLEANING_SAMPLE
    if not sample.is_file():
        raise NmtError(f"{data_dir} has no {CLEANING_SAMPLE}: it was prepared by an older nmt", "prepare it again into a new dir (-o)")
    atomic_copy(sample, Path(path))
    return sum(1 for _ in read_lines(sample))


# --- stage 2: sentencepiece --------------------------------------------------------------------------


def sentencepiece_stage(out_dir: Path, work: Path, settings: PrepareSettings, clean_pairs: int, progress: Progress,
                        symbols: tuple[str, ...] = ()) -> dict[str, Any]:
    """Stage 2: train the joint BPE on a seeded sample of the cleaned training pairs (both sides of each); `symbols`: reserved
    pieces of its own (back-translation's tag)."""
    sample = min(settings.spm_sentences, clean_pairs)
    if sample < clean_pairs:
        chosen = np.sort(np.random.default_rng(settings.seed).choice(clean_pairs, size=sample, replace=False))
    else:
        chosen = np.arange(clean_pairs)
    chosen = chosen.tolist()  # Python ints: compared once per line below

    def sampled() -> Iterator[str]:
        progress("sampling for sentencepiece", 0, sample)
        position = 0  # index into `chosen`
        for i, (s, t) in enumerate(read_text_pairs(work, "train", settings)):
            if position < len(chosen) and chosen[position] == i:
                position += 1
                yield s
                yield t
                if position % CHUNK == 0:
                    progress("sampling for sentencepiece", position, sample)
        progress("sampling for sentencepiece", position, sample)
        progress("training sentencepiece", 0, None)  # sentencepiece reports nothing while it trains

    train_sentencepiece(sampled(), out_dir / SPM_FILE, settings.vocab_size, 2 * sample, settings.seed, settings.workers, symbols)
    progress("training sentencepiece", 1, 1)
    return {"pairs_sampled": int(sample)}

