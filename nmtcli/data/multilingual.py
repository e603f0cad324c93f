"""`nmt prepare` with several corpora: one data dir for one multilingual model (Johnson et al. 2017).

Johnson et al. train one unchanged Transformer on many language pairs, told which language to write by a
tag. nmt lays the tags out as M2M-100 does (Fan et al. 2020), the layout its imported multilingual models
already use, so that translating, serving, scoring and validating such a model needs nothing new: every
source is `SOURCE_TAG pieces </s>`, and the decoder reads `</s> TARGET_TAG pieces` and writes
`TARGET_TAG pieces </s>`, the target tag forced at translation (ModelConfig.language_tags). Johnson et al.
put the target tag on the source instead; with it forced first in the decoder the model knows the target
language as surely, and the source tag costs one position.

Tags are vocabulary entries of their own, added after sentencepiece's pieces (`__de__` as text would be
split into pieces): `vocab.json` maps every piece to its id (sentencepiece's own) and each tag to one of
the ids after them, the tokenizer layout "multilingual" of inference/tokenizer.py.

The data dir holds:
  sentencepiece.model, vocab.json     one joint BPE over every language, and the tags
  train.src.bin/.idx, train.tgt.bin/.idx   every pair's cleaned training pairs, tagged, one after another
  valid.src.bin/.idx, valid.tgt.bin/.idx   every pair's valid split, tagged (validation loss)
  valid.<src>-<tgt>.<lang>, test.<src>-<tgt>.<lang>   each direction's plain text (its BLEU; `nmt score`)
  manifest.json                       "directions", the tokenizer section, counts per direction

Each pair is cleaned on its own (its languages' script filter, its duplicates). The sentencepiece model is
trained on lines sampled per language with p_l proportional to n_l^(1/T), T = 5 (Arivazhagan et al. 2019,
"Massively Multilingual Neural Machine Translation in the Wild", sec. 4: T = 5 balanced high- and
low-resource languages best; T = 1 samples in proportion and leaves a small language few pieces of its
own, T = inf samples uniformly and over-fits the pieces to it). The training pairs themselves are not
resampled: each pair is in the train split once. Stages resume as prepare.py's do.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from nmtcli.checksums import file_sha256
from nmtcli.data.encoding import Encoder
from nmtcli.data.encode_stage import encode_parts, merge_split, part_counts
from nmtcli.data.fingerprints import MANIFEST, WORK, fingerprint, manifest_is_current, read_marker, run_stage, stage_keys, write_marker
from nmtcli.data.settings import PrepareSettings, Progress, no_progress
from nmtcli.data.text_stages import CLEANING_SAMPLE, read_text_pairs, text_stage, write_samples
from nmtcli.data.shards import token_dtype
from nmtcli.data.sources import TextFiles
from nmtcli.data.text import SPM_FILE, load_sentencepiece, read_lines, train_sentencepiece
from nmtcli.data.vocab_size import RULE as VOCAB_RULE
from nmtcli.data.vocab_size import vocab_choice
from nmtcli.errors import NmtError
from nmtcli.files import atomic_copy, atomic_path, atomic_write_json
from nmtcli.provenance import versions

TEMPERATURE = 5.0  # Arivazhagan et al. 2019 (see the module's docstring)
SIDES = ("src", "tgt")  # the binarized files' names for the two sides of every pair
VOCAB_FILE = "vocab.json"
_CODE = r"[A-Za-z]{2,3}(?:_[A-Za-z]{4})?"  # en, eng, eng_Latn
_PAIR = re.compile(rf"^({_CODE})-({_CODE})$")


@dataclass(frozen=True)
class Corpus:
    """One pair's aligned files, PREFIX.<source_lang> and PREFIX.<target_lang>."""

    source_lang: str
    target_lang: str
    prefix: Path

    @property
    def direction(self) -> str:
        return f"{self.source_lang}-{self.target_lang}"


def parse_corpus(spec: str, flag: str) -> Corpus:
    """`SRC-TGT=PREFIX`, or a PREFIX in a directory named for its pair (`corpus/en-de/train`)."""
    pair, sep, prefix = spec.partition("=")
    if not sep:
        pair, prefix = Path(spec).parent.name, spec
    found = _PAIR.match(pair)
    if found is None or found.group(1) == found.group(2):
        raise NmtError(f"{flag} {spec}: cannot tell its language pair" + (f" ({pair!r} is not SRC-TGT)" if sep else ""),
                       f"write it as {flag} en-de=PREFIX, or keep PREFIX.en and PREFIX.de in a directory named en-de", exit_code=2)
    return Corpus(found.group(1), found.group(2), Path(prefix))


def language_tag(code: str) -> str:
    """The tag of a language, M2M-100's spelling: `__de__`."""
    return f"__{code}__"


def temperature_quotas(lines: dict[str, int], budget: int, temperature: float = TEMPERATURE) -> dict[str, int]:
    """Lines to sample of each language: `budget` shared with p_l proportional to n_l^(1/T), at most n_l each."""
    weights = {lang: n ** (1.0 / temperature) for lang, n in lines.items() if n > 0}
    total = sum(weights.values())
    return {lang: min(lines[lang], round(budget * w / total)) for lang, w in sorted(weights.items())}


def prepare_multilingual(out_dir: Path, train: list[Corpus], valid: list[Corpus], test: list[Corpus] | None,
                         settings: PrepareSettings, progress: Progress = no_progress) -> dict[str, Any]:
    """Prepare several pairs into one data dir for one multilingual model (see the module's docstring)."""
    directions = [c.direction for c in train]
    check_corpora(train, valid, test or [])
    out_dir = Path(out_dir)
    name = "+".join(directions)
    sides = replace(settings, source_lang=SIDES[0], target_lang=SIDES[1])
    languages = sorted({lang for c in train for lang in (c.source_lang, c.target_lang)})
    by_direction = {d: {split: c for split, cs in (("valid", valid), ("test", test or [])) for c in cs if c.direction == d} for d in directions}
    pairs: dict[str, dict[str, TextFiles]] = {}
    for c in train:
        files = {"train": c, **by_direction[c.direction]}
        pairs[c.direction] = {split: TextFiles(Path(f"{f.prefix}.{c.source_lang}"), Path(f"{f.prefix}.{c.target_lang}")) for split, f in files.items()}
        if pairs[c.direction]["train"].count() == 0:
            raise NmtError(f"{pairs[c.direction]['train'].src} is empty", "each training corpus needs at least one sentence pair")
        for split in ("valid", "test"):
            if split in pairs[c.direction]:
                pairs[c.direction][split].count()  # existence and alignment, before any work
    pair_settings = {c.direction: replace(settings, source_lang=c.source_lang, target_lang=c.target_lang) for c in train}
    text_keys = {d: stage_keys(pairs[d], pair_settings[d])[0] for d in directions}
    vocab = settings.vocab_size if settings.vocab_size is not None else VOCAB_RULE
    spm_key = fingerprint("multilingual sentencepiece", text_keys, vocab, settings.spm_sentences, settings.seed, TEMPERATURE)
    encode_key = fingerprint("multilingual encode", spm_key, settings.max_tokens, settings.max_ratio)
    if (current := manifest_is_current(out_dir, encode_key)) is not None:
        return {**current, "reused": True}

    started = time.time()
    work = out_dir / WORK
    work.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST).unlink(missing_ok=True)
    stages: dict[str, str] = {}
    text_counts: dict[str, dict[str, Any]] = {}
    for d in directions:
        s = pair_settings[d]
        pair_work = work / d
        pair_work.mkdir(exist_ok=True)
        text_counts[d], stages[f"text {d}"] = run_stage(pair_work, "text", text_keys[d], [pair_work / f"train.{lang}" for lang in (s.source_lang, s.target_lang)]
                                                         + [pair_work / CLEANING_SAMPLE],
                                                         lambda: text_stage(pair_work, pair_work, pairs[d], s, progress))
        for split in ("valid", "test"):  # the plain text of each direction, named for it
            if split in pairs[d]:
                for lang in (s.source_lang, s.target_lang):
                    atomic_copy(pair_work / f"{split}.{lang}", out_dir / f"{split}.{d}.{lang}")

    # Each pair's sample of what its text filters dropped, in one file, each record with its direction.
    write_samples(out_dir / CLEANING_SAMPLE, [{"direction": d, **json.loads(line)} for d in directions
                                              for line in read_lines(work / d / CLEANING_SAMPLE)])
    clean = sum(text_counts[d]["train"]["clean_pairs"] for d in directions)
    vocab_record = vocab_choice(settings.vocab_size, clean)
    spm_counts, stages["sentencepiece"] = run_stage(work, "sentencepiece", spm_key, [out_dir / SPM_FILE, out_dir / VOCAB_FILE],
                                                    lambda: _sentencepiece(out_dir, work, train, text_counts, replace(settings, vocab_size=vocab_record["asked"]),
                                                                           languages, progress))
    pieces = load_sentencepiece(out_dir / SPM_FILE).get_piece_size()
    vocab_size = pieces + len(languages)
    tag_ids = {lang: pieces + i for i, lang in enumerate(languages)}

    encoded = [out_dir / f"{split}.{side}.{ext}" for split in ("train", "valid") for side in SIDES for ext in ("bin", "idx")]
    if (marker := read_marker(work, "encode", encode_key)) is None or not all(p.is_file() for p in encoded):
        encode_counts = _encode(out_dir, work / f"encode-{encode_key[:16]}", train, pair_settings, sides, vocab_size, tag_ids, text_counts, progress)
        write_marker(work, "encode", encode_key, encode_counts)
        stages["encode"] = "done"
    else:
        encode_counts, stages["encode"] = marker["counts"], "reused"

    tokenizer = {"kind": "multilingual", "model": SPM_FILE, "vocab": VOCAB_FILE, "languages": {lang: language_tag(lang) for lang in languages}}
    files = sorted(p.name for p in out_dir.iterdir() if p.is_file() and not p.name.startswith(".") and p.name != MANIFEST)
    manifest = {
        "format": "nmt-data",
        "format_version": 1,
        "name": name,
        "recipe": None,
        "source": None,
        "source_lang": SIDES[0],  # the binarized files' sides; the languages are the directions'
        "target_lang": SIDES[1],
        "directions": [{"source": c.source_lang, "target": c.target_lang} for c in train],
        "vocab_size": vocab_size,
        "vocabulary": vocab_record,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": round(time.time() - started, 1),
        "stages": stages,
        "inputs": {d: {split: f.describe() for split, f in pairs[d].items()} for d in directions},
        "settings": asdict(settings),
        "sentencepiece": spm_counts,
        "tokenizer": tokenizer,
        "splits": _splits(text_counts, encode_counts, directions, test is not None),
        "fingerprint": encode_key,
        "files": {f: file_sha256(out_dir / f) for f in files},
        "versions": versions(),
    }
    atomic_write_json(out_dir / MANIFEST, manifest)
    shutil.rmtree(work, ignore_errors=True)
    return manifest


def check_corpora(train: list[Corpus], valid: list[Corpus], test: list[Corpus]) -> None:
    """One corpus per direction and split; a valid split for every training direction, and no other."""
    for flag, corpora in (("--train", train), ("--valid", valid), ("--test", test)):
        seen = [c.direction for c in corpora]
        twice = sorted({d for d in seen if seen.count(d) > 1})
        if twice:
            raise NmtError(f"{flag} names {', '.join(twice)} more than once", f"concatenate the files of a direction into one {flag} PREFIX", exit_code=2)
    trained = {c.direction for c in train}
    for flag, corpora, required in (("--valid", valid, True), ("--test", test, False)):
        given = {c.direction for c in corpora}
        missing = sorted(trained - given) if required else []
        if missing:
            raise NmtError(f"no {flag} for {', '.join(missing)}", f"pass one {flag} per training direction: validation BLEU is per direction", exit_code=2)
        if given - trained:
            raise NmtError(f"{flag} for {', '.join(sorted(given - trained))}, which no --train covers",
                           "a multilingual model is validated and scored on the directions it trains; leave it out", exit_code=2)


def _sentencepiece(out_dir: Path, work: Path, train: list[Corpus], text_counts: dict[str, Any], settings: PrepareSettings,
                   languages: list[str], progress: Progress) -> dict[str, Any]:
    """One joint BPE over every language, trained on lines sampled with temperature; then vocab.json with the tags."""
    files: dict[str, list[tuple[Path, int]]] = {lang: [] for lang in languages}  # each language's cleaned lines, file by file
    for c in train:
        n = text_counts[c.direction]["train"]["clean_pairs"]
        for lang in (c.source_lang, c.target_lang):
            files[lang].append((work / c.direction / f"train.{lang}", n))
    lines = {lang: sum(n for _, n in fs) for lang, fs in files.items()}
    quotas = temperature_quotas(lines, min(2 * settings.spm_sentences, sum(lines.values())))
    rng = np.random.default_rng(settings.seed)
    chosen = {lang: np.sort(rng.choice(lines[lang], size=quotas[lang], replace=False)).tolist() for lang in languages}
    total = sum(quotas.values())

    def sampled() -> Iterator[str]:
        done = 0
        progress("sampling for sentencepiece", 0, total)
        for lang in languages:
            wanted, position, offset = chosen[lang], 0, 0
            for path, n in files[lang]:
                for i, line in enumerate(read_lines(path), start=offset):
                    if position < len(wanted) and wanted[position] == i:
                        position += 1
                        yield line
                offset += n
            done += position
            progress("sampling for sentencepiece", done, total)
        progress("training sentencepiece", 0, None)

    train_sentencepiece(sampled(), out_dir / SPM_FILE, settings.vocab_size, total, settings.seed, settings.workers)
    progress("training sentencepiece", 1, 1)
    sp = load_sentencepiece(out_dir / SPM_FILE)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    for i, lang in enumerate(languages):
        if language_tag(lang) in vocab:  # a piece spelled like a tag would map two ids to one string
            raise NmtError(f"the training text holds {language_tag(lang)!r} often enough to become a piece", "remove language tags from the text")
        vocab[language_tag(lang)] = sp.get_piece_size() + i
    with atomic_path(out_dir / VOCAB_FILE) as tmp:
        tmp.write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
    return {"lines_sampled": quotas, "lines": lines, "temperature": TEMPERATURE}


def _encode(out_dir: Path, parts_dir: Path, train: list[Corpus], pair_settings: dict[str, PrepareSettings], sides: PrepareSettings,
            vocab_size: int, tag_ids: dict[str, int], text_counts: dict[str, Any], progress: Progress) -> dict[str, Any]:
    """Every direction's pairs, tagged, into chunk files, merged into one train and one valid split."""
    parts: dict[str, list[Path]] = {"train": [], "valid": []}
    per_direction: dict[str, dict[str, Any]] = {}
    with Encoder(out_dir / SPM_FILE, token_dtype(vocab_size), sides.workers) as encoder:
        for c in train:
            d, s = c.direction, pair_settings[c.direction]
            tags = (tag_ids[c.source_lang], tag_ids[c.target_lang])
            per_direction[d] = {}
            for split, source, total, ratio in (("train", out_dir / WORK / d, text_counts[d]["train"]["clean_pairs"], s.max_ratio),
                                                ("valid", out_dir / WORK / d, text_counts[d]["valid"]["lines"], None)):
                found, _ = encode_parts(encoder, read_text_pairs(source, split, s), total, parts_dir, split, s, ratio, progress, tags,
                                        name=f"{split}-{d}")
                parts[split] += found
                per_direction[d][split] = part_counts(found)
    counts = {split: merge_split(parts[split], out_dir, split, sides, 0) for split in ("train", "valid")}
    for split in counts:
        counts[split].pop("resumed_chunks")
    if counts["train"]["pairs"] == 0:
        raise NmtError("no training pair survived cleaning", "check that the files are aligned and not empty, and --max-tokens")
    return {**counts, "directions": per_direction}


def _direction_counts(text: dict[str, Any], encode: dict[str, Any]) -> dict[str, Any]:
    """One direction's training pairs: read, kept, dropped by each text and token filter, and the text filters in order
    (what each had before it: the misaligned filter's warning reads it)."""
    dropped = {**text["dropped"], **encode["dropped"]}
    unknown = {"language_unknown": text["language_unknown"]} if "language_unknown" in text else {}
    return {"input_pairs": text["input_pairs"], **encode, "dropped": dict(sorted(dropped.items())), "filters": text["filters"], **unknown}


def _splits(text: dict[str, Any], encode: dict[str, Any], directions: list[str], test: bool) -> dict[str, Any]:
    """The prepare report's splits (prepare._split_counts' keys), and each direction's counts beside them."""
    dropped: dict[str, int] = {}
    for d in directions:
        for reason, n in [*text[d]["train"]["dropped"].items(), *encode["directions"][d]["train"]["dropped"].items()]:
            dropped[reason] = dropped.get(reason, 0) + n
    train = {
        "input_pairs": sum(text[d]["train"]["input_pairs"] for d in directions),
        "pairs": encode["train"]["pairs"],
        "dropped": dict(sorted(dropped.items())),
        "source_tokens": encode["train"]["source_tokens"],
        "target_tokens": encode["train"]["target_tokens"],
        "directions": {d: _direction_counts(text[d]["train"], encode["directions"][d]["train"]) for d in directions},
    }
    lines = sum(text[d]["valid"]["lines"] for d in directions)
    valid = {"input_pairs": lines, **encode["valid"], "lines": lines,
             "directions": {d: {"lines": text[d]["valid"]["lines"], **encode["directions"][d]["valid"]} for d in directions}}
    splits = {"train": train, "valid": valid}
    if test:
        splits["test"] = {"lines": sum(text[d].get("test", {}).get("lines", 0) for d in directions),
                          "directions": {d: text[d]["test"] for d in directions if "test" in text[d]}}
    return splits
