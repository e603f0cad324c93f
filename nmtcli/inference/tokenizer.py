"""Text <-> token ids for a model dir: what the translator calls before and after the search.

Three layouts exist. nmt's own model dirs hold one joint sentencepiece model whose ids are the model's
ids (sec. 5.1: a shared source-target vocabulary). Models imported from Marian (OPUS-MT) hold a
source sentencepiece model, a target sentencepiece model and `vocab.json`, the joint vocabulary
that maps both sides' pieces to the model's ids. Multilingual models imported from M2M-100 and NLLB-200
hold one sentencepiece model, `vocab.json` and a tag per language. `config.json` says which layout a dir uses.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nmtcli.data.encoding import LANGUAGE_CODE, marian_ids
from nmtcli.data.text import SPM_FILE, load_sentencepiece
from nmtcli.data.vocabulary import read_piece_ids
from nmtcli.errors import NmtError
from nmtcli.inference.language_codes import nearest, resolve

MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB = "source.spm", "target.spm", "vocab.json"
MULTILINGUAL_SPM = "sentencepiece.bpe.model"  # M2M-100's and NLLB-200's name for it
WORD_BOUNDARY = "\u2581"  # "▁", sentencepiece's mark of a piece that starts a word


class Tokenizer:
    """encode(texts) -> ids without EOS (the translator appends it); decode(ids) -> one line of text."""

    size: int  # how many ids the tokenizer can produce; must fit the model's vocabulary
    unk_id: int | None = None  # the id of text the vocabulary lacks

    def encode(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def encode_target(self, texts: list[str]) -> list[list[int]]:
        """Target-language text -> ids without EOS, as `decode` reads them (target prefixes, scoring given
        translations): `encode` where one model serves both languages."""
        return self.encode(texts)

    def pieces(self) -> list[str]:
        """The vocabulary as strings, by id (what CTranslate2 stores)."""
        raise NotImplementedError

    def spans(self, text: str) -> list[Span]:
        """The characters [start, end) of `text` that each id of encode([text]) stands for (glossary terms are placed by them)."""
        raise NotImplementedError

    def target_spans(self, text: str) -> list[Span]:
        """`spans` for target-language text, as encode_target reads it."""
        return self.spans(text)


Span = tuple[int, int]


def piece_spans(sp, text: str) -> list[Span]:
    """The characters [start, end) of `text` each sentencepiece piece of it stands for: sentencepiece's own offsets (of
    the text before its normalisation), which count bytes. A piece standing for no character (a word's lone "▁", the
    leading bytes of a character spelled in bytes) has an empty span where it is."""
    try:
        pieces = sp.encode(text, return_type="proto").pieces
    except (TypeError, ValueError):  # sentencepiece 0.2.0 names it so
        pieces = sp.encode(text, out_type="immutable_proto").pieces
    char_at, at = [], 0
    for i, c in enumerate(text):
        width = len(c.encode("utf-8"))
        char_at.extend([i] * width)
        at += width
    char_at.append(len(text))
    return [(char_at[min(p.begin, at)], char_at[min(p.end, at)]) for p in pieces]


class JointSentencePiece(Tokenizer):
    """One sentencepiece model for both languages; its piece ids are the model's ids."""

    def __init__(self, path: Path):
        self.sp = load_sentencepiece(path)
        self.size = self.sp.get_piece_size()
        self.unk_id = self.sp.unk_id()

    def encode(self, texts: list[str]) -> list[list[int]]:
        return self.sp.encode(texts)

    def decode(self, ids: list[int]) -> str:
        return self.sp.decode(ids)

    def pieces(self) -> list[str]:
        return [self.sp.id_to_piece(i) for i in range(self.size)]

    def spans(self, text: str) -> list[Span]:
        return piece_spans(self.sp, text)


class MarianVocabulary(Tokenizer):
    """Marian's layout: source.spm splits the input, target.spm joins the output, vocab.json maps pieces to ids.

    Pieces that vocab.json lacks become the unknown id, as in Marian; special ids (pad, EOS, unknown)
    are dropped from the output. The joint vocabulary holds pieces only the source model has (a name
    copied through, a rare word): sentencepiece passes a piece it does not know through as it is,
    word-boundary mark "▁" and all, so `decode` turns every "▁" left into a space and strips the
    line, as transformers' MarianTokenizer.convert_tokens_to_string does.
    """

    def __init__(self, source_spm: Path, target_spm: Path, vocab: Path, unk_id: int, special_ids: set[int]):
        self.source = load_sentencepiece(source_spm)
        self.target = load_sentencepiece(target_spm)
        mapping = read_piece_ids(vocab)
        self.piece_to_id: dict[str, int] = mapping
        self.id_to_piece: dict[int, str] = {i: p for p, i in mapping.items()}
        self.unk_id = unk_id
        self.special_ids = special_ids
        self.size = max(mapping.values()) + 1

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [marian_ids(self.source, self.piece_to_id, self.unk_id, text) for text in texts]

    def encode_target(self, texts: list[str]) -> list[list[int]]:
        return [marian_ids(self.target, self.piece_to_id, self.unk_id, text) for text in texts]

    def decode(self, ids: list[int]) -> str:
        pieces = [self.id_to_piece[i] for i in ids if i not in self.special_ids and i in self.id_to_piece]
        return self.target.decode_pieces(pieces).replace(WORD_BOUNDARY, " ").strip()

    def spans(self, text: str) -> list[Span]:
        code = LANGUAGE_CODE.match(text)  # marian_ids reads a leading >>code<< as one id
        start = code.end() if code else 0
        return [(0, start)] * bool(code) + [(a + start, b + start) for a, b in piece_spans(self.source, text[start:])]

    def target_spans(self, text: str) -> list[Span]:
        return piece_spans(self.target, text)

    def pieces(self) -> list[str]:
        return [self.id_to_piece.get(i, f"<unused{i}>") for i in range(self.size)]


class MultilingualVocabulary(Tokenizer):
    """M2M-100 and NLLB-200: one sentencepiece model whose pieces map to the model's ids through vocab.json
    (fairseq's dictionary: <s> 0, <pad> 1, </s> 2, <unk> 3, then the pieces), and one tag per language
    (`__de__`, `deu_Latn`), also in vocab.json: `languages` maps each code to its tag's id, `code` finds the
    model's code for what a user typed. A source is `SOURCE_TAG pieces </s>`; a translation starts with the
    target language's tag, forced (ModelConfig.language_tags); the translator adds both (inference/translator.py).

    Pieces that vocab.json lacks become the unknown id, as in M2M100Tokenizer; tags and special ids are
    dropped from the output, as `skip_special_tokens` does.
    """

    def __init__(self, spm: Path, vocab: Path, languages: dict[str, str], unk_id: int, special_ids: set[int]):
        self.sp = load_sentencepiece(spm)
        self.piece_to_id: dict[str, int] = read_piece_ids(vocab)
        self.id_to_piece: dict[int, str] = {i: p for p, i in self.piece_to_id.items()}
        self.languages: dict[str, int] = {code: self.piece_to_id[tag] for code, tag in languages.items()}
        self.unk_id = unk_id
        named = {self.piece_to_id[p] for p in ("<s>", "<pad>", "</s>", "<unk>", "<mask>") if p in self.piece_to_id}
        self.dropped = special_ids | named | set(self.languages.values())
        self.size = max(self.piece_to_id.values()) + 1

    def encode(self, texts: list[str]) -> list[list[int]]:
        get, unk = self.piece_to_id.get, self.unk_id
        return [[get(piece, unk) for piece in pieces] for pieces in self.sp.encode(texts, out_type=str)]

    def decode(self, ids: list[int]) -> str:
        pieces = [self.id_to_piece[i] for i in ids if i not in self.dropped and i in self.id_to_piece]
        return self.sp.decode_pieces(pieces).replace(WORD_BOUNDARY, " ").strip()

    def spans(self, text: str) -> list[Span]:
        return piece_spans(self.sp, text)

    def pieces(self) -> list[str]:
        return [self.id_to_piece.get(i, f"<unused{i}>") for i in range(self.size)]

    def code(self, code: str, side: str, model: str = "MODEL") -> str:
        """The model's own code for `code` (its code, ISO 639-1 or ISO 639-3); `side` and `model` name them in errors."""
        found = resolve(code, self.languages)
        if found is None:
            raise NmtError(f"{model} has no language {code!r} (--{side}-lang); the nearest it has: {', '.join(nearest(code, self.languages))}",
                           f"`nmt info {model}` lists its languages", exit_code=2)
        return found


def load_tokenizer(model_dir: Path, config_values: dict[str, Any]) -> Tokenizer:
    """The tokenizer `config.json` names ("tokenizer": {"kind": ...}); nmt's joint sentencepiece by default."""
    model_dir = Path(model_dir)
    spec = config_values.get("tokenizer") or {"kind": "sentencepiece"}
    kind = spec.get("kind")
    if kind == "sentencepiece":
        return JointSentencePiece(model_dir / spec.get("model", SPM_FILE))
    if kind == "marian":
        m = config_values["model"]
        return MarianVocabulary(
            model_dir / spec.get("source", MARIAN_SOURCE_SPM),
            model_dir / spec.get("target", MARIAN_TARGET_SPM),
            model_dir / spec.get("vocab", MARIAN_VOCAB),
            unk_id=m.get("unk_id", 1),
            special_ids={m.get("pad_id", 0), m.get("eos_id", 3), m.get("bos_id", 2), m.get("unk_id", 1)},
        )
    if kind == "multilingual":
        m = config_values["model"]
        return MultilingualVocabulary(
            model_dir / spec.get("model", MULTILINGUAL_SPM), model_dir / spec.get("vocab", MARIAN_VOCAB), spec["languages"],
            unk_id=m.get("unk_id", 3), special_ids={m.get("pad_id", 1), m.get("eos_id", 2), m.get("bos_id", 2), m.get("unk_id", 3)},
        )
    raise NmtError(f"{model_dir}/config.json names an unknown tokenizer {kind!r}", "upgrade nmt, or re-create the model dir")
