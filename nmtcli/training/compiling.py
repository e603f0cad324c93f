"""`nmt train --compile`: torch.compile for training, with few distinct shapes to compile for.

With shape classes (data/batching.py; the GPU default) every batch has one of ~15 shapes, so the whole
forward (embeddings through the decoder's last layer, the hidden states the loss reads) is compiled as one
graph per class, static shapes, no graph breaks (`compile_model`): the compiler sees across layers and
specializes every size. Each class the data has is compiled before the first step (`warm_up`), so no step
of an epoch compiles (tests/test_training.py holds it under `fail_on_recompile`); inductor's cache lives in the
run dir (`cache_in`), so a resumed run compiles from the cache.

Without shape classes, batches come in every length, and torch.compile builds a graph per input shape when
shapes are static (dynamic=False). Two things keep the graphs few:
- the rows and the lengths of a layer's inputs are marked dynamic (`_varying`): one graph per kind of
  layer serves every batch (tests/test_training.py counts them over WMT-like batches: two);
- sequence lengths are still padded up to a short ladder of sizes (`bucket_length`), so that no length
  is 1 (which a compiler specializes) and the kernels meet few distinct sizes. Extra padding changes
  no real position: source padding is masked, target padding comes after the real tokens under the
  causal mask, and the loss skips it.
Only the encoder and decoder layers are compiled ("regional" compilation): all layers of a kind
share one compiled graph, so a new shape costs the compile time of one layer, not of twelve. The
embeddings and the loss (training/loss.py, already a few large matrix products) stay eager.
Compiled layers run in training mode only: validation and beam search, with their own shapes, run
the same layers eagerly.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from nmtcli.data.batching import CLASS_LENGTHS, class_length
from nmtcli.errors import NmtError
from nmtcli.model.transformer import Transformer

# Padded sequence lengths: the shape classes' lengths (data/batching.py), so that batches in classes add no
# graphs: multiples of 8 (tensor cores) up to 64, then steps of about 1/4; up to 256 tokens (longer than any
# sentence `nmt prepare` keeps) 15 sizes, beyond them multiples of 64.
LENGTH_BUCKETS = CLASS_LENGTHS
bucket_length = class_length  # the smallest bucket that holds a length

# Where torch.compile sends the graphs; the tests swap in a counting backend.
BACKEND = "inductor"


def check_compile_works(device: torch.device) -> None:
    """Compile and run a one-line function on `device`: a PyTorch, Python or machine that cannot
    compile (no C++ compiler for CPU code, no Triton for GPU code) fails here in a second, with one line."""
    try:
        doubled = torch.compile(lambda x: x * 2 + 1, dynamic=False, backend=BACKEND)(torch.ones(8, device=device))
        ok = bool((doubled == 3).all())
    except Exception as e:  # noqa: BLE001 - whatever stops torch.compile, the user's remedy is the same
        first = next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)
        raise NmtError(f"--compile does not work with this PyTorch {torch.__version__} on {device.type}: {first}",
                       "train without --compile (eager is the default); compiling needs a C++ compiler for CPU "
                       "code and Triton for GPU code") from None
    if not ok:
        raise NmtError(f"--compile computed a wrong result on {device.type} with PyTorch {torch.__version__}",
                       "train without --compile")


def compile_model(model: nn.Module):
    """The model's whole forward compiled, one graph per input shape (dynamic=False): for batches in shape
    classes, one graph a class. Call it as the model (`compiled(src, tgt_in, hidden=True)`); the model itself
    stays eager (validation and beam search call it with shapes of their own)."""
    limit = 2 * len(LENGTH_BUCKETS) + 8  # every class, with room for an odd batch of one row
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), limit))
    return torch.compile(model, dynamic=False, backend=BACKEND)


def warm_up(step, classes: list, pad_id: int, bos_id: int, eos_id: int) -> None:
    """Compile the forward and backward of every shape class before training: `step(src, tgt_in, tgt_out)` runs
    one batch's forward and backward; each class gets one batch of padding rows (a source of EOS alone, a target of
    padding the loss skips), so the weights' gradients it leaves are zero and are dropped by the caller."""
    for shape in classes:
        src = torch.full((shape.rows, shape.src_len), pad_id, dtype=torch.long)
        tgt_in = torch.full((shape.rows, shape.tgt_len), pad_id, dtype=torch.long)
        src[:, 0], tgt_in[:, 0] = eos_id, bos_id
        step(src, tgt_in, torch.full_like(tgt_in, pad_id))


def cache_in(run_dir) -> None:
    """Inductor's compiled kernels under the run dir, so that resuming a run finds what its first start compiled,
    unless the user chose a dir (TORCHINDUCTOR_CACHE_DIR set to another than inductor's default, which inductor
    itself writes there once it has compiled anything)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if chosen is None or os.path.abspath(chosen) == os.path.abspath(default_cache_dir()):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(run_dir / "compile-cache")


def compile_layers(model: Transformer, dynamic: bool = True) -> None:
    """Compile each encoder and decoder layer in place (state_dict keys do not change). `dynamic=False`: a graph
    for each shape that comes (for batches in shape classes; the benchmarks' one shape)."""
    limit = 8 * len(LENGTH_BUCKETS)  # room for recompiles (a batch of one row), far more than the two graphs
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), limit))
    compiled: dict[type, object] = {}
    for layer in (*model.encoder.layers, *model.decoder.layers):
        kind = type(layer)
        if kind not in compiled:  # one compiled function per kind: the layers are its argument
            compiled[kind] = torch.compile(kind.forward, dynamic=False, backend=BACKEND)
        layer.forward = _training_forward(layer, compiled[kind], dynamic)


def _training_forward(layer: nn.Module, compiled, dynamic: bool = True):
    eager = layer.forward

    def forward(*args):
        if not layer.training:
            return eager(*args)
        for t in args if dynamic else ():
            for dim in _varying(t):
                torch._dynamo.maybe_mark_dynamic(t, dim)
        return compiled(layer, *args)

    return forward


def _varying(t: torch.Tensor) -> tuple[int, ...]:
    """The dimensions of a layer's input that differ between batches, compiled as symbols: the rows and the
    length of (B, L, d) activations and of a (B, 1, 1, S) source mask."""
    return {3: (0, 1), 4: (0, 3)}[t.dim()]
