"""Stage 3 of `nmt prepare`, encode: the cleaned pairs -> subword ids -> token filters -> binarized arrays.

The pairs are encoded in chunks of `chunk_pairs` on all cores (encoding.py); the token filters (empty, too long,
length ratio: text.keep_pair's rules, for a whole chunk at once) drop pairs; each chunk's kept ids and counts go to a
file `.work/encode-<key>/<split>-N.npz`, written atomically, so that an interrupted run keeps every finished chunk.
The chunks are then merged into `<split>.<lang>.bin/.idx` (shards.py). Chunk boundaries depend only on line numbers:
the same inputs give byte-identical arrays whether or not a run was interrupted.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from nmtcli.data.encoding import Encoder, PieceMap
from nmtcli.data.fingerprints import WORK
from nmtcli.data.settings import PrepareSettings, Progress
from nmtcli.data.shards import OFFSET_DTYPE, token_dtype
from nmtcli.data.text import SPM_FILE, read_lines
from nmtcli.data.text_stages import read_text_pairs
from nmtcli.data.vocabulary import ModelVocabulary, tokenizer_files
from nmtcli.errors import NmtError
from nmtcli.files import atomic_path

if TYPE_CHECKING:
    from nmtcli.data.backtranslation import Synthetic


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
    arrays = {
        "dropped": np.array([empty.sum(), too_long.sum(), ratio.sum()], dtype=np.int64),
        "src_tokens": src_tokens[np.repeat(keep, src_len)],
        "src_lengths": src_len[keep],
        "tgt_tokens": tgt_tokens[np.repeat(keep, tgt_len)],
        "tgt_lengths": tgt_len[keep],
    }
    # of the pairs kept (the lines the split holds), read only where a side has text its vocabulary lacks
    unknown = [encoder.unknown((pair[k] for pair, kept in zip(pairs, keep.tolist()) if kept), arrays[f"{side}_tokens"],
                               arrays[f"{side}_lengths"], name)
               for k, (side, name) in enumerate((("src", "source"), ("tgt", "target")))]
    arrays["unknown_lines"] = np.array([n for n, _ in unknown], dtype=np.int64)  # lines holding text the vocabulary lacks
    arrays["unknown_characters"] = np.array([c for _, c in unknown])
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
    parts, resumed = encode_parts(encoder, pairs, total, parts_dir, split, settings, max_ratio, progress)
    return merge_split(parts, out_dir, split, settings, resumed)


def encode_parts(encoder: Encoder, pairs: Iterator[tuple[str, str]], total: int, parts_dir: Path, split: str, settings: PrepareSettings,
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


def merge_split(parts: list[Path], out_dir: Path, split: str, settings: PrepareSettings, resumed: int) -> dict[str, Any]:
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


def encode_stage(out_dir: Path, parts_dir: Path, settings: PrepareSettings, vocab_size: int, text_counts: dict[str, Any],
                 progress: Progress, vocabulary: ModelVocabulary | None = None, text_dir: Path | None = None,
                 synthetic: Synthetic | None = None) -> tuple[dict[str, Any], int]:
    """Stage 3: cleaned training pairs (in `text_dir`, default .work/; and back-translated ones, mixed: `_mixed_train`) and
    the valid split -> binarized arrays; returns (counts, chunks resumed)."""
    text_dir = text_dir or out_dir / WORK
    with _encoder(out_dir, vocab_size, settings.workers, vocabulary) as encoder:
        if synthetic is not None:
            train = _mixed_train(encoder, out_dir, text_dir, parts_dir, settings, text_counts, synthetic, progress)
        else:
            train = _encode_split(encoder, read_text_pairs(text_dir, "train", settings), text_counts["train"]["clean_pairs"], parts_dir,
                                  out_dir, "train", settings, settings.max_ratio, progress)
        # Validation keeps its natural length ratios: only empty and over-long pairs are dropped.
        valid = _encode_split(encoder, read_text_pairs(out_dir, "valid", settings), text_counts["valid"]["lines"], parts_dir,
                              out_dir, "valid", settings, None, progress)
    if train["pairs"] == 0:
        raise NmtError("no training pair survived cleaning", "check that the files are aligned and not empty, and --max-tokens")
    resumed = train.pop("resumed_chunks") + valid.pop("resumed_chunks")
    return {"train": train, "valid": valid}, resumed


def _mixed_train(encoder: Encoder, out_dir: Path, text_dir: Path, parts_dir: Path, settings: PrepareSettings, text_counts: dict[str, Any],
                 synthetic: Synthetic, progress: Progress) -> dict[str, Any]:
    """The train split of real and back-translated pairs (backtranslation.py): each encoded into chunks under the same
    token filters, the synthetic sources after the tag, then merged: the real chunks `upsample` times, the synthetic ones once."""
    from nmtcli.data.backtranslation import STEM, tag_id, upsample_factor

    real_parts, resumed = encode_parts(encoder, read_text_pairs(text_dir, "train", settings), text_counts["train"]["clean_pairs"],
                                       parts_dir, "train", settings, settings.max_ratio, progress)
    tag = tag_id(out_dir / SPM_FILE, synthetic.tag) if synthetic.tag else None
    synthetic_total = sum(1 for _ in read_lines(out_dir / WORK / STEM / f"train.{settings.source_lang}"))
    synthetic_parts, more = encode_parts(encoder, read_text_pairs(out_dir / WORK / STEM, "train", settings), synthetic_total, parts_dir,
                                         "train", settings, settings.max_ratio, progress, None if tag is None else (tag, None), name=STEM)
    real, made = part_counts(real_parts), part_counts(synthetic_parts)
    upsample = upsample_factor(real["pairs"], made["pairs"], synthetic.ratio)
    train = merge_split(real_parts * upsample + synthetic_parts, out_dir, "train", settings, resumed + more)
    # The split's drops are the real pairs' (each once); the synthetic pairs' are the manifest's "backtranslation".
    train["dropped"] = real["dropped"]
    train["backtranslation"] = {"real": real, "synthetic": made, "upsample": upsample, "tag_id": tag}
    return train


def part_counts(parts: list[Path]) -> dict[str, Any]:
    """Pairs kept and the token filters' drops of some encoded chunk files."""
    pairs, dropped = 0, np.zeros(3, dtype=np.int64)
    for part in parts:
        with np.load(part) as chunk:
            pairs += len(chunk["src_lengths"])
            dropped += chunk["dropped"]
    return {"pairs": pairs, "dropped": {n: int(v) for n, v in zip(("empty", "too_long", "ratio"), dropped) if v}}
