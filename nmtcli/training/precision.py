"""Numeric precision of training: fp32, bf16 autocast, bf16 weights with fp32 masters, or fp16 autocast
with a dynamic loss scaler.

bf16 has fp32's exponent range, so it needs no loss scaling; it is the default on GPUs that have it
(Ampere and newer). fp16 (for older GPUs) overflows and underflows easily: the loss is multiplied by
a scale before backward, steps whose gradients overflow are skipped and the scale halved, and the
scale grows again after a run of good steps (Micikevicius et al., 2018). Under autocast the weights,
optimizer state and the loss itself stay fp32, and every matrix product casts its weight (and, backward,
its gradient) at every use.

bf16-master (`MasterWeights`) keeps a bf16 copy of the model for the forward and backward passes and
the fp32 model as the optimizer's master weights, as Megatron-LM's mixed precision does: no weight is
cast per use; once a step the bf16 gradients are copied into the masters' fp32 gradients (one foreach
copy) and, after fused Adam has stepped the masters, the masters into the bf16 weights (one foreach
copy). What then runs in bf16 that autocast ran in fp32: LayerNorm's input and output (its mean and
variance are still accumulated in fp32 by PyTorch's kernels), the residual stream and its additions,
the positional encodings (a bf16 table: 3 significant digits of sin/cos), and the gradients as
backward accumulates them within a batch. Attention's softmax runs in fp32 inside the fused kernels
either way, and the loss's log-softmax is fp32 (training/loss.py). The weights the optimizer updates,
its moments, the checkpoints, validation and `nmt average` stay fp32: an update smaller than a bf16
weight's rounding step is not lost, it accumulates in the master.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass

import torch
from torch import nn

from nmtcli.errors import NmtError


@dataclass
class Precision:
    name: str  # fp32, bf16 or fp16: what runs
    device: torch.device
    scaler: torch.amp.GradScaler  # enabled only for fp16; a no-op otherwise
    master_weights: bool = False  # bf16-master: a bf16 model trains, the fp32 model holds the masters

    @property
    def label(self) -> str:
        """The name it was chosen by: bf16-master, or the name of what runs."""
        return "bf16-master" if self.master_weights else self.name

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
        """The context every forward pass of the fp32 model runs in (bf16-master trains its bf16 copy
        outside autocast: `training_autocast`)."""
        if self.name == "fp32":
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.dtype)

    def training_autocast(self):
        """The context a training step's forward pass runs in: none for bf16 weights, else `autocast`."""
        return contextlib.nullcontext() if self.master_weights else self.autocast()


def choose(name: str, device: torch.device, world_size: int = 1, compiled: bool = False) -> str:
    """What --precision `name` comes to: auto is, on a GPU that supports bf16, bf16-master for one rank without
    --compile and bf16 autocast otherwise; fp32 elsewhere (fp16 only when asked for).

    bf16-master is the default where it was measured (docs/training.md, "Precision and speed"). With several ranks (the
    gradients are all-reduced in bf16) and with --compile it has not been measured, so those keep autocast
    unless it is asked for."""
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return "bf16-master" if world_size == 1 and not compiled else "bf16"
        return "fp32"
    if name in ("bf16", "bf16-master") and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise NmtError(f"{torch.cuda.get_device_name(device)} does not support bf16", "use --precision fp16 (or fp32)")
    return name


def build(label: str, device: torch.device) -> Precision:
    """The Precision a run trains in, from `choose`'s label (a fresh loss scaler, enabled only for fp16)."""
    master_weights = label == "bf16-master"
    name = "bf16" if master_weights else label
    if name == "fp32" and device.type == "cuda":
        use_tf32()
    return Precision(name, device, torch.amp.GradScaler(device.type, enabled=name == "fp16"), master_weights)


def resolve(name: str, device: torch.device, world_size: int = 1, compiled: bool = False) -> Precision:
    """`build(choose(...))`: the Precision --precision `name` comes to."""
    return build(choose(name, device, world_size, compiled), device)


class MasterWeights:
    """A bf16 copy of `model` (`working`) that the training step runs, with `model`'s fp32 parameters
    as the master weights its optimizer steps.

    The masters' gradients are allocated once and kept (the optimizer's zero_grad must not drop them):
    `gradients_to_masters` after each batch's backward copies (first batch) or adds (later batches of the
    step) the bf16 gradients into them in one foreach op and drops the bf16 ones, so gradient accumulation
    over --update-freq batches sums in fp32; `masters_to_working` after the optimizer step copies the masters
    into the bf16 weights in one foreach op. The fp32 model stays what is saved, validated and averaged.
    """

    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.bfloat16):
        self.working = copy.deepcopy(model).to(dtype)  # its buffers too: the positional encodings' table
        self.masters = list(model.parameters())
        self.params = list(self.working.parameters())
        for master in self.masters:
            master.grad = torch.zeros_like(master)
        self._grads = [m.grad for m in self.masters]

    @torch.no_grad()
    def gradients_to_masters(self, first: bool) -> None:
        """The bf16 gradients of this batch into the masters' fp32 gradients: copied (`first` batch of a
        step) or added. A parameter no gradient reached counts as a zero gradient."""
        missing = [m for m, p in zip(self._grads, self.params) if p.grad is None]
        if missing:
            if first:
                torch._foreach_zero_(missing)
            pairs = [(m, p.grad) for m, p in zip(self._grads, self.params) if p.grad is not None]
            masters, grads = [m for m, _ in pairs], [g for _, g in pairs]
        else:
            masters, grads = self._grads, [p.grad for p in self.params]
        if first:
            torch._foreach_copy_(masters, grads)
        else:
            torch._foreach_add_(masters, grads)
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def masters_to_working(self) -> None:
        """The masters (just stepped) into the bf16 weights: one rounding per weight and step."""
        torch._foreach_copy_(self.params, self.masters)


def use_tf32() -> None:
    """fp32 training on a GPU multiplies on the TF32 tensor cores (fp32 range and sums, 10-bit mantissa
    products), the peak its MFU is counted against (training/flops.py); PyTorch's default is full fp32 on
    the CUDA cores, some eight times slower on an H100. Translation in fp32 stays exact: it is the
    reference that --dtype bf16 and fp16 are checked against."""
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    torch.backends.cudnn.fp32_precision = "tf32"
