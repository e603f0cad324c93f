"""CPU decoding speed: linear layers prepared once for the CPU's matrix products.

A decoding step multiplies a few hundred rows (sentences x beam) by every weight matrix of the
decoder and by the whole output embedding (d_model x vocabulary). The default GEMM repacks the
weight matrix on every call, which costs more than the arithmetic when the rows are few; oneDNN
keeps it packed, so a step pays for the arithmetic alone (benchmarks/translate_speed.py measures the
effect end to end).

`--dtype int8` goes further, as CTranslate2's int8 does: weights in int8 with one scale per output
row, activations quantized per call (fbgemm's dynamic linear), int8 products accumulated in int32.
About twice the arithmetic per cycle of fp32 on AVX2 (benchmarks/translate_speed.py); results differ
from fp32 by about 1-2% of a layer's output range, so a translation may change where two candidates
are close. It is opt-in for that reason.

The ops are PyTorch's own (`torch.ops.mkldnn`, what torch.compile emits for frozen CPU models;
`torch.ops.quantized`, what `quantize_dynamic` uses). Every prepared layer is checked against
`F.linear` once; on a build without the ops, or any disagreement, the model is left as it was.
"""

from __future__ import annotations

import ctypes
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nmtcli.model.transformer import Transformer

ROWS_HINT = 128  # typical rows per decoding step; only a hint for the packed layout


class PackedLinear(nn.Module):
    """`nn.Linear` for inference with a pre-packed weight (y = x W^T + b)."""

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        self.register_buffer("packed", torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT), persistent=False)
        self.register_buffer("bias", None if bias is None else bias.detach(), persistent=False)
        self.out_features = weight.size(0)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


class Int8Linear(nn.Module):
    """`nn.Linear` for inference in int8: W with one scale per output row (symmetric), x quantized at
    every call over its whole range to 7 bits (AVX2's int8 multiply-add saturates at 16 bits with 8).
    """

    def __init__(self, weight: Tensor, bias: Tensor | None):
        super().__init__()
        weight = weight.detach().float()
        scale = (weight.abs().amax(1) / 127).clamp(min=1e-12).double()
        with warnings.catch_warnings():  # PyTorch deprecates quantized tensors; the ops below are what it has
            warnings.simplefilter("ignore")
            quantized = torch.quantize_per_channel(weight, scale, torch.zeros(weight.size(0), dtype=torch.long), 0, torch.qint8)
            self.packed = torch.ops.quantized.linear_prepack(quantized, None if bias is None else bias.detach().float())
        self.out_features = weight.size(0)

    def forward(self, x: Tensor) -> Tensor:
        return torch.ops.quantized.linear_dynamic(x, self.packed, True)


def _agrees(layer: nn.Module, weight: Tensor, bias: Tensor | None, tolerance: float) -> bool:
    """The prepared layer's output equals `F.linear`'s, within `tolerance` of the output's range."""
    x = torch.randn(3, weight.size(1))
    expected = F.linear(x, weight, bias)
    return bool((layer(x) - expected).abs().max() <= tolerance * expected.abs().max() + 1e-4)


# (layer class, tolerance): fp32 packing changes only the order of additions; int8 rounds weights to
# 1/254 of each row's range and inputs to 1/127 of theirs (about 2% of the output range is typical).
PREPARED = {"packed": (PackedLinear, 1e-4), "int8": (Int8Linear, 0.1)}


def pack_for_cpu(model: Transformer, kind: str = "packed") -> bool:
    """Prepare every linear layer and the tied output projection of a CPU model in eval mode:
    "packed" (fp32, oneDNN's blocked layout) or "int8" (see Int8Linear).

    Returns whether the model was prepared; if not, it is left as it was. A prepared model is for
    inference only: it cannot be trained or saved.
    """
    layer_class, tolerance = PREPARED[kind]
    weight = model.embedding.tokens.weight
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return False
    if kind == "packed" and not torch.backends.mkldnn.is_available():
        return False
    try:
        with torch.no_grad():
            bias = model.final_logits_bias  # None for the paper's model; Marian's learned logits bias
            output = layer_class(weight, bias)
            if not _agrees(output, weight, bias, tolerance):
                return False
            replacements = []
            for parent in model.modules():
                for name, child in parent.named_children():
                    if isinstance(child, nn.Linear):
                        prepared = layer_class(child.weight, child.bias)
                        if not _agrees(prepared, child.weight, child.bias, tolerance):
                            return False
                        replacements.append((parent, name, prepared))
    except (RuntimeError, AttributeError, NotImplementedError):  # a build without oneDNN's or fbgemm's ops
        return False
    for parent, name, prepared in replacements:
        setattr(parent, name, prepared)
    model.packed_output = output
    model.eval()
    return True


# glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
_MALLOC_TUNED = False


def keep_freed_memory() -> bool:
    """Let glibc's malloc reuse freed memory instead of handing it back to the kernel.

    Every decoding step allocates and frees tensors of tens of megabytes (a base model's logits over
    a 58k vocabulary for 128 rows are 30 MB). glibc serves such sizes with a fresh mmap and unmaps
    them when freed, so each step first-touches thousands of new pages: the kernel faults and zeroes
    each one. Serving them from the heap (up to 32 MB, glibc's largest threshold) and keeping the
    heap's freed top takes those faults out of every step; the price is a process that keeps its
    peak memory until it exits. Returns whether it applied (glibc only; once).
    """
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return True
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl, Windows)
        return False
    _MALLOC_TUNED = bool(mallopt(M_MMAP_THRESHOLD, 32 << 20)) and bool(mallopt(M_TRIM_THRESHOLD, 1 << 30))
    return _MALLOC_TUNED
