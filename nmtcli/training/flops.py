"""Model FLOPs of a training step and model-FLOPs utilization (MFU), counted from the real sentence lengths.

How we count (matrix multiplications only; 2 FLOPs per multiply-add; d = d_model, V = vocabulary,
N = layers, M = decoder_layers (N unless a student's decoder is shallower); S and T are a sentence's source and
target lengths, EOS and BOS included):

    forward, encoder, each of N layers:  8 d^2 S  (Q, K, V, O projections)  + 4 d d_ff S  (FFN)
                                         + 4 d S^2  (Q K^T and attention x V)
    forward, decoder, each of M layers:  8 d^2 T  (self-attention projections)
                                         + 4 d^2 T + 4 d^2 S  (cross-attention: Q, O on the target; K, V on the source)
                                         + 4 d d_ff T  (FFN)
                                         + 4 d T^2  (self-attention, the causal square counted in full)
                                         + 4 d S T  (cross-attention)
    forward, output projection:          2 d V T
    training step = 3 x forward   (the backward pass costs twice the forward)

Without the attention terms this is the usual "6 x parameters x tokens" (each encoder weight meets
S tokens, each decoder weight T tokens, the tied output matrix T tokens). Biases, layer norms,
softmax, dropout, embedding lookups and the optimizer are not counted; padding is not counted
(these are the model's FLOPs, not the hardware's). Counting the causal square in full follows
PaLM's MFU definition (Chowdhery et al., 2022, app. B).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from nmtcli.model.config import ModelConfig


@dataclass
class LengthStats:
    """Sums over the sentences of a step that the FLOP count needs."""

    src: float = 0.0  # sum S
    tgt: float = 0.0  # sum T
    src_sq: float = 0.0  # sum S^2
    tgt_sq: float = 0.0  # sum T^2
    src_tgt: float = 0.0  # sum S*T

    @classmethod
    def of(cls, src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> LengthStats:
        s = np.asarray(src_lengths, dtype=np.float64) + 1  # + EOS
        t = np.asarray(tgt_lengths, dtype=np.float64) + 1  # + BOS (input) / EOS (output)
        return cls(float(s.sum()), float(t.sum()), float((s * s).sum()), float((t * t).sum()), float((s * t).sum()))

    def __add__(self, other: LengthStats) -> LengthStats:
        return LengthStats(self.src + other.src, self.tgt + other.tgt, self.src_sq + other.src_sq,
                           self.tgt_sq + other.tgt_sq, self.src_tgt + other.src_tgt)


def forward_flops(config: ModelConfig, n: LengthStats) -> float:
    d, f, V = config.d_model, config.d_ff, config.vocab_size
    encoder = config.layers * ((8 * d * d + 4 * d * f) * n.src + 4 * d * n.src_sq)
    decoder = config.decoder_layers * ((12 * d * d + 4 * d * f) * n.tgt + 4 * d * d * n.src + 4 * d * n.tgt_sq + 4 * d * n.src_tgt)
    output = 2 * d * V * n.tgt
    return float(encoder + decoder + output)


def training_flops(config: ModelConfig, n: LengthStats) -> float:
    """Model FLOPs of forward + backward over these sentences."""
    return 3.0 * forward_flops(config, n)


# Dense (no sparsity) peak tensor-core FLOP/s per GPU, from the vendors' data sheets.
# bf16 and fp16 peak the same on these parts; fp32 training uses TF32 tensor cores where PyTorch allows it.
PEAK_FLOPS = {
    # name substring: {precision: FLOP/s}
    "H200": {"bf16": 989.4e12, "fp16": 989.4e12, "fp32": 494.7e12},
    "H100 PCIe": {"bf16": 756.0e12, "fp16": 756.0e12, "fp32": 378.0e12},
    "H100": {"bf16": 989.4e12, "fp16": 989.4e12, "fp32": 494.7e12},  # SXM
    "A100": {"bf16": 312.0e12, "fp16": 312.0e12, "fp32": 156.0e12},
    "L40S": {"bf16": 362.1e12, "fp16": 362.1e12, "fp32": 181.0e12},
    "A10G": {"bf16": 70.0e12, "fp16": 70.0e12, "fp32": 35.0e12},
    "V100": {"fp16": 125.0e12, "fp32": 15.7e12},
}


def peak_flops(device_name: str, precision: str) -> float | None:
    """Peak FLOP/s of one GPU named `device_name` (torch.cuda.get_device_name) at `precision`; None if unknown."""
    for key, peaks in PEAK_FLOPS.items():  # ordered: "H100 PCIe" before "H100"
        if key in device_name:
            return peaks.get(precision)
    return None


def device_peak_flops(device: torch.device, precision: str, override_tflops: float | None) -> float | None:
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda":
        return None  # a CPU's peak depends on cores, clocks and vector units: no honest table
    return peak_flops(torch.cuda.get_device_name(device), precision)


def mfu(flops: float, seconds: float, peak_per_device: float, devices: int) -> float:
    """Model FLOPs per second achieved, as a fraction of the devices' combined peak."""
    return flops / seconds / (peak_per_device * devices)
