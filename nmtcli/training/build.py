"""What a run trains, built before its first step from its run dir and its plan (training/plan.py): the run dir
resumed or started over, the data, the model (new, --init's weights, or a checkpoint's to come), Adam, the forward the
steps run (compiled, DDP-wrapped), and whether the step is replayed from CUDA graphs. `Trainer.__init__`
(training/trainer.py) calls these in this order; nothing here decides what the plan decided.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nmtcli.data.batching import ParallelData
from nmtcli.model.checkpoint import WEIGHTS_FILE, load_state
from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import Transformer
from nmtcli.training import compiling, distributed, graphs, rundir
from nmtcli.training.finetune import InitModel
from nmtcli.training.settings import TrainSettings


def resume_point(run_dir: Path, restart: bool, ranks: distributed.Ranks, run_config: dict[str, Any], config: ModelConfig,
                 settings: TrainSettings) -> tuple[Path | None, dict[str, Any]]:
    """The checkpoint every rank resumes from (None: a new run; `restart` deletes the run dir first), checked against
    the run's settings, and its trainer state ({} for a new run)."""
    if restart and ranks.is_main and run_dir.exists():
        shutil.rmtree(run_dir)
    distributed.barrier()  # no rank looks for checkpoints while rank 0 may still be deleting them
    resume = rundir.agreed_resume_point(run_dir, ranks)
    if resume:
        rundir.check_resumable(run_dir, rundir.read_run_config(run_dir), run_config, config, settings)
    return resume, rundir.read_trainer_state(resume) if resume else {}


def parallel_data(data_dir: Path, manifest: dict[str, Any], config: ModelConfig) -> tuple[ParallelData, ParallelData]:
    """The prepared train and valid splits, checked against the model's vocabulary and special ids."""
    source, target = manifest["source_lang"], manifest["target_lang"]
    ids = (config.pad_id, config.bos_id, config.eos_id)
    return (ParallelData(data_dir, "train", source, target, config.vocab_size, *ids),
            ParallelData(data_dir, "valid", source, target, config.vocab_size, *ids))


def new_model(config: ModelConfig, seed: int, init: InitModel | None, device: torch.device) -> Transformer:
    """The model at step 0: initialized from `seed`, or --init's weights exactly (`init`; None when resuming, where the
    checkpoint's weights are loaded over it), on `device`."""
    torch.manual_seed(seed)  # the same seed gives the same initial weights on every rank
    model = Transformer(config)
    if init is not None:  # step 0 is the model's weights, exactly
        load_state(model, init.weights(), init.model_dir / WEIGHTS_FILE)
    model.to(device)
    return model


def adam(model: Transformer, settings: TrainSettings) -> torch.optim.Adam:
    """Adam (sec. 5.3), its learning rate set by each step. Fused: one kernel for all parameters on a GPU (and a
    vectorized loop on a CPU). With bf16-master these are the fp32 masters; the bf16 weights the step runs are copies
    of them."""
    return torch.optim.Adam(
        model.parameters(),
        lr=0.0,
        betas=(settings.adam_beta1, settings.adam_beta2),
        eps=settings.adam_eps,
        fused=True,
    )


def restore(path: Path, state: dict[str, Any], model: Transformer, optimizer: torch.optim.Optimizer, scaler) -> None:
    """Resuming: the weights of checkpoint `path`, and the optimizer and fp16's loss scale from its trainer state."""
    rundir.load_checkpoint_weights(path, model)
    optimizer.load_state_dict(state["optimizer"])
    if state.get("scaler") and scaler.is_enabled():
        scaler.load_state_dict(state["scaler"])


def progress(state: dict[str, Any]) -> tuple[int, dict[str, Any] | None, int, float | None]:
    """Where a run stands, from its trainer state ({} for a new run): (step, the best validation {"metric", "value",
    "step"} or None, validations since patience was last reset, the validation that reset it: min_delta counts from
    it; older checkpoints lack it: the best's)."""
    best = state.get("best")
    return int(state.get("step", 0)), best, int(state.get("bad_validations", 0)), state.get("patience_from", (best or {}).get("value"))


def forward_model(train_model: Transformer, compile: str, ranks: distributed.Ranks, device: torch.device,
                  run_dir: Path) -> tuple[torch.nn.Module | None, torch.nn.Module]:
    """(the DDP wrapper or None, the module the steps run forward): `train_model` with --compile's graphs (each kind of
    layer, or the whole forward a shape class) and, with several ranks, wrapped in DDP."""
    if compile:
        compiling.check_compile_works(device)
    if compile == "layers":  # batches of every length: each kind of layer compiled once, its sizes symbolic
        compiling.compile_layers(train_model)
    ddp = distributed.wrap(train_model, device) if ranks.distributed else None
    forward: torch.nn.Module = train_model if ddp is None else ddp
    if compile == "classes":  # the whole forward, one graph a class (Trainer.warm_up)
        compiling.cache_in(run_dir)
        forward = compiling.compile_model(forward)
    return ddp, forward


def training_graphs(settings: TrainSettings, precision: str, shape_classes: bool, world_size: int, device: torch.device, backend,
                    losses, model: Transformer, optimizer: torch.optim.Optimizer, masters,
                    off: Callable[[str, bool], None]) -> graphs.TrainingGraphs | None:
    """The step as CUDA graphs (training/graphs.py) where they are wanted and apply; else None. `losses(src, tgt_in,
    tgt_out)`: a batch's forward and losses; `backend` stands in for CUDA's capture (the tests' CPU recorder).
    off(reason, running): why they are refused before the first step (False), or turned off at a step (True)."""
    if not wants_graphs(settings, precision, shape_classes, world_size, device, backend):
        return None
    on_cuda = device.type == "cuda" or backend is not None
    why = graphs.refusal(precision, shape_classes, world_size, on_cuda)
    if why:
        off(f"--cuda-graphs is ignored: {why}", False)
        return None
    return graphs.TrainingGraphs(losses, model, optimizer, masters, backend, warn=lambda message: off(message, True))


def wants_graphs(settings: TrainSettings, precision: str, shape_classes: bool, world_size: int, device: torch.device,
                 backend) -> bool:
    """--cuda-graphs or --no-cuda-graphs as given; unset, where they were measured to pay (graphs.by_default)."""
    if settings.cuda_graphs is not None:
        return settings.cuda_graphs
    on_cuda = device.type == "cuda" or backend is not None
    return graphs.by_default(precision, shape_classes, world_size, on_cuda, settings.compile)
