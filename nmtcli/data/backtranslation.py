"""Back-translation in `nmt prepare`: target-side monolingual text, translated into the source language by a reverse
model, mixed with the real pairs (Sennrich et al. 2016, "Improving Neural Machine Translation Models with Monolingual
Data"; Edunov et al. 2018, "Understanding Back-Translation at Scale").

The translation itself is `nmt translate -i FILE -o OUT` run by the command line (cli/backtranslate.py: chunked,
resumable, on the GPUs there are); this module does the rest, torch-free:

- the monolingual text is checked (there, not empty, of the target language on a sample) and joined into
  DATA/backtranslation.<tgt>, its synthetic sources written to DATA/backtranslation.<src> beside it, so that a
  second `prepare` into the same dir reuses them (DATA/backtranslation.json says what they were made from);
- the synthetic pairs go through the same text and token filters as the real ones, counted on their own;
- tagged back-translation (Caswell et al. 2019, "Tagged Back-Translation"): each synthetic source starts with one
  reserved piece, `<BT>`, a control symbol of the joint BPE (sentencepiece never makes it from text, so no input a user
  types can carry it, and nothing at translation time adds it); the model learns to tell synthetic sources apart
  and translates plain input as it learnt from the real pairs;
- the real pairs are upsampled, fairseq's `--upsample-primary`: the train split holds every kept real pair
  `upsample` times, then every kept synthetic pair once; upsample = max(1, round(ratio x synthetic / real))
  (the encode stage mixes them: encode_stage.py).

The default ratio is 1 (as many real pairs as synthetic ones after upsampling). fairseq's WMT'18 recipe
(examples/backtranslation: --upsample-primary 16 over 5.2M real pairs against 226M synthetic ones) trains on about
1 real to 2.7 synthetic with a strong reverse model; where the parallel data is small the reverse model is weak and
its noise should not outweigh the real pairs, so nmt starts at 1:1 (`--bt-ratio` to change it; studies/
backtranslation.py measures the setting).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nmtcli.checksums import file_sha256
from nmtcli.data import language_id
from nmtcli.data.cleaning import LANGUAGE_CHARS, LANGUAGE_PRIOR, MIN_LANGUAGE_LETTERS
from nmtcli.data.fingerprints import run_stage, stage_keys
from nmtcli.data.sources import TextFiles
from nmtcli.data.text import read_lines
from nmtcli.data.text_stages import CLEANING_SAMPLE, text_stage, write_samples
from nmtcli.errors import NmtError
from nmtcli.files import atomic_path

TAG = "<BT>"  # the synthetic sources' first piece (Caswell et al. 2019)
RATIO = 1.0  # real : synthetic pairs after upsampling (see the module's docstring)
STEM = "backtranslation"  # DATA/backtranslation.<tgt> (the monolingual text), .<src> (its translation), .json
SAMPLE_LINES = 200  # lines the language check reads (those of MIN_LANGUAGE_LETTERS letters or more, drawn evenly)
MIN_JUDGED = 10  # fewer judged lines say nothing about the file's language
_LETTER = re.compile(r"[^\W\d_]")


@dataclass(frozen=True)
class Synthetic:
    """The back-translated pairs of a data dir: `source` (the reverse model's translations) beside `target` (the
    monolingual text), the tag put before each source (None: untagged), the real:synthetic ratio, and `record`:
    what they were made from (monolingual files, reverse model, method); `resumed_chunks`: the chunks of the
    translation that an interrupted run had left done and this one took up (0 where it was reused whole)."""

    source: Path
    target: Path
    tag: str | None
    ratio: float
    record: dict[str, Any]
    resumed_chunks: int = 0

    def identity(self) -> list[Any]:
        """What the prepared data depends on: the synthetic text (by the record's checksums), the tag and the ratio."""
        return [self.record, self.tag, self.ratio]


def record_path(out_dir: Path) -> Path:
    return Path(out_dir) / f"{STEM}.json"


def files(out_dir: Path, source_lang: str, target_lang: str) -> tuple[Path, Path]:
    """(synthetic sources, monolingual text) in the data dir."""
    return Path(out_dir) / f"{STEM}.{source_lang}", Path(out_dir) / f"{STEM}.{target_lang}"


# --- the monolingual text ---------------------------------------------------------------------------


def check_monolingual(path: Path, target_lang: str, source_lang: str, seed: int = 1) -> int:
    """A --target-mono file: there, not empty, and of the target language on a sample; returns its lines.

    The detector (py3langid, the corpus's two languages LANGUAGE_PRIOR times likelier, as the wrong_language filter)
    reads up to SAMPLE_LINES lines of MIN_LANGUAGE_LETTERS letters or more, drawn evenly (a seeded reservoir): short
    lines and lines of no letters say too little. The file is refused when the target language is not the commonest
    answer; a language the detector does not know, or too few long lines, is not judged."""
    path = Path(path)
    hint = "give --target-mono a file of target-language text, one sentence a line"
    if not path.exists():
        raise NmtError(f"--target-mono {path} does not exist", hint, exit_code=2)
    if not path.is_file():
        raise NmtError(f"--target-mono {path} is not a file", hint, exit_code=2)
    rng = random.Random(seed)
    sample: list[str] = []
    lines = long = written = 0
    for line in read_lines(path):
        lines += 1
        written += bool(line.strip())
        if len(_LETTER.findall(line)) < MIN_LANGUAGE_LETTERS:
            continue
        long += 1
        if len(sample) < SAMPLE_LINES:
            sample.append(line)
        elif (k := rng.randrange(long)) < SAMPLE_LINES:
            sample[k] = line
    if written == 0:
        raise NmtError(f"--target-mono {path} is empty" + (f" ({lines:,} blank lines)" if lines else ""),
                       "give it target-language text to back-translate", exit_code=2)
    expected = language_id.primary(target_lang)
    if expected not in language_id.languages() or len(sample) < MIN_JUDGED:
        return lines
    likelier = {expected, language_id.primary(source_lang)}
    found = Counter(language_id.posterior(text[:LANGUAGE_CHARS], likelier, LANGUAGE_PRIOR)[0][0] for text in sample)
    best, n = found.most_common(1)[0]
    if best != expected:
        raise NmtError(f"--target-mono {path} looks like {best!r} text, not {target_lang!r} (the language detector on {len(sample)} "
                       f"sampled lines: {best} {n}, {expected} {found.get(expected, 0)})",
                       f"back-translation reads text of the target language ({target_lang}); give a {target_lang} file, or check -s/-t",
                       exit_code=2)
    return lines


def join_monolingual(paths: Sequence[Path], out: Path) -> int:
    """The monolingual files, one after another, into `out` (each line ended with LF); returns the lines."""
    lines = 0
    with atomic_path(out) as tmp, open(tmp, "wb") as f:
        for path in paths:
            with open(path, "rb") as part:
                for line in part:
                    f.write(line if line.endswith(b"\n") else line + b"\n")
                    lines += 1
    return lines


def digests(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Each file's path, size and sha256: what a translation was made from."""
    return [{"path": str(Path(p).resolve()), "bytes": Path(p).stat().st_size, "sha256": file_sha256(p)} for p in paths]


def model_fingerprint(model_dir: Path) -> str:
    """A model dir by what translates: the sha256 of the names and sha256 of its weights, config.json and tokenizer
    files (not scores.json or the card, which `nmt score` and `nmt push` change)."""
    digest = hashlib.sha256()
    for p in sorted(Path(model_dir).iterdir()):
        if p.is_file() and (p.suffix in (".safetensors", ".model", ".spm") or p.name in ("config.json", "vocab.json")):
            digest.update(f"{p.name}\0{file_sha256(p)}\n".encode())
    return digest.hexdigest()


def read_record(out_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads(record_path(out_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def current_record(out_dir: Path, wanted: dict[str, Any], source: Path, target: Path) -> dict[str, Any] | None:
    """The data dir's record of a back-translation made from `wanted` (inputs, reverse model, method), if both of its
    files are still the ones it wrote; else None (the translation runs, resuming from any chunks done)."""
    record = read_record(out_dir)
    if record is None or {k: record.get(k) for k in wanted} != wanted:
        return None
    for path, key in ((source, "source_sha256"), (target, "target_sha256")):
        if not path.is_file() or file_sha256(path) != record.get(key):
            return None
    return record


def write_record(out_dir: Path, wanted: dict[str, Any], source: Path, target: Path, lines: int) -> dict[str, Any]:
    record = {**wanted, "lines": lines, "source_sha256": file_sha256(source), "target_sha256": file_sha256(target)}
    with atomic_path(record_path(out_dir)) as tmp:
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return record


# --- mixing -----------------------------------------------------------------------------------------


def upsample_factor(real: int, synthetic: int, ratio: float) -> int:
    """How many times each real pair goes into the train split: real x factor : synthetic closest to `ratio`, at least 1."""
    if real == 0 or synthetic == 0:
        return 1
    return max(1, round(ratio * synthetic / real))


def tag_id(spm_model: Path, tag: str) -> int:
    """The tag's piece id in the data's sentencepiece model (a control symbol of its training)."""
    from nmtcli.data.text import load_sentencepiece

    sp = load_sentencepiece(spm_model)
    piece = sp.piece_to_id(tag)
    if piece == sp.unk_id() or not sp.is_control(piece):
        raise NmtError(f"{spm_model} has no control piece {tag!r}", "prepare the data again into a new dir (-o)")
    return piece


def samples(out_sample: Path, synthetic_sample: Path) -> Iterator[dict[str, Any]]:
    """cleaning.jsonl's records: the real pairs' (any synthetic ones of an earlier run left out), then the synthetic
    pairs' marked `"synthetic": true`."""
    if out_sample.is_file():
        for line in read_lines(out_sample):
            record = json.loads(line)
            if not record.get("synthetic"):
                yield record
    for line in read_lines(synthetic_sample):
        yield {**json.loads(line), "synthetic": True}


def clean_stage(out_dir: Path, work: Path, synthetic: Synthetic, settings: Any, progress: Any) -> tuple[dict[str, Any], str]:
    """The synthetic pairs through prepare's text filters (the real pairs' settings), into .work/backtranslation/; their
    sample of drops joins cleaning.jsonl. Returns (their counts, the stage's state). The misaligned filter is not among
    them: each synthetic source is a model's translation of its own target line, so misalignment is not their noise."""
    settings = replace(settings, drop_misaligned=False)
    here = work / STEM
    here.mkdir(exist_ok=True)
    sources = {"train": TextFiles(synthetic.source, synthetic.target)}
    key = stage_keys(sources, settings)[0]
    named = lambda task, done, total: progress(task.replace("train", "back-translated pairs"), done, total)  # noqa: E731
    counts, state = run_stage(here, "text", key, [here / f"train.{lang}" for lang in (settings.source_lang, settings.target_lang)]
                              + [here / CLEANING_SAMPLE], lambda: text_stage(here, here, sources, settings, named))
    write_samples(out_dir / CLEANING_SAMPLE, list(samples(out_dir / CLEANING_SAMPLE, here / CLEANING_SAMPLE)))
    return counts["train"], state


def manifest_entry(synthetic: Synthetic, text: dict[str, Any], mix: dict[str, Any]) -> dict[str, Any]:
    """The manifest's "backtranslation": where the synthetic pairs came from, how they were made and mixed, what the
    filters dropped of them, and where they are in the train split (pairs numbered from 0 in train.*.bin)."""
    r, s, upsample = mix["real"]["pairs"], mix["synthetic"]["pairs"], mix["upsample"]
    filters = list(text["filters"])
    remaining = text["clean_pairs"]
    for name, n in mix["synthetic"]["dropped"].items():
        filters.append({"filter": "empty_tokens" if name == "empty" else name, "before": remaining, "after": remaining - n})
        remaining -= n
    dropped: dict[str, int] = dict(text["dropped"])
    for name, n in mix["synthetic"]["dropped"].items():
        dropped[name] = dropped.get(name, 0) + n
    record = synthetic.record
    return {
        "pairs": s,
        "input_lines": text["input_pairs"],
        "dropped": dict(sorted(dropped.items())),
        "filters": filters,
        "reverse_model": record["reverse_model"],
        "method": record["method"],
        "monolingual": record["inputs"],
        "files": {"source": synthetic.source.name, "target": synthetic.target.name},
        "tag": synthetic.tag,
        "tag_id": mix["tag_id"],
        "ratio": synthetic.ratio,
        "upsample": upsample,
        "real_pairs": r,
        # The train split: the kept real pairs `upsample` times over (copy k: pairs k*r .. (k+1)*r - 1), then the synthetic ones.
        "train_ranges": {"real": [0, r * upsample], "synthetic": [r * upsample, r * upsample + s]},
        "resumed_chunks": synthetic.resumed_chunks,  # this run's, as the manifest's own (the encode stage's)
    }
