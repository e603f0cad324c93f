"""Export an nmt model dir to CTranslate2 through its Python spec API (the `ctranslate2` extra).

CTranslate2 runs the same Transformer (post-norm, sec. 3.1, or pre-norm: `pre_norm`) in optimized C++ with
optional int8/float16 weights. The export writes CTranslate2's own files (model.bin, config.json,
the vocabularies) and `nmt.json`: the nmt config and the tokenizer files, so `nmt translate
--engine ctranslate2` reads raw text and writes raw text exactly as the native engine does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from nmtcli.data.text import SPM_FILE
from nmtcli.errors import NmtError
from nmtcli.files import atomic_copy, atomic_write_json, staged_dir
from nmtcli.inference.tokenizer import MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB, load_tokenizer
from nmtcli.model.checkpoint import load_model

NMT_FILE = "nmt.json"  # beside CTranslate2's config.json, which has its own format
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def require_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise NmtError("CTranslate2 is not installed", 'install the extra: pip install "nmtcli[ctranslate2]"') from None
    return ctranslate2


def export_ctranslate2(model_dir: Path, out_dir: Path, quantization: str | None = None, force: bool = False) -> dict[str, Any]:
    """Write the CTranslate2 model of `model_dir` into `out_dir` (built beside it, renamed into place)."""
    ctranslate2 = require_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    if quantization is not None and quantization not in QUANTIZATIONS:
        raise NmtError(f"unknown --quantization {quantization!r}", f"choose one of {', '.join(QUANTIZATIONS)}", exit_code=2)
    out_dir = Path(out_dir)
    if out_dir.exists() and not force:
        raise NmtError(f"{out_dir} already exists", "pass --force to replace it, or choose another OUT_DIR")
    model, values = load_model(model_dir)
    cfg = model.config
    if cfg.language_tags:  # the CTranslate2 translator would need the tags as a source token and a target prefix
        raise NmtError(f"{model_dir} is a multilingual model (M2M-100, NLLB-200): its CTranslate2 export is not available yet",
                       "translate it with the native engine: `nmt translate -m MODEL --target-lang CODE`")
    tokenizer = load_tokenizer(Path(model_dir), values)
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU, "swish": common_spec.Activation.SWISH}[cfg.activation]
    # (encoder, decoder) layers: CTranslate2 builds stacks of different depths, a student's deep encoder and shallow decoder
    spec = transformer_spec.TransformerSpec.from_config((cfg.layers, cfg.decoder_layers), cfg.heads, pre_norm=cfg.norm == "pre",
                                                        activation=activation)
    _set_weights(spec, model)
    _set_vocabulary(spec, tokenizer.pieces(), cfg, model_dir)
    spec.validate()
    spec.optimize(quantization=quantization)

    with staged_dir(out_dir) as tmp:  # the export appears complete or not at all
        spec.save(str(tmp))
        tokenizer_spec = values.get("tokenizer") or {"kind": "sentencepiece"}
        for name in (SPM_FILE, MARIAN_SOURCE_SPM, MARIAN_TARGET_SPM, MARIAN_VOCAB):
            if (Path(model_dir) / name).is_file():
                atomic_copy(Path(model_dir) / name, tmp / name)
        meta = {
            "format": "nmt-ctranslate2",
            "format_version": 1,
            "model": values["model"],
            "languages": values.get("languages", {}),
            "tokenizer": tokenizer_spec,
            "quantization": quantization or "float32",
            "exported_from": str(Path(model_dir).resolve()),
            "versions": {**values.get("versions", {}), "ctranslate2": ctranslate2.__version__},
        }
        atomic_write_json(tmp / NMT_FILE, meta)
    return meta


def _set_weights(spec, model) -> None:
    """nmt's tensors into CTranslate2's Transformer spec, layer by layer."""
    cfg = model.config
    state = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    positions = model.embedding.positions.float().numpy()
    scale = True if cfg.scale_embedding else False

    for part, stack in (("encoder", spec.encoder), ("decoder", spec.decoder)):
        embeddings = stack.embeddings[0] if isinstance(stack.embeddings, list) else stack.embeddings
        embeddings.weight = state["embedding.tokens.weight"]  # one matrix for source, target, output (sec. 3.4)
        stack.scale_embeddings = scale
        stack.position_encodings.encodings = positions
        if cfg.norm == "pre":
            _norm(stack.layer_norm, state, f"{part}.final_norm")
        for i, layer in enumerate(stack.layer):
            p = f"{part}.layers.{i}"
            _linear(layer.self_attention.linear[0], state, f"{p}.self_attn.qkv_proj")
            _linear(layer.self_attention.linear[1], state, f"{p}.self_attn.out_proj")
            _norm(layer.self_attention.layer_norm, state, f"{p}.sublayer.0.norm")
            if part == "decoder":
                _linear(layer.attention.linear[0], state, f"{p}.cross_attn.q_proj")
                _linear(layer.attention.linear[1], state, f"{p}.cross_attn.kv_proj")
                _linear(layer.attention.linear[2], state, f"{p}.cross_attn.out_proj")
                _norm(layer.attention.layer_norm, state, f"{p}.sublayer.1.norm")
            _linear(layer.ffn.linear_0, state, f"{p}.ffn.linear1")
            _linear(layer.ffn.linear_1, state, f"{p}.ffn.linear2")
            _norm(layer.ffn.layer_norm, state, f"{p}.sublayer.{2 if part == 'decoder' else 1}.norm")
    spec.decoder.projection.weight = state["embedding.tokens.weight"]
    if cfg.final_logits_bias:
        spec.decoder.projection.bias = state["final_logits_bias"]
    spec.decoder.start_from_zero_embedding = False


def _set_vocabulary(spec, pieces: list[str], cfg, model_dir: Path) -> None:
    """One vocabulary for source and target (padded to the model's size with unused pieces) and the special tokens."""
    pieces += [f"<unused{i}>" for i in range(len(pieces), cfg.vocab_size)]
    if len(set(pieces)) != len(pieces):
        raise NmtError(f"the vocabulary of {model_dir} has duplicate pieces", "CTranslate2 needs unique token strings")
    spec.register_source_vocabulary(pieces)
    spec.register_target_vocabulary(pieces)
    spec.config.unk_token = pieces[cfg.unk_id]
    spec.config.bos_token = pieces[cfg.bos_id]
    spec.config.eos_token = pieces[cfg.eos_id]
    spec.config.decoder_start_token = pieces[cfg.bos_id]


def _linear(spec, state: dict[str, np.ndarray], name: str) -> None:
    spec.weight = state[f"{name}.weight"]
    spec.bias = state[f"{name}.bias"]


def _norm(spec, state: dict[str, np.ndarray], name: str) -> None:
    spec.gamma = state[f"{name}.weight"]
    spec.beta = state[f"{name}.bias"]
