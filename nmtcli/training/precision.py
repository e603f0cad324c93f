"""Numeric precision of training: fp32, bf16 autocast, or fp16 autocast with a dynamic loss scaler.

bf16 has fp32's exponent range, so it needs no loss scaling; it is the default on GPUs that have it
(Ampere and newer). fp16 (for older GPUs) overflows and underflows easily: the loss is multiplied by
a scale before backward, steps whose gradients overflow are skipped and the scale halved, and the
scale grows again after a run of good steps (Micikevicius et al., 2018). Weights, optimizer state
and the loss itself always stay fp32.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from nmtcli.errors import NmtError

PRECISIONS = ("auto", "fp32", "bf16", "fp16")


@dataclass
class Precision:
    name: str  # fp32, bf16 or fp16: what runs
    device: torch.device
    scaler: torch.amp.GradScaler  # enabled only for fp16; a no-op otherwise

    @property
    def dtype(self) -> torch.dtype:
        return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[self.name]

    def step(self, optimizer: torch.optim.Optimizer) -> bool:
        """optimizer.step() through the loss scaler; True when fp16 skipped it (a gradient overflowed).

        Only fp16 makes the host wait for the device here, once: whether the step counts decides the
        next learning rate. The scale before the step is copied on the device, not read.
        """
        if not self.scaler.is_enabled():
            optimizer.step()
            return False
        scale = getattr(self.scaler, "_scale", None)  # GradScaler's scale tensor (private; read if it moves)
        before = scale.clone() if isinstance(scale, torch.Tensor) else self.scaler.get_scale()
        self.scaler.step(optimizer)
        self.scaler.update()
        return self.scaler.get_scale() < float(before)

    def autocast(self):
        """The context every forward pass runs in."""
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)


def resolve(name: str, device: torch.device) -> Precision:
    """auto: bf16 on a GPU that supports it, fp32 otherwise (fp16 only when asked for)."""
    if name not in PRECISIONS:
        raise NmtError(f"unknown precision {name!r}", f"choose one of {', '.join(PRECISIONS)}", exit_code=2)
    if name == "auto":
        name = "bf16" if device.type == "cuda" and torch.cuda.is_bf16_supported() else "fp32"
    if name == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise NmtError(f"{torch.cuda.get_device_name(device)} does not support bf16", "use --precision fp16 (or fp32)")
    if name == "fp32" and device.type == "cuda":
        use_tf32()
    scaler = torch.amp.GradScaler(device.type, enabled=name == "fp16")
    return Precision(name, device, scaler)


def use_tf32() -> None:
    """fp32 training on a GPU multiplies on the TF32 tensor cores (fp32 range and sums, 10-bit mantissa
    products), the peak its MFU is counted against (training/flops.py); PyTorch's default is full fp32 on
    the CUDA cores, some eight times slower on an H100. Translation in fp32 stays exact: it is the
    reference that --dtype bf16 and fp16 are checked against."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.fp32_precision = "tf32"
