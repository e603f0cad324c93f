"""Plain text in: reading aligned files, the token-level cleaning rules, and the joint sentencepiece BPE model (sec. 5.1).

The text-level filters (empty, markup, language, copies, duplicates, ...) are in cleaning.py."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import sentencepiece as spm

from nmtcli.errors import NmtError, check_readable
from nmtcli.files import atomic_path
from nmtcli.model.config import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from nmtcli.threads import usable_cpus

# Cleaning defaults. 250 subword tokens is the usual ceiling of WMT recipes (fairseq, Moses'
# clean-corpus-n); the 1.5 length ratio is fairseq's WMT setting (clean-corpus-n -ratio 1.5 on 40k BPE
# tokens), for the training split. A ratio of small counts says little: with a small vocabulary a right
# pair of short sides is easily 2 pieces against 5 ("Upload" -> "Hochladen"), and 1.5 dropped 17% of the
# demo corpus's pairs, nearly all of them right. `--ratio-slack N` lets the longer side exceed the ratio by N
# pieces (5 keeps all but 31 of those pairs); it is off by default because it did not win on BLEU: on the demo
# corpus (tiny, 1,000 steps, seeds 1 and 2) 10.7 mean BLEU either way, with a better validation perplexity but
# shorter outputs (studies/defaults_quality.py, docs/data.md).
MAX_TOKENS = 250
MAX_RATIO = 1.5
RATIO_SLACK = 0

# The joint sentencepiece model `nmt prepare` trains, as it is named in a data dir, a run dir and a model dir.
SPM_FILE = "sentencepiece.model"


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
        check_readable(path, "check the prefix and the language codes (-s/-t)")
    n_src, n_tgt = count_lines(src), count_lines(tgt)
    if n_src != n_tgt:
        raise NmtError(
            f"{src} has {n_src} lines but {tgt} has {n_tgt}",
            "parallel files must be aligned line by line",
        )
    return n_src


def read_pairs(src: Path, tgt: Path) -> Iterator[tuple[str, str]]:
    yield from zip(read_lines(src), read_lines(tgt), strict=True)


def one_line(text: str) -> str:
    """A sentence as one line: line breaks inside it (which would shift every later line) become spaces."""
    return _LINE_BREAKS.sub(" ", text) if "\n" in text or "\r" in text else text


_LINE_BREAKS = re.compile(r"\r\n|[\r\n]")

def train_sentencepiece(
    sentences: Iterable[str],
    model_path: Path,
    vocab_size: int,
    max_sentences: int = 2_000_000,
    seed: int = 1,
    threads: int = 0,
    control_symbols: tuple[str, ...] = (),
) -> None:
    """Train a joint BPE model over both languages (sec. 5.1: shared source-target vocabulary).

    Byte fallback keeps any character encodable; the special ids are fixed so that every model and
    vocabulary agree (pad 0, unk 1, bos 2, eos 3). Every sentence given is used (callers sample
    beforehand, with their own seed), so the model is a function of the sentences alone.
    `control_symbols`: reserved pieces after the special ids (back-translation's tag), which encoding
    text never produces: only their ids put them into the data.
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
                shuffle_input_sentence=False,
                num_threads=threads or usable_cpus(),
                pad_id=PAD_ID,
                unk_id=UNK_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                **({"control_symbols": list(control_symbols)} if control_symbols else {}),
                minloglevel=2,
            )
            data = Path(prefix + ".model").read_bytes()
        except RuntimeError as e:
            reserved = f"; it holds {len(control_symbols)} reserved piece(s) too ({' '.join(control_symbols)}: back-translation's tag)" if control_symbols else ""
            raise NmtError(f"sentencepiece training failed: {e}", f"check --vocab-size against the corpus size{reserved}") from None
        finally:
            for written in (prefix + ".vocab", prefix + ".model"):
                if os.path.exists(written):
                    os.unlink(written)
        try:  # sentencepiece does not report a write that failed (a full disk): its model is then cut short
            spm.SentencePieceProcessor(model_proto=data)
        except RuntimeError:
            raise NmtError(f"sentencepiece wrote an incomplete model ({len(data):,} bytes) for {model_path}",
                           "is the disk full, or a file size limit (`ulimit -f`) reached? free some space and run again") from None
        tmp.write_bytes(_reproducible_model(data))


def load_sentencepiece(path: Path) -> spm.SentencePieceProcessor:
    if not Path(path).is_file():
        raise NmtError(f"{path} does not exist", "the sentencepiece model belongs beside the weights")
    try:
        return spm.SentencePieceProcessor(model_file=str(path))
    except (OSError, RuntimeError) as e:
        raise NmtError(f"{path} is not a sentencepiece model: {e}", "re-create it with `nmt prepare`") from None


def keep_pair(src_len: int, tgt_len: int, max_tokens: int = MAX_TOKENS, max_ratio: float | None = MAX_RATIO,
              ratio_slack: int = RATIO_SLACK) -> str | None:
    """None to keep a tokenized pair, otherwise the name of the filter that drops it. `ratio`: the longer
    side has more than max_ratio x the shorter side's tokens plus ratio_slack."""
    if src_len == 0 or tgt_len == 0:
        return "empty"
    if src_len > max_tokens or tgt_len > max_tokens:
        return "too_long"
    if max_ratio is not None and max(src_len, tgt_len) > max_ratio * min(src_len, tgt_len) + ratio_slack:
        return "ratio"
    return None


# --- a model file that depends on the training data and settings only --------------------------------
# sentencepiece stores its TrainerSpec in the model, including the output path (`model_prefix`,
# field 2) and the thread count (`num_threads`, field 16), so two identical trainings in different
# directories or on different machines would write different bytes. Both fields only describe how
# the training ran; they are rewritten here, in the protobuf wire format, to fixed values.

def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        value |= (byte & 0x7F) << shift
        i += 1
        if byte < 0x80:
            return value, i
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _fields(data: bytes) -> list[tuple[int, int, bytes]]:
    """(field number, wire type, raw bytes of the whole field) of one protobuf message."""
    fields, i = [], 0
    while i < len(data):
        start = i
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire == 1:
            i += 8
        elif wire == 2:
            length, i = _varint(data, i)
            i += length
        elif wire == 5:
            i += 4
        else:
            raise ValueError(f"unexpected protobuf wire type {wire}")
        fields.append((number, wire, data[start:i]))
    return fields


def _length_delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _payload(raw: bytes) -> bytes:
    _, i = _varint(raw, 0)
    length, i = _varint(raw, i)
    return raw[i : i + length]


def _reproducible_model(data: bytes) -> bytes:
    out = bytearray()
    for number, wire, raw in _fields(data):
        if number == 2 and wire == 2:  # ModelProto.trainer_spec
            spec = bytearray()
            for n, w, r in _fields(_payload(raw)):
                if n == 2:  # model_prefix
                    spec += _length_delimited(2, b"sentencepiece")
                elif n != 16:  # num_threads: dropped (the default applies when read)
                    spec += r
            out += _length_delimited(2, bytes(spec))
        else:
            out += raw
    return bytes(out)
