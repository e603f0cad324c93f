"""Import a Hugging Face Marian model (the 1,000+ OPUS-MT models, Helsinki-NLP/opus-mt-*) as an nmt model dir.

Marian's Transformer is the paper's post-norm model with four differences, each a ModelConfig switch:
swish in the feed-forward network, positional encodings with all sines before all cosines, a learned
bias on the output logits, and a decoder that starts from the pad token. Its tokenization is two
sentencepiece models (source, target) whose pieces map to one joint vocabulary (`vocab.json`); the
model dir keeps those three files and says so in `config.json` ("tokenizer": {"kind": "marian"}).

The download, the weights and the layers are interop/huggingface.py's, shared with the M2M-100 and NLLB import.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from nmtcli.errors import NmtError
from nmtcli.inference.tokenizer import MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB
from nmtcli.card import hub_card
from nmtcli.interop.huggingface import (Say, card_license, check_architecture, convert_layers, fetch, importers_hint,
                                        read_json, read_weights, shape_fields, shared_embedding)
from nmtcli.model.checkpoint import CARD_FILE, CONFIG_FILE, WEIGHTS_FILE, load_state, model_dir_config, write_model_dir
from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import Transformer, sinusoidal_positions

HUB_FILES = [CONFIG_FILE, WEIGHTS_FILE, MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB,
             "tokenizer_config.json", "generation_config.json", "target_vocab.json", CARD_FILE]
MARIAN_HINT = "a Marian model dir has config.json, source.spm, target.spm and vocab.json"


def fetch_marian(source: str, revision: str | None = None, say: Say | None = None) -> tuple[Path, dict[str, Any]]:
    """A local Marian dir, or a Hub id downloaded through the Hub cache. Returns (dir, provenance)."""
    return fetch(source, "marian", HUB_FILES, revision, say)


def import_marian(
    source: str,
    out_dir: Path,
    revision: str | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    say: Say | None = None,
) -> dict[str, Any]:
    """Convert the Marian model `source` (dir or Hub id) into the nmt model dir `out_dir`; returns its config.json."""
    marian_dir, provenance = fetch_marian(source, revision, say)
    hf = read_json(marian_dir / CONFIG_FILE, MARIAN_HINT)
    check_architecture(hf, "marian", source)
    tokenizer_config = read_json(marian_dir / "tokenizer_config.json", MARIAN_HINT) if (marian_dir / "tokenizer_config.json").is_file() else {}
    for name in (MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB):
        if not (marian_dir / name).is_file():
            raise NmtError(f"{marian_dir} has no {name}", "a Marian model dir needs source.spm, target.spm and vocab.json")
    if (marian_dir / "target_vocab.json").is_file() or tokenizer_config.get("separate_vocabs"):
        raise NmtError(f"{source} has separate source and target vocabularies", "nmt models share one vocabulary; only joint-vocabulary Marian models can be imported")
    vocab = read_json(marian_dir / MARIAN_VOCAB, MARIAN_HINT)
    config = marian_config(hf, vocab)
    state = convert_state(read_weights(marian_dir), config)
    model = Transformer(config)
    load_state(model, state, marian_dir)  # every tensor present, none left over, every shape right

    src, tgt = _languages(source, tokenizer_config, source_lang, target_lang)
    values = model_dir_config(
        config, src, tgt,
        tokenizer={"kind": "marian", "source": MARIAN_SOURCE_SPM, "target": MARIAN_TARGET_SPM, "vocab": MARIAN_VOCAB},
        imported_from=provenance,
        license=card_license(marian_dir / CARD_FILE) or "unknown",  # never claim a license the source did not state
    )
    # Written whole beside out_dir and moved in, config.json last: an interrupted import leaves nothing loadable.
    card = hub_card(values, Path(out_dir).name, {}, values["license"])
    write_model_dir(out_dir, state, values, {name: marian_dir / name for name in (MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB)}, card)
    return values


def marian_config(hf: dict[str, Any], vocab: dict[str, int]) -> ModelConfig:
    """The ModelConfig of a Hugging Face MarianConfig; refuses what nmt's model cannot express."""

    def need(key: str) -> Any:
        if key not in hf:
            raise NmtError(f"the Marian config.json lacks {key!r}", "is this a MarianMTModel config?")
        return hf[key]

    if hf.get("model_type", "marian") != "marian":
        raise NmtError(f"config.json describes a {hf.get('model_type')!r} model, not Marian", importers_hint())
    shape = shape_fields(hf, need)
    if hf.get("share_encoder_decoder_embeddings", True) is False:
        raise NmtError("this Marian model has separate source and target embeddings", "nmt shares one embedding matrix; it cannot be imported")
    if hf.get("normalize_before") or hf.get("add_final_layer_norm") or hf.get("normalize_embedding"):
        raise NmtError("this Marian model uses layer-norm variants nmt does not implement", "only post-norm Marian models can be imported")
    vocab_size = need("vocab_size")
    pad = need("pad_token_id")
    return ModelConfig(
        vocab_size=vocab_size,
        **shape,
        norm="post",
        positions="sines_first",
        final_logits_bias=True,
        pad_id=pad,
        unk_id=vocab.get("<unk>", 1),
        bos_id=hf.get("decoder_start_token_id", pad),  # Marian starts decoding from the pad token
        eos_id=need("eos_token_id"),
    )


def convert_state(marian: dict[str, torch.Tensor], config: ModelConfig) -> dict[str, torch.Tensor]:
    """Rename Marian's tensors to nmt's and fuse the attention projections nmt computes in one matmul."""
    w = {k.removeprefix("model."): v for k, v in marian.items()}

    embedding = shared_embedding(w, "Marian")
    for part in ("encoder", "decoder"):
        key = f"{part}.embed_positions.weight"
        if key in w:  # older checkpoints store the (fixed) table: it must be the layout we compute
            expected = sinusoidal_positions(w[key].size(0), config.d_model, "sines_first")
            if not torch.allclose(w[key].float(), expected, atol=1e-4):
                raise NmtError(f"{key} is not the sines-first sinusoidal table", "only Marian models with sinusoidal positions can be imported")

    out = {"embedding.tokens.weight": embedding}
    bias = w.get("final_logits_bias")
    out["final_logits_bias"] = bias.reshape(-1) if bias is not None else torch.zeros(config.vocab_size)
    out.update(convert_layers(w, config, "Marian"))
    return {k: v.float().contiguous() for k, v in out.items()}


def _languages(source: str, tokenizer_config: dict[str, Any], src: str | None, tgt: str | None) -> tuple[str, str]:
    """--source-lang/--target-lang, else the tokenizer config, else the OPUS-MT name (opus-mt-SRC-TGT)."""
    src = src or tokenizer_config.get("source_lang")
    tgt = tgt or tokenizer_config.get("target_lang")
    named = re.search(r"opus-mt-(?:tc-[a-z]+-)?([A-Za-z_]+)-([A-Za-z_]+)$", source.rstrip("/"))
    if named:
        src, tgt = src or named.group(1), tgt or named.group(2)
    return src or "src", tgt or "tgt"
