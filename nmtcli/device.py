"""Which device a command runs on, and the error a device raises when a batch does not fit."""

from __future__ import annotations

import contextlib

import torch

from nmtcli.errors import NmtError

# What a GPU raises for an allocation that does not fit: torch.OutOfMemoryError since PyTorch 2.5.
OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


def is_out_of_memory(error: BaseException) -> bool:
    """A GPU's out-of-memory error, or the CPU allocator's."""
    return isinstance(error, (OUT_OF_MEMORY, MemoryError)) or (isinstance(error, RuntimeError) and "can't allocate memory" in str(error))


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """`--device NAME` as a torch.device. `auto`: this process's GPU (cuda:LOCAL_RANK under torchrun)
    where there is one, else the CPU; `cuda` is cuda:LOCAL_RANK too."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise NmtError("--device cuda was asked for but no CUDA GPU is available", "use --device cpu")
        if name == "cuda":
            if local_rank >= torch.cuda.device_count():
                raise NmtError(
                    f"local rank {local_rank} has no GPU: this node has {torch.cuda.device_count()}",
                    "start at most one process per GPU (--nproc-per-node / --gpus)",
                )
            return torch.device("cuda", local_rank)
        try:
            device = torch.device(name)
        except RuntimeError:
            raise NmtError(f"unknown device {name!r}", "use auto, cpu, cuda or cuda:N") from None
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise NmtError(f"--device {name} but this machine has {torch.cuda.device_count()} CUDA GPU(s)",
                           f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}")
        return device
    if name != "cpu":
        raise NmtError(f"unknown device {name!r}", "use auto, cpu, cuda or cuda:N")
    return torch.device("cpu")


def on_device(device: torch.device):
    """A context in which `device` is the current CUDA device (for cuda:N, N > 0: the streams, CUDA graphs
    and kernels that PyTorch puts on "the current device" go to N, not to 0); nothing for a CPU."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    return torch.cuda.device(device)

