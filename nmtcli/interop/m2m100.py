"""Import M2M-100 and NLLB-200 (transformers' M2M100ForConditionalGeneration) as an nmt model dir.

Both are fairseq's pre-norm Transformer, each difference from the paper's model a ModelConfig switch: pre-norm
layers with a final LayerNorm on both stacks (norm="pre"), embeddings scaled by sqrt(d_model), fairseq's
sinusoids (positions="fairseq": all sines, then all cosines, frequencies 10000^(-i/(d/2-1))) counted from
pad_id + 1 (position_offset), one matrix for both embeddings and the output projection, ReLU, and a decoder
that starts from EOS with the target language's tag forced first (language_tags).

They differ in the tokenizer, whose conventions the model dir keeps ("tokenizer": {"kind": "multilingual"}):
- M2M-100 (M2M100Tokenizer): vocab.json maps the pieces of sentencepiece.bpe.model to ids; the 100 tags
  `__en__` ... follow it in the order of M2M100_CODES. Source: `__en__ text </s>`.
- NLLB-200 (NllbTokenizer): the ids are fairseq's (<s> 0, <pad> 1, </s> 2, <unk> 3, sentencepiece's piece i at
  i + 1), the tags (`eng_Latn`) added after them, as tokenizer.json lists them. Source: `eng_Latn text </s>`
  (transformers' default since 4.31; `legacy_behaviour` models put the tag after </s> and are refused).
Either way the model dir holds sentencepiece.bpe.model and a vocab.json with every id, tags included.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from nmtcli.card import hub_card
from nmtcli.data.text import load_sentencepiece
from nmtcli.errors import NmtError
from nmtcli.inference.language_codes import M2M100_CODES, NLLB_CODES, WMT21_CODES
from nmtcli.inference.tokenizer import MARIAN_VOCAB, MULTILINGUAL_SPM
from nmtcli.interop.huggingface import (IMPORTERS, Say, card_license, check_architecture, convert_layers, fetch,
                                        read_json, read_weights, shape_fields, shared_embedding)
from nmtcli.model.checkpoint import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE, load_state, model_dir_config, write_model_dir
from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import Transformer

TOKENIZER_JSON, TOKENIZER_CONFIG = "tokenizer.json", "tokenizer_config.json"
HUB_FILES = [CONFIG_FILE, WEIGHTS_FILE, MULTILINGUAL_SPM, MARIAN_VOCAB, TOKENIZER_JSON, TOKENIZER_CONFIG,
             "special_tokens_map.json", "generation_config.json", CARD_FILE]
TOKENIZER_CLASSES = {"m2m100": "M2M100Tokenizer", "nllb": "NllbTokenizer"}
MULTILINGUAL = "mul"  # ISO 639-2 "multiple languages": config.json's source and target; the codes are the tokenizer's


def import_m2m100(source: str, out_dir: Path, kind: str = "m2m100", revision: str | None = None, say: Say | None = None) -> dict[str, Any]:
    """Convert the M2M-100 (`kind` "m2m100") or NLLB-200 ("nllb") model `source` (dir or Hub id) into the nmt model
    dir `out_dir`; returns its config.json."""
    model_dir, provenance = fetch(source, kind, HUB_FILES, revision, say)
    hint = f"a {kind} model dir has {CONFIG_FILE}, {WEIGHTS_FILE}, {MULTILINGUAL_SPM} and its tokenizer's files"
    hf = read_json(model_dir / CONFIG_FILE, hint)
    check_architecture(hf, kind, source)
    tokenizer_config = read_json(model_dir / TOKENIZER_CONFIG, hint) if (model_dir / TOKENIZER_CONFIG).is_file() else {}
    named = str(tokenizer_config.get("tokenizer_class") or "").removesuffix("Fast")
    for other, cls in TOKENIZER_CLASSES.items():
        if cls == named and other != kind:
            raise NmtError(f"{source} is an {other} model (its tokenizer is {cls}), not {kind}", f"run `nmt import {other} {source}`")
    if not (model_dir / MULTILINGUAL_SPM).is_file():
        raise NmtError(f"{model_dir} has no {MULTILINGUAL_SPM}", hint)
    if kind == "m2m100":
        vocab, languages = m2m100_vocabulary(model_dir, tokenizer_config, hint)
    else:
        vocab, languages = nllb_vocabulary(model_dir, tokenizer_config)
    generation = read_json(model_dir / "generation_config.json", hint) if (model_dir / "generation_config.json").is_file() else {}
    config = m2m100_config(hf, generation, vocab)
    if max(vocab.values()) >= config.vocab_size:
        raise NmtError(f"the tokenizer has ids up to {max(vocab.values())} but the model only {config.vocab_size}", "the model dir mixes files of different models")
    state = convert_state(read_weights(model_dir), config, IMPORTERS[kind][0].split(":")[0])
    load_state(Transformer(config), state, model_dir)  # every tensor present, none left over, every shape right

    values = model_dir_config(
        config, MULTILINGUAL, MULTILINGUAL,
        tokenizer={"kind": "multilingual", "model": MULTILINGUAL_SPM, "vocab": MARIAN_VOCAB, "languages": languages},
        imported_from=provenance,
        license=card_license(model_dir / CARD_FILE) or "unknown",  # never claim a license the source did not state
    )
    card = hub_card(values, Path(out_dir).name, {}, values["license"])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / MARIAN_VOCAB).write_text(json.dumps(vocab, ensure_ascii=False, indent=1), encoding="utf-8")
        # Written whole beside out_dir and moved in, config.json last: an interrupted import leaves nothing loadable.
        write_model_dir(out_dir, state, values, {MULTILINGUAL_SPM: model_dir / MULTILINGUAL_SPM, MARIAN_VOCAB: Path(tmp) / MARIAN_VOCAB}, card)
    return values


def m2m100_vocabulary(model_dir: Path, tokenizer_config: dict[str, Any], hint: str) -> tuple[dict[str, int], dict[str, str]]:
    """M2M100Tokenizer's ids: vocab.json, then one tag `__xx__` per language of its code list."""
    if not (model_dir / MARIAN_VOCAB).is_file():
        raise NmtError(f"{model_dir} has no {MARIAN_VOCAB}", hint)
    vocab = dict(read_json(model_dir / MARIAN_VOCAB, hint))
    codes = {"m2m100": M2M100_CODES, "wmt21": WMT21_CODES}.get(tokenizer_config.get("language_codes", "m2m100"))
    if codes is None:
        raise NmtError(f"unknown language_codes {tokenizer_config['language_codes']!r} in {TOKENIZER_CONFIG}", "M2M100Tokenizer knows m2m100 and wmt21")
    size = len(vocab)
    languages = {code: f"__{code}__" for code in codes}
    for i, code in enumerate(codes):
        vocab[languages[code]] = size + i
    return vocab, languages


def nllb_vocabulary(model_dir: Path, tokenizer_config: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
    """NllbTokenizer's ids: tokenizer.json's vocabulary and added tokens where the dir has it, else fairseq's layout
    computed from the sentencepiece model (pieces shifted by one, then the language codes, then <mask>)."""
    if tokenizer_config.get("legacy_behaviour"):
        raise NmtError("this NLLB tokenizer uses the legacy layout (`text </s> eng_Latn`)", "nmt reads NLLB sources as `eng_Latn text </s>`")
    listed = tokenizer_config.get("extra_special_tokens") or tokenizer_config.get("additional_special_tokens") or NLLB_CODES
    listed = [t if isinstance(t, str) else t.get("content") for t in listed]
    if (model_dir / TOKENIZER_JSON).is_file():
        spec = read_json(model_dir / TOKENIZER_JSON, "re-download the model")
        pieces = spec.get("model", {}).get("vocab")
        vocab = dict(pieces) if isinstance(pieces, dict) else {p[0]: i for i, p in enumerate(pieces or [])}
        vocab.update({t["content"]: t["id"] for t in spec.get("added_tokens", [])})
    else:
        sp = load_sentencepiece(model_dir / MULTILINGUAL_SPM)
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        vocab.update({sp.id_to_piece(i): i + 1 for i in range(3, sp.get_piece_size())})
        for code in [*listed, "<mask>"]:
            if code not in vocab:
                vocab[code] = max(vocab.values()) + 1
    languages = {code: code for code in listed if code in vocab and code not in ("<mask>",)}
    if not languages:
        raise NmtError("the NLLB tokenizer lists no language codes", f"is {TOKENIZER_JSON} NLLB's?")
    return vocab, languages


def m2m100_config(hf: dict[str, Any], generation: dict[str, Any], vocab: dict[str, int]) -> ModelConfig:
    """The ModelConfig of a Hugging Face M2M100Config; refuses what nmt's model cannot express."""

    def need(key: str) -> Any:
        if key not in hf:
            raise NmtError(f"the M2M-100 config.json lacks {key!r}", "is this an M2M100ForConditionalGeneration config?")
        return hf[key]

    shape = shape_fields(hf, need)
    pad = need("pad_token_id")
    eos = need("eos_token_id")
    start = hf.get("decoder_start_token_id", generation.get("decoder_start_token_id", eos))
    return ModelConfig(
        vocab_size=need("vocab_size"),
        **shape,
        norm="pre",
        positions="fairseq",
        position_offset=pad + 1,  # fairseq counts positions from padding_idx + 1
        language_tags=True,
        pad_id=pad,
        unk_id=vocab.get("<unk>", 3),
        bos_id=start,  # fairseq's decoders start from </s>
        eos_id=eos,
    )


def convert_state(weights: dict[str, torch.Tensor], config: ModelConfig, what: str) -> dict[str, torch.Tensor]:
    """Rename M2M100's tensors to nmt's and fuse the attention projections nmt computes in one matmul. The sinusoid
    tables are not stored (transformers recomputes them, as nmt does)."""
    w = {k.removeprefix("model."): v for k, v in weights.items()}
    out = {"embedding.tokens.weight": shared_embedding(w, what)}
    out.update(convert_layers(w, config, what))
    return {k: v.float().contiguous() for k, v in out.items()}
