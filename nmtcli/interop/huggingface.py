"""What every import of a Hugging Face transformers model shares: the download, the weights, the layers.

transformers' encoder-decoders of the BART family (Marian, M2M-100, NLLB-200's dense models) name their layers
alike (`self_attn`, `encoder_attn`, `fc1`, `fc2`, `*_layer_norm`); `convert_layers` maps them onto nmt's
Transformer, fusing the attention projections nmt computes in one matrix product.

Weights are read from `model.safetensors`, or else from `pytorch_model.bin` with
`torch.load(weights_only=True)`, which restores tensors only and executes nothing.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nmtcli.errors import NmtError
from nmtcli.model.checkpoint import CONFIG_FILE, WEIGHTS_FILE, load_weights
from nmtcli.model.config import ModelConfig

PICKLE_WEIGHTS = "pytorch_model.bin"
ACTIVATIONS = {"swish": "swish", "silu": "swish", "relu": "relu", "gelu": "gelu"}

# `nmt import KIND`: what each importer takes (transformers' class, model_type in config.json), for the messages
# that send a model of another architecture to the right one.
IMPORTERS = {
    "marian": ("MarianMTModel: the OPUS-MT models, Helsinki-NLP/opus-mt-*", "marian"),
    "m2m100": ("M2M100ForConditionalGeneration with M2M100Tokenizer: facebook/m2m100_418M, _1.2B", "m2m_100"),
    "nllb": ("M2M100ForConditionalGeneration with NllbTokenizer: facebook/nllb-200-distilled-600M, -1.3B, -3.3B", "m2m_100"),
}

Say = Callable[[str], None]


def shape_fields(hf: dict, need) -> dict:
    """The ModelConfig fields a BART-family config.json (Marian, M2M-100, NLLB) states alike: the shape, dropouts
    and activation. The stacks may differ in depth (a distilled student's shallow decoder), not in their layers'
    shape; refuses an activation nmt does not have. `need(key)`: hf[key], or the importer's error naming its
    architecture."""
    for enc, dec in [("encoder_attention_heads", "decoder_attention_heads"), ("encoder_ffn_dim", "decoder_ffn_dim")]:
        if need(enc) != hf.get(dec, hf[enc]):
            raise NmtError(f"{enc} ({hf[enc]}) differs from {dec} ({hf[dec]})", "nmt's encoder and decoder layers have the same shape")
    activation = ACTIVATIONS.get(str(need("activation_function")))
    if activation is None:
        raise NmtError(f"unsupported activation {hf['activation_function']!r}", f"nmt implements {', '.join(sorted(ACTIVATIONS))}")
    return dict(d_model=need("d_model"), d_ff=hf["encoder_ffn_dim"], heads=hf["encoder_attention_heads"], layers=need("encoder_layers"),
                decoder_layers=hf.get("decoder_layers", hf["encoder_layers"]),
                dropout=float(hf.get("dropout", 0.1)), attention_dropout=float(hf.get("attention_dropout", 0.0)),
                activation_dropout=float(hf.get("activation_dropout", 0.0)), activation=activation,
                max_positions=need("max_position_embeddings"), scale_embedding=bool(hf.get("scale_embedding", True)))


def importers_hint() -> str:
    return "nmt imports " + "; ".join(f"`nmt import {kind}`: {what}" for kind, (what, _) in IMPORTERS.items())


def fetch(source: str, kind: str, files: list[str], revision: str | None = None, say: Say | None = None) -> tuple[Path, dict[str, Any]]:
    """A local model dir, or a Hub id downloaded through the Hub cache (only `files`; the pickled weights where a
    repo has no model.safetensors). Returns (dir, provenance)."""
    from nmtcli import hub

    say = say or (lambda message: None)
    if Path(source).is_dir():
        return Path(source), {"kind": kind, "source": str(Path(source).resolve())}
    if not hub.looks_like_repo_id(source):
        example = re.search(r"[\w.-]+/[\w.-]+", IMPORTERS[kind][0]).group(0)
        raise NmtError(f"{source} is neither a directory nor a Hub repo id", f"pass a local transformers dir or a Hub id such as {example}")
    say(f"downloading {source} from the Hub")
    snapshot = hub.download(source, revision, files)
    if not (snapshot / WEIGHTS_FILE).is_file() and (snapshot / CONFIG_FILE).is_file():
        # Older repos only have the pickle; weights_only=True keeps loading it safe.
        snapshot = hub.download(source, revision, files + [PICKLE_WEIGHTS])
    return snapshot, {"kind": kind, "source": source, "revision": snapshot.name}


def check_architecture(hf: dict[str, Any], kind: str, source: str) -> None:
    """Refuse a config.json of another architecture, naming the importers that exist."""
    model_type = hf.get("model_type")
    if model_type != IMPORTERS[kind][1]:
        raise NmtError(f"{source} holds a {model_type!r} model, not what `nmt import {kind}` takes ({IMPORTERS[kind][0]})", importers_hint())


def read_weights(model_dir: Path) -> dict[str, torch.Tensor]:
    if (model_dir / WEIGHTS_FILE).is_file():
        return load_weights(model_dir / WEIGHTS_FILE)
    if (model_dir / PICKLE_WEIGHTS).is_file():
        try:
            state = torch.load(model_dir / PICKLE_WEIGHTS, map_location="cpu", weights_only=True)
        except Exception as e:  # weights_only refuses anything but tensors and containers
            raise NmtError(f"cannot read {model_dir / PICKLE_WEIGHTS} safely: {e}", "convert it to model.safetensors first") from None
        return dict(state)
    raise NmtError(f"{model_dir} has neither {WEIGHTS_FILE} nor {PICKLE_WEIGHTS}", "is this a Hugging Face model dir?")


def shared_embedding(w: dict[str, torch.Tensor], what: str) -> torch.Tensor:
    """The one matrix nmt uses for source and target embeddings and the output projection; refuses untied ones."""
    embeddings = [w[k] for k in ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight") if k in w]
    if not embeddings:
        raise NmtError(f"the {what} weights have no embedding matrix", f"the checkpoint is incomplete or not a {what} model")
    if any(not torch.equal(e, embeddings[0]) for e in embeddings[1:]):
        raise NmtError(f"this {what} model's embeddings and output projection differ", "nmt ties them into one matrix; it cannot be imported")
    return embeddings[0]


def convert_layers(w: dict[str, torch.Tensor], config: ModelConfig, what: str) -> dict[str, torch.Tensor]:
    """The encoder's and decoder's layers (and, pre-norm, their final layer norms) under nmt's names."""

    def take(key: str) -> torch.Tensor:
        if key not in w:
            raise NmtError(f"the {what} weights lack {key!r}", f"the checkpoint is incomplete or not a {what} model")
        return w[key]

    out = {}
    for part, layers in (("encoder", config.layers), ("decoder", config.decoder_layers)):
        for i in range(layers):
            src = dst = f"{part}.layers.{i}"
            norms = ["self_attn_layer_norm", "final_layer_norm"] if part == "encoder" else ["self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"]
            for name in ("weight", "bias"):
                out[f"{dst}.self_attn.qkv_proj.{name}"] = torch.cat([take(f"{src}.self_attn.{p}_proj.{name}") for p in "qkv"])
                out[f"{dst}.self_attn.out_proj.{name}"] = take(f"{src}.self_attn.out_proj.{name}")
                out[f"{dst}.ffn.linear1.{name}"] = take(f"{src}.fc1.{name}")
                out[f"{dst}.ffn.linear2.{name}"] = take(f"{src}.fc2.{name}")
                for j, norm in enumerate(norms):
                    out[f"{dst}.sublayer.{j}.norm.{name}"] = take(f"{src}.{norm}.{name}")
                if part == "decoder":
                    out[f"{dst}.cross_attn.q_proj.{name}"] = take(f"{src}.encoder_attn.q_proj.{name}")
                    out[f"{dst}.cross_attn.kv_proj.{name}"] = torch.cat([take(f"{src}.encoder_attn.{p}_proj.{name}") for p in "kv"])
                    out[f"{dst}.cross_attn.out_proj.{name}"] = take(f"{src}.encoder_attn.out_proj.{name}")
        if config.norm == "pre":  # the stack's final LayerNorm (fairseq's normalize_before models)
            for name in ("weight", "bias"):
                out[f"{part}.final_norm.{name}"] = take(f"{part}.layer_norm.{name}")
    return out


def read_json(path: Path, hint: str) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NmtError(f"{path} does not exist", hint) from None
    except ValueError as e:
        raise NmtError(f"{path} is not valid JSON: {e}", "re-download the model") from None


def card_license(card: Path) -> str | None:
    """The `license:` of the original model card's YAML header (OPUS-MT: cc-by-4.0 or apache-2.0; NLLB: cc-by-nc-4.0)."""
    if not card.is_file():
        return None
    text = card.read_text(encoding="utf-8", errors="replace")
    header = re.match(r"---\n(.*?)\n---", text, re.S)
    found = re.search(r"^license:\s*(\S+)\s*$", header.group(1), re.M) if header else None
    return found.group(1).strip("'\"") if found else None
