"""Plain text in: reading aligned files, the cleaning rules, and the joint sentencepiece BPE model (sec. 5.1)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import sentencepiece as spm

from nmtcli.errors import NmtError
from nmtcli.model.checkpoint import atomic_path
from nmtcli.model.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

# Cleaning defaults. 250 subword tokens is the usual ceiling of WMT recipes (fairseq, Moses'
# clean-corpus-n); the 1.5 length ratio is this project's choice for the training split.
MAX_TOKENS = 250
MAX_RATIO = 1.5


def count_lines(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b"")) + _unterminated(path)


def _unterminated(path: Path) -> int:
    size = os.path.getsize(path)
    if size == 0:
        return 0
    with open(path, "rb") as f:
        f.seek(size - 1)
        return 0 if f.read(1) == b"\n" else 1


def read_lines(path: Path) -> Iterator[str]:
    """Lines of a UTF-8 text file without their line ending (LF or CRLF); bad UTF-8 is a user error."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise NmtError(
                    f"{path}, line {number}: not valid UTF-8 ({e.reason} at byte {e.start})",
                    "convert the file to UTF-8, e.g. with `iconv -f latin1 -t utf-8`",
                ) from None
            yield line.rstrip("\r\n").lstrip("\ufeff") if number == 1 else line.rstrip("\r\n")


def check_parallel(src: Path, tgt: Path) -> int:
    """Both files exist and have the same number of lines; returns that number."""
    for path in (src, tgt):
        if not Path(path).is_file():
            raise NmtError(f"{path} does not exist", "check the prefix and the language codes (-s/-t)")
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    if n_src != n_tgt:
        raise NmtError(
            f"{src} has {n_src} lines but {tgt} has {n_tgt}",
            "parallel files must be aligned line by line",
        )
    return n_src


def read_pairs(src: Path, tgt: Path) -> Iterator[tuple[str, str]]:
    yield from zip(read_lines(src), read_lines(tgt), strict=True)


def train_sentencepiece(
    sentences: Iterable[str],
    model_path: Path,
    vocab_size: int,
    max_sentences: int = 2_000_000,
    seed: int = 1,
) -> None:
    """Train a joint BPE model over both languages (sec. 5.1: shared source-target vocabulary).

    Byte fallback keeps any character encodable; the special ids are fixed so that every model and
    vocabulary agree (pad 0, unk 1, bos 2, eos 3).
    """
    spm.set_random_generator_seed(seed)
    with atomic_path(model_path) as tmp:
        prefix = str(tmp)[: -len(".tmp")]
        try:
            spm.SentencePieceTrainer.train(
                sentence_iterator=iter(sentences),
                model_prefix=prefix,
                model_type="bpe",
                vocab_size=vocab_size,
                character_coverage=1.0,
                byte_fallback=True,
                hard_vocab_limit=False,
                input_sentence_size=max_sentences,
                shuffle_input_sentence=True,
                num_threads=os.cpu_count() or 1,
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                minloglevel=2,
            )
        except RuntimeError as e:
            raise NmtError(f"sentencepiece training failed: {e}", "check --vocab-size against the corpus size") from None
        finally:
            if os.path.exists(prefix + ".vocab"):
                os.unlink(prefix + ".vocab")
        os.replace(prefix + ".model", tmp)


def load_sentencepiece(path: Path) -> spm.SentencePieceProcessor:
    if not Path(path).is_file():
        raise NmtError(f"{path} does not exist", "the sentencepiece model belongs beside the weights")
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise NmtError(f"{path} is not a sentencepiece model: {e}", "re-create it with `nmt prepare`") from None


def keep_pair(src_len: int, tgt_len: int, max_tokens: int = MAX_TOKENS, max_ratio: float | None = MAX_RATIO) -> str | None:
    """None to keep a tokenized pair, otherwise the name of the filter that drops it."""
    if src_len == 0 or tgt_len == 0:
        return "empty"
    if src_len > max_tokens or tgt_len > max_tokens:
        return "too_long"
    if max_ratio is not None and max(src_len, tgt_len) > max_ratio * min(src_len, tgt_len):
        return "ratio"
    return None
