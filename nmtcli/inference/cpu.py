"""CPU decoding speed: linear layers with their weights packed once in oneDNN's blocked layout.

A decoding step multiplies a few hundred rows (sentences x beam) by every weight matrix of the
decoder and by the whole output embedding (d_model x vocabulary). The default GEMM repacks the
weight matrix on every call, which costs more than the arithmetic when the rows are few; oneDNN
keeps it packed. Measured on a 2-core AVX-512 CPU: the 512 x 58,101 output projection of 128 rows
in 94 ms instead of 329 ms (benchmarks/translate_speed.py has the end-to-end effect).

The ops are PyTorch's own (`torch.ops.mkldnn`, what torch.compile emits for frozen CPU models).
Every packed layer is checked against `F.linear` once; on a build without the ops, or any
disagreement, the model is left as it was.
"""

from __future__ import annotations

import ctypes

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


def _agrees(packed: PackedLinear, weight: Tensor, bias: Tensor | None) -> bool:
    x = torch.randn(3, weight.size(1))
    return torch.allclose(packed(x), F.linear(x, weight, bias), rtol=1e-4, atol=1e-4)


def pack_for_cpu(model: Transformer) -> bool:
    """Pack every linear layer and the tied output projection of an fp32 CPU model in eval mode.

    Returns whether the model was packed. Packing is for inference only: the packed model cannot be
    trained or saved.
    """
    weight = model.embedding.tokens.weight
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or not torch.backends.mkldnn.is_available():
        return False
    try:
        with torch.no_grad():
            bias = model.final_logits_bias  # None for the paper's model; Marian's learned logits bias
            output = PackedLinear(weight, bias)
            if not _agrees(output, weight, bias):
                return False
            replacements = []
            for parent in model.modules():
                for name, child in parent.named_children():
                    if isinstance(child, nn.Linear):
                        packed = PackedLinear(child.weight, child.bias)
                        if not _agrees(packed, child.weight, child.bias):
                            return False
                        replacements.append((parent, name, packed))
    except (RuntimeError, AttributeError):  # a build without oneDNN's linear ops
        return False
    for parent, name, packed in replacements:
        setattr(parent, name, packed)
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
    heap's freed top made decoding 19-27% faster on the development machine; the price is a process
    that keeps its peak memory until it exits. Returns whether it applied (glibc only; once).
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
