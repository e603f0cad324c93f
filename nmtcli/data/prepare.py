"""`nmt prepare`: clean, train the joint BPE, binarize, write `manifest.json` (sec. 5.1's data, at scale).

A prepared data dir holds:
  sentencepiece.model                 joint BPE over both languages
  train.<src>.bin/.idx, train.<tgt>.bin/.idx, valid.*.bin/.idx   binarized ids (see shards.py)
  valid.<src>, valid.<tgt>, test.<src>, test.<tgt>                 plain text, every line, for scoring
  manifest.json                       written last: what went in, what was dropped, checksums, versions

The work runs in stages, each streaming its input (memory does not grow with the corpus) and each
finished by an atomic rename plus a marker in `.work/` that records a fingerprint of everything the
stage's output depends on:

  text            source pairs -> text filters (empty, markup, script, duplicates) -> .work/train.<lang>,
                  and the plain-text valid/test references
  score           (a score filter's model given) the cleaned pairs scored, the worst dropped: .work/scored/ (score_filter.py)
  sentencepiece   a seeded sample of the cleaned training pairs -> sentencepiece.model
                  (with --vocab-from, the "vocabulary" stage instead: the model's tokenizer files copied)
  encode          cleaned pairs -> token filters (too long, length ratio) -> chunk files in .work/,
                  merged into the binarized arrays; valid likewise (no ratio filter)

A stage whose marker matches is skipped, and the encode stage keeps every finished chunk, so an
interrupted `prepare` resumes where it stopped. Nothing depends on timing, thread counts or chunk
sizes, so the same inputs and settings give byte-identical data files whether or not a run was
interrupted. Once `manifest.json` is written `.work/` is removed; a later run with the same inputs
and settings finds the manifest's fingerprint and checksums in order and returns at once.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from nmtcli.checksums import file_sha256
from nmtcli.data.encoding import Encoder, PieceMap
from nmtcli.data.shards import OFFSET_DTYPE, token_dtype
from nmtcli.data.sources import BundledTsv, ParquetFiles, TextFiles
from nmtcli.data.cleaning import TextFilter
from nmtcli.data.score_filter import DROPPED as SCORE_DROPPED
from nmtcli.data.score_filter import ScoreFilter, score_stage
from nmtcli.data.text import MAX_RATIO, MAX_TOKENS, RATIO_SLACK, SPM_FILE, load_sentencepiece, read_lines, train_sentencepiece
from nmtcli.data.vocabulary import ModelVocabulary, check_languages, tokenizer_files
from nmtcli.data.vocab_size import RULE as VOCAB_RULE
from nmtcli.data.vocab_size import vocab_choice
from nmtcli.errors import NmtError
from nmtcli.files import atomic_copy, atomic_path, atomic_write_json, read_json
from nmtcli.provenance import versions
from nmtcli.threads import usable_cpus

if TYPE_CHECKING:
    from nmtcli.data.backtranslation import Synthetic

MANIFEST = "manifest.json"
CLEANING_SAMPLE = "cleaning.jsonl"  # up to SAMPLES pairs each text filter dropped, drawn with the seed: --clean-report
SAMPLES = 20
WORK = ".work"
CHUNK = 10_000  # sentences read or sampled between two progress reports

# progress(task, done, total): the CLI draws it; the core only reports.
Progress = Callable[[str, int, "int | None"], None]


def _no_progress(task: str, done: int, total: int | None) -> None:
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


def _fingerprint(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _read_marker(work: Path, stage: str, key: str) -> dict[str, Any] | None:
    path = work / f"{stage}.json"
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return marker if marker.get("key") == key else None


def _write_marker(work: Path, stage: str, key: str, counts: dict[str, Any]) -> None:
    atomic_write_json(work / f"{stage}.json", {"key": key, "counts": counts})


# --- stage 1: text ---------------------------------------------------------------------------------


def _text_stage(out_dir: Path, work: Path, sources: dict[str, PairSource], settings: PrepareSettings, progress: Progress) -> dict[str, Any]:
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
    counts["train"] = {
        "input_pairs": seen,
        "clean_pairs": filters[-1]["after"] if filters else seen,
        "filters": filters,
        "dropped": {k: v for k, v in text_filter.dropped.items() if v},
        **({"language_unknown": text_filter.languages_unknown} if text_filter.languages_unknown else {}),
    }
    write_samples(out_dir / CLEANING_SAMPLE, [{"filter": name, "source": s, "target": t}
                                              for name, sample in text_filter.samples.items() for s, t in sample])
    if counts["train"]["clean_pairs"] == 0:
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


def _read_text_pairs(work_or_out: Path, split: str, settings: PrepareSettings) -> Iterator[tuple[str, str]]:
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


def _sentencepiece_stage(out_dir: Path, work: Path, settings: PrepareSettings, clean_pairs: int, progress: Progress,
                         symbols: tuple[str, ...] = ()) -> dict[str, Any]:
    """Train the joint BPE on a seeded sample of the cleaned training pairs (both sides of each); `symbols`: reserved
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
        for i, (s, t) in enumerate(_read_text_pairs(work, "train", settings)):
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


# --- stage 3: encode ---------------------------------------------------------------------------------


def _encode_chunk(encoder: Encoder, pairs: list[tuple[str, str]], settings: PrepareSettings, max_ratio: float | None,
                  tags: tuple[int, int] | None = None) -> dict[str, np.ndarray]:
    """Encode a chunk on all cores, apply the token filters, return the kept ids and the drop counts. `tags`: the
    source and target language tag ids put first on each side of the kept pairs (multilingual data, multilingual.py),
    after the filters, which see the text's own tokens."""
    src_tokens, src_len = encoder.encode([s for s, _ in pairs], "source")
    tgt_tokens, tgt_len = encoder.encode([t for _, t in pairs], "target")
    # The same rules as text.keep_pair, in its order, for a whole chunk at once.
    empty = (src_len == 0) | (tgt_len == 0)
    too_long = ~empty & ((src_len > settings.max_tokens) | (tgt_len > settings.max_tokens))
    ratio = np.zeros_like(empty)
    if max_ratio is not None:
        ratio = ~empty & ~too_long & (np.maximum(src_len, tgt_len) > max_ratio * np.minimum(src_len, tgt_len) + settings.ratio_slack)
    keep = ~(empty | too_long | ratio)
    unknown = [encoder.unknown([pair[k] for pair in pairs], tokens, lengths, side)
               for k, (tokens, lengths, side) in enumerate(((src_tokens, src_len, "source"), (tgt_tokens, tgt_len, "target")))]
    arrays = {
        "dropped": np.array([empty.sum(), too_long.sum(), ratio.sum()], dtype=np.int64),
        "unknown_lines": np.array([n for n, _ in unknown], dtype=np.int64),  # lines holding text the vocabulary lacks
        "unknown_characters": np.array([c for _, c in unknown]),
        "src_tokens": src_tokens[np.repeat(keep, src_len)],
        "src_lengths": src_len[keep],
        "tgt_tokens": tgt_tokens[np.repeat(keep, tgt_len)],
        "tgt_lengths": tgt_len[keep],
    }
    if tags is not None:
        for side, tag in zip(("src", "tgt"), tags):
            if tag is None:  # back-translation's tag: the source side's only
                continue
            lengths = arrays[f"{side}_lengths"]
            starts = np.cumsum(lengths) - lengths  # where each sentence begins in the flat array
            arrays[f"{side}_tokens"] = np.insert(arrays[f"{side}_tokens"], starts, tag)
            arrays[f"{side}_lengths"] = lengths + 1
    return arrays


DROP_NAMES = ("empty", "too_long", "ratio")


def _merge(parts: list[Path], out_dir: Path, split: str, settings: PrepareSettings) -> dict[str, Any]:
    """Concatenate chunk files into `<split>.<lang>.bin/.idx` (atomic; offsets written last)."""
    totals = {"pairs": 0, "source_tokens": 0, "target_tokens": 0, **{f"drop_{n}": 0 for n in DROP_NAMES},
              "unknown": [[0, set()], [0, set()]]}
    for side, lang, key in (("src", settings.source_lang, "source_tokens"), ("tgt", settings.target_lang, "target_tokens")):
        offsets = [np.zeros(1, dtype=OFFSET_DTYPE)]
        end = 0
        with atomic_path(out_dir / f"{split}.{lang}.bin") as tmp, open(tmp, "wb") as f:
            for part in parts:
                with np.load(part) as chunk:
                    f.write(chunk[f"{side}_tokens"].tobytes())
                    lengths = chunk[f"{side}_lengths"]
                    offsets.append(end + np.cumsum(lengths, dtype=OFFSET_DTYPE))
                    end += int(lengths.sum())
                    if side == "src":
                        totals["pairs"] += len(lengths)
                        for name, n in zip(DROP_NAMES, chunk["dropped"]):
                            totals[f"drop_{name}"] += int(n)
                        if "unknown_lines" in chunk:  # chunks of an older nmt have no count
                            for k, (n, characters) in enumerate(zip(chunk["unknown_lines"], chunk["unknown_characters"])):
                                totals["unknown"][k][0] += int(n)
                                totals["unknown"][k][1].update(str(characters))
        with atomic_path(out_dir / f"{split}.{lang}.idx") as tmp:
            tmp.write_bytes(np.concatenate(offsets).astype(OFFSET_DTYPE).tobytes())  # a failed write keeps its errno
        totals[key] = end
    return totals


def _encode_split(
    encoder: Encoder,
    pairs: Iterator[tuple[str, str]],
    total: int,
    parts_dir: Path,
    out_dir: Path,
    split: str,
    settings: PrepareSettings,
    max_ratio: float | None,
    progress: Progress,
) -> dict[str, Any]:
    parts, resumed = _encode_parts(encoder, pairs, total, parts_dir, split, settings, max_ratio, progress)
    return _merged(parts, out_dir, split, settings, resumed)


def _encode_parts(encoder: Encoder, pairs: Iterator[tuple[str, str]], total: int, parts_dir: Path, split: str, settings: PrepareSettings,
                  max_ratio: float | None, progress: Progress, tags: tuple[int, int] | None = None,
                  name: str | None = None) -> tuple[list[Path], int]:
    """Encode `pairs` into chunk files `parts_dir/<name or split>-N.npz`; returns (the files, how many were there already)."""
    parts_dir.mkdir(parents=True, exist_ok=True)
    parts, done, index, resumed = [], 0, 0, 0
    task = f"encoding {name or split}"
    progress(task, 0, total)
    while True:
        chunk = list(itertools.islice(pairs, settings.chunk_pairs))
        if not chunk:
            break
        part = parts_dir / f"{name or split}-{index:06d}.npz"
        # Chunk boundaries depend only on line numbers, so a finished chunk of an interrupted run
        # is exactly the chunk this run would write.
        if part.is_file():
            resumed += 1
        else:
            arrays = _encode_chunk(encoder, chunk, settings, max_ratio, tags)
            with atomic_path(part) as tmp:
                with open(tmp, "wb") as f:
                    np.savez(f, **arrays)
        parts.append(part)
        done += len(chunk)
        index += 1
        progress(task, done, total)
    return parts, resumed


def _merged(parts: list[Path], out_dir: Path, split: str, settings: PrepareSettings, resumed: int) -> dict[str, Any]:
    """The chunk files merged into the split's arrays (`_merge`), and the split's counts."""
    totals = _merge(parts, out_dir, split, settings)
    return {
        "pairs": totals["pairs"],
        "dropped": {n: totals[f"drop_{n}"] for n in DROP_NAMES if totals[f"drop_{n}"]},
        "source_tokens": totals["source_tokens"],
        "target_tokens": totals["target_tokens"],
        "resumed_chunks": resumed,
        **({"unknown": {f"{side}_{what}": value for side, (lines, characters) in zip(("source", "target"), totals["unknown"])
                        for what, value in (("lines", lines), ("characters", "".join(sorted(characters))))}}
           if any(lines for lines, _ in totals["unknown"]) else {}),
    }


def _encoder(out_dir: Path, vocab_size: int, workers: int, vocabulary: ModelVocabulary | None) -> Encoder:
    """nmt's joint sentencepiece model, or the tokenizer files --vocab-from copied (Marian: one model per side;
    M2M-100 and NLLB-200: one model, pieces through vocab.json, each side after its language's tag)."""
    if vocabulary is None or vocabulary.kind == "sentencepiece":
        model = tokenizer_files(vocabulary.tokenizer if vocabulary else None)["model"]
        return Encoder(out_dir / model, token_dtype(vocab_size), workers)
    files = tokenizer_files(vocabulary.tokenizer)
    if vocabulary.multilingual:
        pieces = PieceMap(str(out_dir / files["vocab"]), vocabulary.special_ids["unk_id"], vocabulary.tag_ids())
        return Encoder(out_dir / files["model"], token_dtype(vocab_size), workers, pieces=pieces)
    pieces = PieceMap(str(out_dir / files["vocab"]), vocabulary.special_ids["unk_id"])
    return Encoder(out_dir / files["source"], token_dtype(vocab_size), workers, out_dir / files["target"], pieces)


def _encode_stage(out_dir: Path, parts_dir: Path, settings: PrepareSettings, vocab_size: int, text_counts: dict[str, Any],
                  progress: Progress, vocabulary: ModelVocabulary | None = None, text_dir: Path | None = None,
                  synthetic: Synthetic | None = None) -> tuple[dict[str, Any], int]:
    """Cleaned training pairs (in `text_dir`, default .work/; and back-translated ones, mixed: backtranslation.py) and the
    valid split -> binarized arrays; returns (counts, chunks resumed)."""
    text_dir = text_dir or out_dir / WORK
    with _encoder(out_dir, vocab_size, settings.workers, vocabulary) as encoder:
        if synthetic is not None:
            from nmtcli.data.backtranslation import encode_train

            train = encode_train(encoder, out_dir, text_dir, parts_dir, settings, text_counts, synthetic, progress)
        else:
            train = _encode_split(encoder, _read_text_pairs(text_dir, "train", settings), text_counts["train"]["clean_pairs"], parts_dir,
                                  out_dir, "train", settings, settings.max_ratio, progress)
        # Validation keeps its natural length ratios: only empty and over-long pairs are dropped.
        valid = _encode_split(encoder, _read_text_pairs(out_dir, "valid", settings), text_counts["valid"]["lines"], parts_dir,
                              out_dir, "valid", settings, None, progress)
    if train["pairs"] == 0:
        raise NmtError("no training pair survived cleaning", "check that the files are aligned and not empty, and --max-tokens")
    resumed = train.pop("resumed_chunks") + valid.pop("resumed_chunks")
    return {"train": train, "valid": valid}, resumed


# --- the pipeline -----------------------------------------------------------------------------------


def _manifest_is_current(out_dir: Path, fingerprint: str) -> dict[str, Any] | None:
    try:
        manifest = json.loads((out_dir / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("fingerprint") != fingerprint:
        return None
    for name, digest in manifest.get("files", {}).items():
        if not (out_dir / name).is_file() or file_sha256(out_dir / name) != digest:
            return None
    return manifest


def _stage_keys(sources: dict[str, PairSource], settings: PrepareSettings, vocabulary: ModelVocabulary | None = None,
                score_filter: ScoreFilter | None = None) -> tuple[str, str, str]:
    """The fingerprints of the text, sentencepiece and encode stages: each of everything its output depends on (the
    score filter's models and percent, where it runs between the text and the vocabulary)."""
    # The switches, not the filters they make: that would load the language detector before anything is written.
    filters = [settings.drop_long_words, settings.drop_non_alphabetic, settings.drop_url_mismatch, settings.drop_number_mismatch,
               settings.drop_copies, settings.drop_wrong_language]
    text_key = _fingerprint("text", {k: v.identity() for k, v in sorted(sources.items())}, settings.source_lang, settings.target_lang,
                            settings.drop_duplicates, settings.drop_markup, settings.drop_wrong_script, filters, settings.seed, SAMPLES)
    # A vocabulary size from the corpus is a function of the text stage's output: the rule stands for it.
    vocab = settings.vocab_size if settings.vocab_size is not None else VOCAB_RULE
    text = text_key if score_filter is None else score_filter.key(text_key)
    spm_key = _fingerprint("sentencepiece", text, vocab, settings.spm_sentences, settings.seed)
    if vocabulary is not None:  # the model's tokenizer files, by content, replace the trained sentencepiece model
        spm_key = _fingerprint("vocabulary", text, vocabulary.tokenizer, vocabulary.files, vocabulary.special_ids, vocabulary.size,
                               *([vocabulary.tags] if vocabulary.tags else []))
    # The slack joined the ratio filter later: without it (0, the default) a data dir keeps the fingerprint it was made with.
    ratio = (settings.max_ratio,) if settings.ratio_slack == 0 else (settings.max_ratio, settings.ratio_slack)
    encode_key = _fingerprint("encode", spm_key, settings.max_tokens, *ratio)
    return text_key, spm_key, encode_key


def _stage(work: Path, stage: str, key: str, outputs: list[Path], run: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """(counts, "reused") when the stage's marker matches `key` and its outputs exist; else run it: (counts, "done")."""
    if (marker := _read_marker(work, stage, key)) is not None and all(p.is_file() for p in outputs):
        return marker["counts"], "reused"
    counts = run()
    _write_marker(work, stage, key, counts)
    return counts, "done"


def prepare(
    out_dir: Path,
    sources: dict[str, PairSource],
    settings: PrepareSettings,
    name: str,
    progress: Progress = _no_progress,
    recipe: dict[str, Any] | None = None,
    origin: dict[str, Any] | None = None,
    vocabulary: ModelVocabulary | None = None,
    synthetic: Synthetic | None = None,
    score_filter: ScoreFilter | None = None,
) -> dict[str, Any]:
    """Run (or resume, or skip) the three stages over `sources` (train, valid, optional test); returns the manifest.

    With `vocabulary` (--vocab-from) the data is encoded with a model's tokenizer instead of a new one; with
    `score_filter` the cleaned training pairs are scored and the worst dropped before it (data/score_filter.py); with
    `synthetic`, back-translated pairs are cleaned, tagged and mixed with the real ones (backtranslation.py).
    The manifest gets `"reused": true` when a finished data dir matched and nothing was done.
    """
    src, tgt = settings.source_lang, settings.target_lang
    if src == tgt:
        raise NmtError(f"source and target language are both {src!r}", "pass two different codes with -s and -t")
    if vocabulary is not None:
        check_languages(vocabulary, src, tgt)
    out_dir = Path(out_dir)
    text_key, spm_key, encode_key = _stage_keys(sources, settings, vocabulary, score_filter)
    if synthetic is not None:  # its tag is a piece of the vocabulary; its pairs and their mix, of the data
        spm_key = _fingerprint(spm_key, synthetic.tag)
        encode_key = _fingerprint(encode_key, spm_key, *synthetic.identity())
    if (current := _manifest_is_current(out_dir, encode_key)) is not None:
        return {**current, "reused": True}

    started = time.time()
    out_dir.mkdir(parents=True, exist_ok=True)
    work = out_dir / WORK
    work.mkdir(exist_ok=True)
    # An older manifest would describe files about to be replaced: remove it first, write it last.
    (out_dir / MANIFEST).unlink(missing_ok=True)
    stages: dict[str, str] = {}
    resumed = 0

    seconds: dict[str, float] = {}
    clock = time.time()
    text_counts, stages["text"] = _stage(work, "text", text_key, [work / f"train.{lang}" for lang in (src, tgt)] + [out_dir / CLEANING_SAMPLE],
                                         lambda: _text_stage(out_dir, work, sources, settings, progress))
    if synthetic is not None:
        from nmtcli.data import backtranslation

        synthetic_text, stages["backtranslation text"] = backtranslation.clean_stage(out_dir, work, synthetic, settings, progress)
    seconds["text"], clock = round(time.time() - clock, 2), time.time()
    text = work  # the training text the vocabulary and the encoding read: the cleaned pairs, or those the score filter kept
    if score_filter is not None:
        text = work / "scored"
        text_counts, stages["score"] = _stage(work, "score", score_filter.key(text_key), [text / f"train.{lang}" for lang in (src, tgt)] + [out_dir / SCORE_DROPPED],
                                              lambda: score_stage(out_dir, work, text_key, text_counts, (src, tgt), score_filter, settings.seed, SAMPLES,
                                                                  out_dir / CLEANING_SAMPLE, progress))
        seconds["score"], clock = round(time.time() - clock, 2), time.time()
    else:
        (out_dir / SCORE_DROPPED).unlink(missing_ok=True)  # an earlier run's, with the filter

    if vocabulary is None:
        vocab_record = vocab_choice(settings.vocab_size, text_counts["train"]["clean_pairs"], recipe)
        spm_counts, stages["sentencepiece"] = _stage(
            work, "sentencepiece", spm_key, [out_dir / SPM_FILE],
            lambda: _sentencepiece_stage(out_dir, text, replace(settings, vocab_size=vocab_record["asked"]),
                                         text_counts["train"]["clean_pairs"], progress, (synthetic.tag,) if synthetic and synthetic.tag else ()))
        vocab_size = load_sentencepiece(out_dir / SPM_FILE).get_piece_size()
        seconds["sentencepiece"], clock = round(time.time() - clock, 2), time.time()
    else:
        vocab_record = {"asked": vocabulary.size, "by": "model"}
        spm_counts, stages["vocabulary"] = _stage(work, "vocabulary", spm_key, [out_dir / name for name in vocabulary.files],
                                                  lambda: vocabulary.copy_into(out_dir))
        vocab_size = vocabulary.size
        seconds["vocabulary"], clock = round(time.time() - clock, 2), time.time()
    # The tokenizer files of another layout, left by an earlier prepare into this dir, describe nothing here.
    kept = set(tokenizer_files(vocabulary.tokenizer if vocabulary else None).values())
    for stale in {SPM_FILE, *tokenizer_files({"kind": "marian"}).values()} - kept:
        (out_dir / stale).unlink(missing_ok=True)

    encoded = [out_dir / f"{split}.{lang}.{ext}" for split in ("train", "valid") for lang in (src, tgt) for ext in ("bin", "idx")]
    if (marker := _read_marker(work, "encode", encode_key)) is None or not all(p.is_file() for p in encoded):
        encode_counts, resumed = _encode_stage(out_dir, work / f"encode-{encode_key[:16]}", settings, vocab_size,
                                               text_counts, progress, vocabulary, text, synthetic)
        _write_marker(work, "encode", encode_key, encode_counts)
        stages["encode"] = "resumed" if resumed else "done"
    else:
        encode_counts, stages["encode"] = marker["counts"], "reused"
    seconds["encode"] = round(time.time() - clock, 2)

    splits = _split_counts(text_counts, encode_counts, settings)
    files = sorted(p.name for p in out_dir.iterdir() if p.is_file() and not p.name.startswith("."))
    manifest = {
        "format": "nmt-data",
        "format_version": 1,
        "name": name,
        "recipe": recipe,
        "source": origin,
        "source_lang": src,
        "target_lang": tgt,
        "vocab_size": vocab_size,
        "vocabulary": vocab_record,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.time() - started, 1),
        "stages": stages,
        "stage_seconds": seconds,
        "resumed_chunks": resumed if stages["encode"] != "reused" else 0,
        "inputs": {split: source.describe() for split, source in sources.items()},
        "settings": asdict(settings),
        **({"score_filter": score_filter.describe()} if score_filter is not None else {}),
        **({"sentencepiece": spm_counts} if vocabulary is None else _vocabulary_entries(vocabulary)),
        "splits": splits,
        **({"backtranslation": backtranslation.manifest_entry(synthetic, synthetic_text, encode_counts["train"]["backtranslation"])}
           if synthetic is not None else {}),
        "fingerprint": encode_key,
        "files": {f: file_sha256(out_dir / f) for f in files if f != MANIFEST},
        "versions": versions(),
    }
    atomic_write_json(out_dir / MANIFEST, manifest)
    shutil.rmtree(work, ignore_errors=True)
    return manifest


def _vocabulary_entries(vocabulary: ModelVocabulary) -> dict[str, Any]:
    """The manifest's record of --vocab-from: the model (id, revision, tokenizer files' sha256), and the
    tokenizer section and special ids training needs to read the data as that model does."""
    tags = {"language_tags": vocabulary.tags} if vocabulary.tags else {}  # a multilingual model's codes of the data's languages
    return {"vocab_from": vocabulary.describe(), "tokenizer": vocabulary.tokenizer, "special_ids": vocabulary.special_ids, **tags}


def _split_counts(text: dict[str, Any], encode: dict[str, Any], settings: PrepareSettings) -> dict[str, Any]:
    """Per split: pairs in, pairs kept, and every filter in order with the count before and after it."""
    train_text, train_enc = text["train"], encode["train"]
    filters = list(train_text["filters"])
    remaining = train_text["clean_pairs"]
    dropped = dict(train_text["dropped"])
    for name in ("empty", "too_long", "ratio"):
        n = train_enc["dropped"].get(name, 0)
        if name == "empty" and not n:
            continue  # a side that is not blank but encodes to nothing: rare, listed only when it happens
        filters.append({"filter": "empty_tokens" if name == "empty" else name, "before": remaining, "after": remaining - n})
        remaining -= n
        if n:
            dropped[name] = dropped.get(name, 0) + n
    train = {
        "input_pairs": train_text["input_pairs"],
        "pairs": train_enc["pairs"],
        "dropped": dict(sorted(dropped.items())),
        "filters": filters,
        "source_tokens": train_enc["source_tokens"],
        "target_tokens": train_enc["target_tokens"],
        # wrong_language judges only the sides whose language the detector knows
        **({"language_unknown": train_text["language_unknown"]} if "language_unknown" in train_text else {}),
        **({"unknown": train_enc["unknown"]} if "unknown" in train_enc else {}),
    }
    valid = {"input_pairs": text["valid"]["lines"], **encode["valid"], "lines": text["valid"]["lines"]}
    splits = {"train": train, "valid": valid}
    if "test" in text:
        splits["test"] = text["test"]
    return splits


def prepare_files(
    out_dir: Path,
    train: Path,
    valid: Path,
    test: Path | None,
    settings: PrepareSettings,
    name: str,
    progress: Progress = _no_progress,
    vocabulary: ModelVocabulary | None = None,
    synthetic: Synthetic | None = None,
    score_filter: ScoreFilter | None = None,
) -> dict[str, Any]:
    """Prepare `PREFIX.<src>` / `PREFIX.<tgt>` files into `out_dir` (with `synthetic`: back-translated pairs); returns the manifest."""
    src, tgt = settings.source_lang, settings.target_lang
    if src == tgt:
        raise NmtError(f"source and target language are both {src!r}", "pass two different codes with -s and -t")
    prefixes = {"train": train, "valid": valid, **({"test": test} if test is not None else {})}
    sources = {split: TextFiles(Path(f"{p}.{src}"), Path(f"{p}.{tgt}")) for split, p in prefixes.items()}
    lines = {split: s.count() for split, s in sources.items()}  # existence and alignment, before any work
    if lines["train"] == 0:
        raise NmtError(f"{sources['train'].src} is empty", "the training corpus needs at least one sentence pair")
    return prepare(out_dir, sources, settings, name, progress, vocabulary=vocabulary, synthetic=synthetic, score_filter=score_filter)


def prepare_recipe(
    recipe_name: str,
    out_dir: Path,
    settings: PrepareSettings | None = None,
    revision: str | None = None,
    progress: Progress = _no_progress,
    vocabulary: ModelVocabulary | None = None,
    synthetic: Synthetic | None = None,
    score_filter: ScoreFilter | None = None,
) -> dict[str, Any]:
    """Download (or find in the Hub cache) a named corpus and prepare it; see recipes.py.

    `settings` overrides the recipe's defaults (its languages always win); `revision` pins the Hub
    dataset to a branch, tag or commit (default: the recipe's).
    """
    from nmtcli.data.download import download, resolve_files
    from nmtcli.data.recipes import BundledSplit, get_recipe

    recipe = get_recipe(recipe_name)
    base = settings or PrepareSettings(recipe.source_lang, recipe.target_lang, recipe.vocab_size, spm_sentences=recipe.spm_sentences)
    settings = replace(base, source_lang=recipe.source_lang, target_lang=recipe.target_lang, vocab_size=base.vocab_size or recipe.vocab_size)
    revision = revision or recipe.revision
    sources: dict[str, PairSource] = {}
    origin: dict[str, Any] = {"repo": recipe.repo, "revision": revision, "files": {}} if recipe.repo else {"bundled": True}
    for split, spec in recipe.splits.items():
        if isinstance(spec, BundledSplit):
            sources[split] = BundledTsv(spec.resource, spec.split, recipe.source_lang, recipe.target_lang)
            continue
        files = list(spec.files) or resolve_files(recipe.repo, revision, spec.pattern)
        paths, commit, digests = download(recipe.repo, files, revision, progress)
        if origin.setdefault("commit", commit) != commit:
            raise NmtError(f"{recipe.repo} changed during the download ({origin['commit'][:12]} -> {commit[:12]})", "run again")
        # The sha256 of each file pins exactly which bytes were read (and keys the stage fingerprints).
        blobs = {f.path: digest for f, digest in zip(files, digests)}
        origin["files"].update(blobs)
        sources[split] = ParquetFiles(tuple(paths), recipe.source_lang, recipe.target_lang,
                                      {"repo": recipe.repo, "commit": commit, "files": blobs})
    return prepare(out_dir, sources, settings, recipe.name, progress, recipe=recipe.describe(), origin=origin, vocabulary=vocabulary,
                   synthetic=synthetic, score_filter=score_filter)


def read_manifest(data_dir: Path) -> dict[str, Any]:
    missing = (f"{data_dir} is not a prepared data dir (no {MANIFEST})", "run `nmt prepare` first")
    return read_json(Path(data_dir) / MANIFEST, missing, "run `nmt prepare` again")


def reference_lines(data_dir: Path, split: str, lang: str) -> list[str]:
    path = Path(data_dir) / f"{split}.{lang}"
    if not path.is_file():
        raise NmtError(f"{data_dir} has no {split} split ({path.name})", f"prepare it with --{split} PREFIX")
    return list(read_lines(path))
