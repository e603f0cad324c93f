"""Data-parallel training: one process per GPU (or per CPU worker) under torchrun, DDP, summed metrics.

`nmt train` reads the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), so one command runs alone or as `torchrun --nproc-per-node N -m nmtcli train ...`, on
one node or many. nccl carries the gradients between GPUs, gloo between CPU processes.

The contract between ranks:
- every rank walks the same global batch order and takes its own share of each step
  (`data/batching.py: BatchStream.next_indices`), so all ranks run the same number of batches;
- gradients are averaged by DDP; losses and token counts are summed over ranks with `all_reduce`;
- only rank 0 writes files.
A rank that fails exits at once; torchrun then stops the others, so no rank waits forever.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import sys
import warnings
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from nmtcli.errors import NmtError

if TYPE_CHECKING:
    from nmtcli.model.transformer import Transformer

# A collective that waits longer than this means a rank is gone or stuck; fail rather than hang.
TIMEOUT = timedelta(minutes=15)


@dataclass(frozen=True)
class Ranks:
    """Where this process sits in the job."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def from_environment() -> Ranks:
    """The ranks torchrun assigned to this process; a plain `nmt train` is rank 0 of 1."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise NmtError("RANK, WORLD_SIZE or LOCAL_RANK is not a number", "start distributed runs with torchrun") from None
    if not 0 <= rank < max(world, 1):
        raise NmtError(f"RANK={rank} is outside WORLD_SIZE={world}", "start distributed runs with torchrun")
    return Ranks(rank, max(world, 1), local)


def init(ranks: Ranks, device: torch.device) -> None:
    """Join the process group (nccl on GPU, gloo on CPU). A single process needs none."""
    if not ranks.distributed or dist.is_initialized():
        return
    if device.type == "cuda":
        torch.cuda.set_device(device)
    try:
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", timeout=TIMEOUT)
    except (RuntimeError, ValueError) as e:
        raise NmtError(f"could not join the process group: {e}", "start distributed runs with torchrun; check MASTER_ADDR/MASTER_PORT") from None


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sums over all ranks (float64, so token counts stay exact)."""
    if not dist.is_initialized():
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def all_gather(value: Any) -> list[Any]:
    """Every rank's `value`, in rank order (small Python objects: translations of the valid split)."""
    if not dist.is_initialized():
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def is_peer_failure(error: BaseException) -> bool:
    """True when `error` says another rank went away (its own message explains why), not this rank's fault."""
    if isinstance(error, getattr(dist, "DistError", ())):
        return True
    text = str(error)
    return isinstance(error, RuntimeError) and any(
        s in text for s in ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "NCCL communicator was aborted")
    )


# --- the model on several ranks ----------------------------------------------------------------


def wrap(model: Transformer, device: torch.device) -> torch.nn.parallel.DistributedDataParallel:
    """DDP around `model`: its gradients averaged over the ranks in buckets, during the backward."""
    with warnings.catch_warnings():
        # Newer PyTorch renames broadcast_buffers; the old name still means what we want here.
        warnings.simplefilter("ignore", FutureWarning)
        return torch.nn.parallel.DistributedDataParallel(
            model,
            device_ids=[device] if device.type == "cuda" else None,
            broadcast_buffers=False,  # the only buffer is the fixed positional-encoding table
            gradient_as_bucket_view=True,
            bucket_cap_mb=gradient_bucket_mb(model),
        )


def gradient_bucket_mb(model: Transformer) -> int:
    """DDP's gradient bucket: about one decoder layer's gradients (base 17 MB, big 65 MB), so that each
    layer's all-reduce starts when its backward is done and overlaps the backward of the layers below."""
    layer = sum(p.numel() * p.element_size() for p in model.decoder.layers[0].parameters())
    return max(1, math.ceil(layer / 2**20))


def parameter_fingerprint(model: torch.nn.Module) -> str:
    """sha256 of every parameter's bytes: equal on two ranks exactly when their weights are identical."""
    h = hashlib.sha256()
    for name, p in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def agreed_fingerprints(model: torch.nn.Module, step: int) -> list[str]:
    """Every rank's parameter fingerprint, in rank order; ranks whose weights differ are an error (a bug)."""
    fingerprints = all_gather(parameter_fingerprint(model))
    if len(set(fingerprints)) > 1:
        raise NmtError(f"the ranks' weights diverged at step {step}", "this is a bug; please report it with the run's config.json")
    return fingerprints


# --- `nmt train --gpus N`: torchrun on the user's behalf ------------------------------------------


def check_ranks(nproc: int, device: str | None) -> None:
    """`--gpus N` of `nmt train` and `nmt translate`: at least 1, and no more than this node's GPUs (CPU ranks with --device cpu)."""
    if nproc < 1:
        raise NmtError(f"--gpus must be at least 1, not {nproc}", "pass the number of GPUs of this node", exit_code=2)
    if device != "cpu" and not torch.cuda.is_available():
        raise NmtError(f"--gpus {nproc} but no CUDA GPU is available", "pass --device cpu to run the ranks on the CPU", exit_code=2)
    if device != "cpu" and nproc > torch.cuda.device_count():
        raise NmtError(f"--gpus {nproc} but this node has {torch.cuda.device_count()} GPUs", "pass at most that many", exit_code=2)


def launch(nproc: int, argv: list[str], debug: bool = False, command: str = "train") -> None:
    """Run `python -m nmtcli COMMAND ARGV` as `nproc` ranks on this node, like torchrun --standalone
    (`nproc` at least 1 and at most the node's GPUs: `nmt train --gpus` and `nmt translate --gpus` check it).

    Each rank prints its own `nmt: error:` line; this returns normally when all ranks succeed and
    raises SystemExit with the failing rank's exit code otherwise (or an NmtError when a rank died
    without a word, e.g. killed by a signal).
    """
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import get_args_parser, run

    # torchrun's agent logs every worker's exit in detail; the ranks' own messages say it better.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.ERROR)
    args = get_args_parser().parse_args(
        ["--standalone", "--nproc-per-node", str(nproc), "--module", "nmtcli", *(["--debug"] if debug else []), command, *argv]
    )
    try:
        run(args)
    except ChildFailedError as e:
        rank, failure = e.get_first_failure()
        if failure.exitcode < 0:
            raise NmtError(
                f"rank {rank} was killed by signal {-failure.exitcode} (all ranks stopped)",
                "out of host memory? " + ("the run resumes from its last checkpoint" if command == "train" else
                                          "the translation resumes from its chunks done") + " when started again",
            ) from None
        sys.exit(failure.exitcode)
