"""The training step replayed from CUDA graphs (`nmt train --cuda-graphs`): one graph per shape class for a
batch's forward, loss and backward, and one graph for the optimizer's update that every class shares.

Why: a base step (25k tokens, bf16 masters) launches thousands of small kernels from Python, and on an H200 the
GPU waits for some of those launches (~43 ms a step). A graph is recorded once and then launched whole.

What a graph needs, and how the step gives it:
- The same shapes at every replay. Batches in shape classes (data/batching.py) come in ~15 shapes, a graph per
  shape. The loss keeps every target row and weights padding 0 (`output_loss(every_row=True)`): which rows the
  eager loss drops depends on the batch's values. That costs the output projection of the padding (about a fifth
  of a class's target positions); on an H200 the graphs still pay (by_default).
- The same addresses. Each class has its own input tensors, and every batch of the class is copied into them
  (`copy_`, on the device). The gradients are made once and only ever added into and zeroed in place
  (`zero_grad(set_to_none=False)`). What changes from step to step but is not a batch is a device tensor filled
  before the replays: the step's scale (ranks / target tokens of the step) and the learning rate (fused Adam reads
  it on the device; `capturable` is set while its step is captured). The loss and NLL are added into `sums`.
- Nothing read back by the host inside a graph (a capture fails on it; tests/test_gpu_paths.py checks the
  captured region op by op).
- Its libraries ready before a capture: the first batch of a class runs eagerly on the capture's side stream
  (its warm-up: cuBLAS and cuDNN plans, the fused loss's compile, and at the first update Adam's state), the
  second is captured, every later one replayed. A warm-up is that batch's real work, nothing is run twice.
- One memory pool (`GraphPool`, through translation's `CudaGraphs`: a pool handle whose graphs all died is never
  captured into again). No tensor made in the pool outlives its graph's replay: inputs, gradients, the scale, the
  learning rate and `sums` are made outside it, so graphs replayed in any order cannot overwrite each other's
  results; the pool holds about one batch's activations, the largest class's.

Gradient accumulation (--update-freq N): N batch replays, then one update replay. With bf16 masters each batch's
graph adds its bf16 gradients into the masters' fp32 gradients and zeroes them, as the eager step sums them in
fp32 (MasterWeights); the update graph steps Adam, copies the masters into the bf16 weights and zeroes the
masters' gradients. Without masters the batches' backward passes accumulate into the gradients directly.

Dropout: a graph draws its masks from the default CUDA generator through device memory that every replay sets
from the generator's seed and offset on the host, and each replay advances that offset by what the capture drew
(PyTorch's graph-safe philox state). So every replay gets fresh masks, and `torch.manual_seed(seed)` right before
a replay makes them the masks an eager batch draws after the same seeding. The trainer's per-batch seeding
(`Trainer._dropout_seed`: a pure function of seed, step and batch) is therefore kept as it is: the caller passes
each batch's seed and the step seeds the generator before that batch's replay (a host call, no device work).

Failures: any error while capturing (an operation that cannot be captured, out of memory) turns graphs off for
the rest of the run with one warning; a capture runs nothing on the device, so that part of the step runs eagerly
and the step ends as it would have. A warm-up is the eager step's own work and fails as it would. A replay that
fails raises: CUDA errors in a graph are not recoverable in the process.

Not here: several ranks (DDP's all-reduce runs from autograd hooks and its buckets are rebuilt after the first
step; graphs stay off), fp16 (its loss scaler decides on the host whether a step counts).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from nmtcli import faults
from nmtcli.data.batching import Batch
from nmtcli.inference.graphs import CudaGraphs
from nmtcli.training.precision import MasterWeights

# (src, tgt_in, tgt_out) -> (loss, nll) of one batch, summed over its targets, every row kept (`every_row`).
Losses = Callable[[Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]

UPDATE = "update"  # the key of the optimizer's graph; a batch's key is its shapes


def refusal(precision: str, shape_classes: bool, world_size: int, on_cuda: bool) -> str | None:
    """Why the training step cannot run as CUDA graphs here (None: it can). `precision`: its label (bf16-master, ...)."""
    if not on_cuda:
        return "they need a CUDA GPU"
    if world_size > 1:
        return "they are not used with several ranks (DDP's gradient all-reduce is not captured)"
    if not shape_classes:
        return "batches are not in shape classes (--shape-classes): every batch shape would be a graph of its own"
    if precision == "fp16":
        return "fp16's loss scaler decides on the host whether a step counts"
    return None


def by_default(precision: str, shape_classes: bool, world_size: int, on_cuda: bool, compiled: bool) -> bool:
    """Whether a run that does not say (--cuda-graphs or --no-cuda-graphs) replays its steps from graphs: where they
    were measured to pay. On one H200 (torch 2.11, 2026-11-26, benchmarks/gpu_check.py) with bf16-master and shape
    classes: `nmt train --preset base` 554k target tokens/s after its first minute against 441k eager (+26%; the loss
    at every 200 steps within 0.05 of eager's), train_throughput base 600k vs 458k (+31%), big 290k either way.
    Not measured with --compile, bf16 autocast or fp32: off there unless asked for."""
    return refusal(precision, shape_classes, world_size, on_cuda) is None and precision == "bf16-master" and not compiled


class TrainingGraphs:
    """A training step replayed from CUDA graphs: `step(batches, scale, lr, seeds)` does what `Trainer.train_step`
    does eagerly (forward, loss, backward of each batch, then Adam) and returns (loss sum, NLL sum) on the device.

    `losses` runs a batch's forward pass and loss; `model` is the model that trains (the bf16 copy with
    `masters`), `optimizer` the fused Adam over the fp32 parameters. `backend`: CUDA's (`CudaGraphs`) unless
    given (the tests give a CPU stand-in). `warn(message)` is told once if graphs turn themselves off.
    """

    def __init__(self, losses: Losses, model: nn.Module, optimizer: torch.optim.Optimizer, masters: MasterWeights | None = None,
                 backend=None, warn: Callable[[str], None] | None = None):
        self.losses = losses
        self.optimizer = optimizer
        self.masters = masters
        # "thread_local": the loader's thread pins the next batches (cudaHostAlloc) while a step is captured.
        self.backend = backend if backend is not None else CudaGraphs(capture_error_mode="thread_local")
        self.warn = warn or (lambda message: None)
        device = next(model.parameters()).device
        self.scale = torch.zeros((), device=device)  # ranks / target tokens of the step: the loss's factor
        self.lr = torch.zeros((), device=device)  # float32, as fused Adam reads a learning rate tensor
        self.sums = torch.zeros(2, device=device)  # (loss, NLL) summed over the step's batches
        self.grads = _static_gradients(model)
        self.master_grads = [m.grad for m in masters.masters] if masters is not None else []
        self.enabled = True
        self.off_reason: str | None = None  # the warning, once graphs turned themselves off
        self.captured = self.replayed = self.warmed_up = 0
        self._inputs: dict[tuple, Batch] = {}  # a shape class's input tensors, which its graph reads
        self._graphs: dict[object, object] = {}  # class shapes or UPDATE -> graph
        self._warm: set[object] = set()

    def summary(self) -> dict:
        """Whether graphs are on, what was captured, warmed up and replayed, and why they turned off (None: they did not)."""
        return {"enabled": self.enabled, "captured": self.captured, "warmed_up": self.warmed_up, "replayed": self.replayed,
                "off_reason": self.off_reason}

    def step(self, batches: Sequence[Batch], scale: float, lr: float, dropout_seeds: Sequence[int]) -> Tensor:
        """One optimizer step over `batches` (the loss of each times `scale`), Adam at `lr`; each batch's dropout
        drawn after `torch.manual_seed` of its seed. Returns a new (loss sum, NLL sum) tensor on the device."""
        self.scale.fill_(scale)
        self.lr.fill_(lr)
        self.sums.zero_()
        for batch, seed in zip(batches, dropout_seeds, strict=True):
            torch.manual_seed(seed)  # a replay reads the generator's seed and offset as they are now
            self._batch(batch)
        self._run(UPDATE, self._update)
        return self.sums.clone()

    def _batch(self, batch: Batch) -> None:
        key = (tuple(batch.src.shape), tuple(batch.tgt_in.shape))
        inputs = self._inputs.get(key)
        if inputs is None:
            inputs = self._inputs[key] = Batch(torch.empty_like(batch.src), torch.empty_like(batch.tgt_in),
                                               torch.empty_like(batch.tgt_out), 0)
        for mine, given in ((inputs.src, batch.src), (inputs.tgt_in, batch.tgt_in), (inputs.tgt_out, batch.tgt_out)):
            mine.copy_(given)
        self._run(key, lambda: self._forward_backward(inputs))

    def _forward_backward(self, batch: Batch) -> None:
        """A batch's forward pass and loss, its backward into the gradients; with masters the gradients added into
        the masters' fp32 ones and zeroed (the eager step copies the first batch's and adds the rest: the same sums)."""
        loss, nll = self.losses(batch.src, batch.tgt_in, batch.tgt_out)
        (loss * self.scale).backward()
        if self.masters is not None:
            torch._foreach_add_(self.master_grads, self.grads)
            torch._foreach_zero_(self.grads)
        self.sums += torch.stack([loss.detach(), nll])

    def _update(self) -> None:
        """Adam (fused: one kernel) at the learning rate on the device, the masters into the bf16 weights, the
        gradients zeroed in place for the next step's batches."""
        groups = self.optimizer.param_groups
        floats = [group["lr"] for group in groups]
        for group in groups:
            group["lr"] = self.lr
        try:
            self.optimizer.step()
        finally:  # the optimizer's state dict (checkpoints) keeps the schedule's number
            for group, lr in zip(groups, floats):
                group["lr"] = lr
        if self.masters is not None:
            self.masters.masters_to_working()
        self.optimizer.zero_grad(set_to_none=False)

    def _run(self, key: object, part: Callable[[], None]) -> None:
        """One part of the step (a batch, or the update): run eagerly on the capture's stream the first time (its
        warm-up), captured and replayed the second, replayed from then on; eagerly once graphs are off."""
        if not self.enabled:
            part()
            return
        graph = self._graphs.get(key)
        if graph is None and key not in self._warm:
            self.backend.warm_up(part)
            self._warm.add(key)
            self.warmed_up += 1
            return
        if graph is None:
            graph = self._record(key, part)
            if graph is None:  # graphs are off now; the capture ran nothing on the device: run the part
                part()
                return
        self.backend.replay(graph)
        self.replayed += 1

    def _record(self, key: object, part: Callable[[], None]):
        """`part` captured into the graphs' pool; None if that failed (graphs are then off, with a warning)."""
        try:
            with _capturable(self.optimizer):
                graph = self.backend.record(part)
            faults.point("cuda-graph", phase="capture")  # after the host side ran: the hardest place to fail
        except Exception as e:  # noqa: BLE001 - whatever it was, the eager step does the same work
            message = str(e).strip().splitlines()[0] if str(e).strip() else ""
            self._give_up(f"CUDA graphs are off ({type(e).__name__}: {message}); training goes on without them")
            return None
        self._graphs[key] = graph
        self.captured += 1
        return graph

    def _give_up(self, message: str) -> None:
        """Graphs off for the rest of the run: let go of every graph and of their pool's handle (GraphPool)."""
        self.enabled = False
        self.off_reason = message
        self._graphs.clear()
        self.backend.release()
        self.warn(message)


class Unrecorded:
    """A capture backend that records nothing: a capture keeps the part's Python, a replay runs it again. The
    graphs' own functions run eagerly: what a real replay must equal bit for bit (benchmarks/train_graphs_check.py
    on a GPU, the tests on a CPU)."""

    def warm_up(self, part):
        part()

    def record(self, part):
        return part

    def replay(self, graph, owner=None):
        graph()

    def release(self):
        pass


def _static_gradients(model: nn.Module) -> list[Tensor]:
    """Every trained parameter's gradient, made now (zeros): from here on only added into and zeroed in place, so
    that it keeps the address the graphs write to (a gradient set to None would be made again elsewhere)."""
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    return [p.grad for p in params]


@contextlib.contextmanager
def _capturable(optimizer: torch.optim.Optimizer):
    """Mark the optimizer's groups capturable while a step may be captured: PyTorch refuses to capture an optimizer
    step otherwise, and warns when one marked so runs eagerly. Fused Adam's kernel is the same either way."""
    groups = optimizer.param_groups
    before = [group.get("capturable", False) for group in groups]
    for group in groups:
        group["capturable"] = True
    try:
        yield
    finally:
        for group, value in zip(groups, before):
            group["capturable"] = value
