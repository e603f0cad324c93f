"""`nmt prepare`: clean, train the joint BPE, binarize, write `manifest.json` (sec. 5.1's data, at scale).

A prepared data dir holds:
  sentencepiece.model                 joint BPE over both languages
  train.<src>.bin/.idx, train.<tgt>.bin/.idx, valid.*.bin/.idx   binarized ids (see shards.py)
  valid.<src>, valid.<tgt>, test.<src>, test.<tgt>                 plain text, every line, for scoring
  manifest.json                       written last: what went in, what was dropped, checksums, versions

`prepare()` below runs the stages in order, each streaming its input (memory does not grow with the corpus) and each
finished by an atomic rename plus a marker in `.work/` that records a fingerprint of everything the stage's output
depends on (fingerprints.py):

  text            source pairs -> text filters (empty, markup, script, duplicates) -> .work/train.<lang>,
                  and the plain-text valid/test references (text_stages.py); with --target-mono, the
                  back-translated pairs through the same filters (backtranslation.py)
  score           (a score filter's model given) the cleaned pairs scored, the worst dropped: .work/scored/ (score_filter.py)
  sentencepiece   a seeded sample of the cleaned training pairs -> sentencepiece.model (text_stages.py)
                  (with --vocab-from, the "vocabulary" stage instead: the model's tokenizer files copied)
  encode          cleaned pairs -> token filters (too long, length ratio) -> chunk files in .work/,
                  merged into the binarized arrays; valid likewise (no ratio filter) (encode_stage.py)

A stage whose marker matches is skipped, and the encode stage keeps every finished chunk, so an
interrupted `prepare` resumes where it stopped. Nothing depends on timing, thread counts or chunk
sizes, so the same inputs and settings give byte-identical data files whether or not a run was
interrupted. Once `manifest.json` is written `.work/` is removed; a later run with the same inputs
and settings finds the manifest's fingerprint and checksums in order and returns at once.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from nmtcli.checksums import file_sha256
from nmtcli.data import backtranslation
from nmtcli.data.backtranslation import Synthetic
from nmtcli.data.encode_stage import encode_stage
from nmtcli.data.fingerprints import MANIFEST, WORK, fingerprint, manifest_is_current, read_marker, run_stage, stage_keys, write_marker
from nmtcli.data.score_filter import DROPPED as SCORE_DROPPED
from nmtcli.data.score_filter import ScoreFilter, score_stage
from nmtcli.data.settings import SAMPLES, PairSource, PrepareSettings, Progress, no_progress
from nmtcli.data.sources import BundledTsv, ParquetFiles, TextFiles
from nmtcli.data.text import SPM_FILE, load_sentencepiece, read_lines
from nmtcli.data.text_stages import CLEANING_SAMPLE, sentencepiece_stage, text_stage
from nmtcli.data.vocab_size import vocab_choice
from nmtcli.data.vocabulary import ModelVocabulary, check_languages, tokenizer_files
from nmtcli.errors import NmtError
from nmtcli.files import atomic_write_json, read_json
from nmtcli.provenance import versions


def prepare(
    out_dir: Path,
    sources: dict[str, PairSource],
    settings: PrepareSettings,
    name: str,
    progress: Progress = no_progress,
    recipe: dict[str, Any] | None = None,
    origin: dict[str, Any] | None = None,
    vocabulary: ModelVocabulary | None = None,
    synthetic: Synthetic | None = None,
    score_filter: ScoreFilter | None = None,
) -> dict[str, Any]:
    """Run (or resume, or skip) the stages over `sources` (train, valid, optional test); returns the manifest.

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
    text_key, spm_key, encode_key = _keys(sources, settings, vocabulary, synthetic, score_filter)
    if (current := manifest_is_current(out_dir, encode_key)) is not None:
        return {**current, "reused": True}

    run = _Run.start(out_dir, progress)
    text_counts, synthetic_text = _text(run, sources, settings, text_key, synthetic)
    text, text_counts = _score(run, settings, text_key, text_counts, score_filter)
    vocab_size, vocab_record, spm_counts = _vocabulary(run, text, settings, spm_key, text_counts, recipe, vocabulary, synthetic)
    encode_counts, resumed = _encode(run, text, settings, encode_key, vocab_size, text_counts, vocabulary, synthetic)

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
        "seconds": round(time.time() - run.started, 1),
        "stages": run.stages,
        "stage_seconds": run.seconds,
        "resumed_chunks": resumed,
        "inputs": {split: source.describe() for split, source in sources.items()},
        "settings": asdict(settings),
        **({"score_filter": score_filter.describe()} if score_filter is not None else {}),
        **({"sentencepiece": spm_counts} if vocabulary is None else _vocabulary_entries(vocabulary)),
        "splits": _split_counts(text_counts, encode_counts, settings),
        **({"backtranslation": backtranslation.manifest_entry(synthetic, synthetic_text, encode_counts["train"]["backtranslation"])}
           if synthetic is not None else {}),
        "fingerprint": encode_key,
        "files": {f: file_sha256(out_dir / f) for f in files if f != MANIFEST},
        "versions": versions(),
    }
    atomic_write_json(out_dir / MANIFEST, manifest)
    shutil.rmtree(run.work, ignore_errors=True)
    return manifest


@dataclass
class _Run:
    """One run of the stages into `out_dir`: what each stage did ("done", "reused", "resumed") and its seconds."""

    out_dir: Path
    progress: Progress
    started: float
    stages: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    clock: float = field(default_factory=time.time)

    @classmethod
    def start(cls, out_dir: Path, progress: Progress) -> _Run:
        started = time.time()
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / WORK).mkdir(exist_ok=True)
        # An older manifest would describe files about to be replaced: remove it first, write it last.
        (out_dir / MANIFEST).unlink(missing_ok=True)
        return cls(out_dir, progress, started)

    @property
    def work(self) -> Path:
        return self.out_dir / WORK

    def lap(self, stage: str) -> None:
        """The seconds since the last lap, as `stage`'s."""
        self.seconds[stage], self.clock = round(time.time() - self.clock, 2), time.time()


def _keys(sources: dict[str, PairSource], settings: PrepareSettings, vocabulary: ModelVocabulary | None, synthetic: Synthetic | None,
          score_filter: ScoreFilter | None) -> tuple[str, str, str]:
    """The text, vocabulary and encode stages' fingerprints (fingerprints.stage_keys), the back-translated pairs' added."""
    text_key, spm_key, encode_key = stage_keys(sources, settings, vocabulary, score_filter)
    if synthetic is not None:  # its tag is a piece of the vocabulary; its pairs and their mix, of the data
        spm_key = fingerprint(spm_key, synthetic.tag)
        encode_key = fingerprint(encode_key, spm_key, *synthetic.identity())
    return text_key, spm_key, encode_key


def _text(run: _Run, sources: dict[str, PairSource], settings: PrepareSettings, key: str,
          synthetic: Synthetic | None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Stage 1, text (text_stages.py), and the back-translated pairs through the same filters: (counts, theirs)."""
    outputs = [run.work / f"train.{lang}" for lang in (settings.source_lang, settings.target_lang)] + [run.out_dir / CLEANING_SAMPLE]
    counts, run.stages["text"] = run_stage(run.work, "text", key, outputs,
                                           lambda: text_stage(run.out_dir, run.work, sources, settings, run.progress))
    synthetic_text = None
    if synthetic is not None:
        synthetic_text, run.stages["backtranslation text"] = backtranslation.clean_stage(run.out_dir, run.work, synthetic, settings, run.progress)
    run.lap("text")
    return counts, synthetic_text


def _score(run: _Run, settings: PrepareSettings, text_key: str, text_counts: dict[str, Any],
           score_filter: ScoreFilter | None) -> tuple[Path, dict[str, Any]]:
    """The score stage (score_filter.py), with a score filter: returns the dir of the training text the vocabulary and
    the encoding read (the cleaned pairs, or those the score filter kept) and its counts."""
    if score_filter is None:
        (run.out_dir / SCORE_DROPPED).unlink(missing_ok=True)  # an earlier run's, with the filter
        return run.work, text_counts
    languages = (settings.source_lang, settings.target_lang)
    text = run.work / "scored"
    outputs = [text / f"train.{lang}" for lang in languages] + [run.out_dir / SCORE_DROPPED]
    counts, run.stages["score"] = run_stage(run.work, "score", score_filter.key(text_key), outputs,
                                            lambda: score_stage(run.out_dir, run.work, text_key, text_counts, languages, score_filter,
                                                                settings.seed, SAMPLES, run.out_dir / CLEANING_SAMPLE, run.progress))
    run.lap("score")
    return text, counts


def _vocabulary(run: _Run, text: Path, settings: PrepareSettings, key: str, text_counts: dict[str, Any], recipe: dict[str, Any] | None,
                vocabulary: ModelVocabulary | None, synthetic: Synthetic | None) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Stage 2, sentencepiece (text_stages.py), or with --vocab-from the model's tokenizer files copied: returns the
    vocabulary's size, how it was chosen and the stage's counts."""
    pairs = text_counts["train"]["clean_pairs"]
    if vocabulary is None:
        record = vocab_choice(settings.vocab_size, pairs, recipe)
        symbols = (synthetic.tag,) if synthetic and synthetic.tag else ()
        counts, run.stages["sentencepiece"] = run_stage(
            run.work, "sentencepiece", key, [run.out_dir / SPM_FILE],
            lambda: sentencepiece_stage(run.out_dir, text, replace(settings, vocab_size=record["asked"]), pairs, run.progress, symbols))
        size = load_sentencepiece(run.out_dir / SPM_FILE).get_piece_size()
        run.lap("sentencepiece")
    else:
        record = {"asked": vocabulary.size, "by": "model"}
        counts, run.stages["vocabulary"] = run_stage(run.work, "vocabulary", key, [run.out_dir / name for name in vocabulary.files],
                                                     lambda: vocabulary.copy_into(run.out_dir))
        size = vocabulary.size
        run.lap("vocabulary")
    # The tokenizer files of another layout, left by an earlier prepare into this dir, describe nothing here.
    kept = set(tokenizer_files(vocabulary.tokenizer if vocabulary else None).values())
    for stale in {SPM_FILE, *tokenizer_files({"kind": "marian"}).values()} - kept:
        (run.out_dir / stale).unlink(missing_ok=True)
    return size, record, counts


def _encode(run: _Run, text: Path, settings: PrepareSettings, key: str, vocab_size: int, text_counts: dict[str, Any],
            vocabulary: ModelVocabulary | None, synthetic: Synthetic | None) -> tuple[dict[str, Any], int]:
    """Stage 3, encode (encode_stage.py), resumed from its finished chunks: returns its counts and the chunks resumed."""
    encoded = [run.out_dir / f"{split}.{lang}.{ext}" for split in ("train", "valid")
               for lang in (settings.source_lang, settings.target_lang) for ext in ("bin", "idx")]
    if (marker := read_marker(run.work, "encode", key)) is not None and all(p.is_file() for p in encoded):
        run.stages["encode"] = "reused"
        run.lap("encode")
        return marker["counts"], 0
    counts, resumed = encode_stage(run.out_dir, run.work / f"encode-{key[:16]}", settings, vocab_size, text_counts, run.progress,
                                   vocabulary, text, synthetic)
    write_marker(run.work, "encode", key, counts)
    run.stages["encode"] = "resumed" if resumed else "done"
    run.lap("encode")
    return counts, resumed


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
    progress: Progress = no_progress,
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
    progress: Progress = no_progress,
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
