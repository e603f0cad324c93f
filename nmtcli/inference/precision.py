"""Half-precision decoding on a GPU: the matrix products in bf16 (or fp16), the rest in fp32.

Casting the whole model to bf16 also rounds the residual stream, the layer norms and the softmax to
8 significant bits, and a decoder that adds up twelve sub-layers in bf16 drifts from the one that
was trained (in bf16 autocast: fp32 weights and residuals, bf16 products). Its EOS can lose to a
repeated word, and a translation then runs to its length limit. This module keeps what training
kept: the linear layers' weights are stored in half precision (half the memory to read per step),
layer norms, embeddings and the residual stream stay fp32, and decoding runs under autocast, which
casts each product's input to half precision and leaves its output there. The tied output
projection gets a half-precision copy, so no weight is cast during a step.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmtcli.model.transformer import Transformer

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}


class HalfOutput(nn.Module):
    """The pre-softmax projection (sec. 3.4) with a half-precision copy of the shared embedding matrix."""

    def __init__(self, weight: Tensor, bias: Tensor | None, dtype: torch.dtype):
        super().__init__()
        self.register_buffer("weight", weight.detach().to(dtype), persistent=False)
        self.register_buffer("bias", None if bias is None else bias.detach().to(dtype), persistent=False)

    def forward(self, hidden: Tensor) -> Tensor:
        return F.linear(hidden.to(self.weight.dtype), self.weight, self.bias)


def to_half(model: Transformer, name: str) -> None:
    """Store every linear layer of an inference model in half precision; see the module's docstring."""
    dtype = HALF[name]
    for module in model.modules():
        if isinstance(module, nn.Linear):
            module.to(dtype)
    model.packed_output = HalfOutput(model.embedding.tokens.weight, model.final_logits_bias, dtype)


def autocast(device: torch.device, name: str):
    """The context a search runs in: autocast for half precision (no weight cache: a CUDA graph may be
    captured inside), nothing for fp32."""
    if name not in HALF:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=HALF[name], cache_enabled=False)
