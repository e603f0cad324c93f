"""ModelConfig: every number that fixes the shape of a Transformer, and the paper's presets.

The names are the project's vocabulary (`d_model`, `d_ff`, `heads`, `layers`, `dropout`) and are the
same in code, `config.json`, CLI flags and docs.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Ids of the special tokens. `nmt prepare` trains sentencepiece with exactly these ids, so a model
# and its vocabulary always agree on them.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


@dataclass(frozen=True)
class ModelConfig:
    """The shape of an encoder-decoder Transformer (paper section 3, Table 3)."""

    vocab_size: int = 37000
    d_model: int = 512
    d_ff: int = 2048
    heads: int = 8
    layers: int = 6  # N: identical layers in the encoder (sec. 3.1), and in the decoder unless decoder_layers says otherwise
    dropout: float = 0.1  # P_drop: on every sub-layer output and on embeddings + positions (sec. 5.4)
    attention_dropout: float = 0.0  # on attention weights; 0 in the paper, 0.1 in fairseq's big recipe
    activation_dropout: float = 0.0  # inside the FFN, after the activation; 0 in the paper
    activation: str = "relu"  # FFN(x) = max(0, x W1 + b1) W2 + b2 (sec. 3.3)
    norm: str = "post"  # "post": LayerNorm(x + Dropout(Sublayer(x))), the paper; "pre": pre-norm variant
    max_positions: int = 1024  # longest sequence (tokens, with EOS) the position table covers
    # Variants the paper's model does not use, needed to load models trained elsewhere (OPUS-MT/Marian):
    positions: str = "interleaved"  # sec. 3.5 as written (sin at 2i, cos at 2i+1); "sines_first": all sines, then all cosines;
    # "fairseq": sines first with frequencies 10000^(-i/(d/2-1)) (fairseq, M2M-100, NLLB)
    position_offset: int = 0  # the table's first row for position 0 (fairseq: pad_id + 1, where its padding row sits below)
    scale_embedding: bool = True  # multiply token embeddings by sqrt(d_model) (sec. 3.4)
    final_logits_bias: bool = False  # a learned bias added to the output logits (Marian)
    # M2M-100, NLLB: the decoder's first output is the target language's tag, forced with probability 1 (as
    # transformers' forced_bos_token_id): its log-probability counts 0, the tag counts toward |Y|.
    language_tags: bool = False
    pad_id: int = PAD_ID
    unk_id: int = UNK_ID
    bos_id: int = BOS_ID
    eos_id: int = EOS_ID  # the decoder starts from bos_id; Marian models start from their pad token
    # The decoder's N where it differs from the encoder's: a distilled student's deep encoder runs once a sentence, its
    # shallow decoder once a token (Kasai et al., 2021, "Deep Encoder, Shallow Decoder"). None: `layers`, as in the
    # paper. Resolved to a number when the config is made, so every reader takes `decoder_layers` as it is.
    decoder_layers: int | None = None

    def __post_init__(self) -> None:
        if self.decoder_layers is None:  # frozen: the one field set after the fact
            object.__setattr__(self, "decoder_layers", self.layers)
        if self.d_model % self.heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by heads ({self.heads})")
        if self.d_model % 2:
            raise ValueError(f"d_model ({self.d_model}) must be even for sinusoidal positions")
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, not {self.activation!r}")
        if self.positions not in POSITION_LAYOUTS:
            raise ValueError(f"positions must be one of {list(POSITION_LAYOUTS)}, not {self.positions!r}")
        if self.norm not in NORMS:
            raise ValueError(f"norm must be 'post' or 'pre', not {self.norm!r}")
        if self.position_offset < 0:
            raise ValueError(f"position_offset must not be negative, not {self.position_offset}")
        for name in ("vocab_size", "d_ff", "layers", "decoder_layers", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")

    @property
    def d_k(self) -> int:
        """d_k = d_v = d_model / h (sec. 3.2.2)."""
        return self.d_model // self.heads

    def replace(self, **changes: Any) -> ModelConfig:
        if self.decoder_layers == self.layers:  # a decoder as deep as the encoder follows a change of `layers`
            changes.setdefault("decoder_layers", None)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """The config.json "model" object. `decoder_layers` only where it differs from `layers`: a model of the
        paper's shape writes the bytes it wrote before the key existed, so earlier versions still read it."""
        values = dataclasses.asdict(self)
        if values["decoder_layers"] == values["layers"]:
            del values["decoder_layers"]
        return values

    @property
    def depth(self) -> str:
        """The layers of the encoder and of the decoder, as `nmt info` and the model cards show them: "6+2"."""
        return f"{self.layers}+{self.decoder_layers}"

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown model config keys: {', '.join(unknown)}")
        return cls(**values)

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> ModelConfig:
        return cls.from_dict(json.loads(Path(path).read_text()))


ACTIVATIONS = ("relu", "gelu", "swish")
POSITION_LAYOUTS = ("interleaved", "sines_first", "fairseq")
NORMS = ("post", "pre")

# Table 3 of the paper. `tiny` is ours: small enough to learn a toy task on a laptop CPU in minutes, and pre-norm:
# post-norm's loss plateau at the start lasted a few hundred steps or most of a short run depending on the seed
# (demo corpus, 5 seeds: 21.4 +- 0.6 test BLEU pre-norm, 17.7 +- 5.8 post-norm; docs/training.md, "tiny: pre-norm").
# `small` is fairseq's transformer_iwslt_de_en, the field's reference for 100k-1M pairs (IWSLT14 de-en:
# about 34.7 tokenized BLEU): base's width with half its FFN, 4 heads and base-big's dropout 0.3.
#
# The students learn from a teacher's translations (sequence-level distillation, Kim and Rush, 2016) and are shaped
# to translate fast: a decoder step runs once a token, the encoder once a sentence, so the depth goes to the encoder
# (6 layers) and the decoder keeps 2 (Kasai et al., 2021). `student-tiny` is Bergamot's tiny11 (Firefox Translations'
# en-de student: d_model 256, FFN 1536, 8 heads, 6+2 layers, every embedding tied, as nmt always ties them, sec. 3.4)
# with a self-attention decoder where tiny11 has an SSRU; `student-base` is base's width on the same 6+2 depth.
# Post-norm, as Bergamot's Marian students (`transformer-postprocess: dan`) and the paper: tiny's pre-norm answers a
# plateau of short runs on a few thousand pairs, and a student trains long on all the teacher translated.
# Dropout 0.1, the paper's: Bergamot's students keep Marian's default of none on tens of millions of distilled lines;
# nmt's may learn from far fewer, and early stopping on validation BLEU stops them either way.
PRESETS: dict[str, ModelConfig] = {
    "tiny": ModelConfig(d_model=128, d_ff=512, heads=4, layers=2, dropout=0.1, norm="pre"),
    "small": ModelConfig(d_model=512, d_ff=1024, heads=4, layers=6, dropout=0.3),
    "base": ModelConfig(d_model=512, d_ff=2048, heads=8, layers=6, dropout=0.1),
    "big": ModelConfig(d_model=1024, d_ff=4096, heads=16, layers=6, dropout=0.3),
    "student-tiny": ModelConfig(d_model=256, d_ff=1536, heads=8, layers=6, decoder_layers=2, dropout=0.1),
    "student-base": ModelConfig(d_model=512, d_ff=2048, heads=8, layers=6, decoder_layers=2, dropout=0.1),
}
