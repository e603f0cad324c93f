"""`nmt train --compile`: torch.compile for training, with few distinct shapes to compile for.

torch.compile builds a graph per input shape when shapes are static (dynamic=False), and batches of
sentences come in every length. Two things keep the graphs few:
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

import torch
from torch import nn

from nmtcli.data.batching import CLASS_LENGTHS, class_length
from nmtcli.errors import NmtError
from nmtcli.model.packed_attention import KeyPadding
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
        for arg in args if dynamic else ():
            for t in arg if isinstance(arg, KeyPadding) else (arg,):
                for dim in _varying(t):
                    torch._dynamo.maybe_mark_dynamic(t, dim)
        return compiled(layer, *args)

    return forward


def _varying(t: torch.Tensor) -> tuple[int, ...]:
    """The dimensions of a layer's input that differ between batches, compiled as symbols: the rows and the
    length of (B, L, d) activations and of a (B, 1, 1, S) source mask; the one dimension of KeyPadding's
    index tensors."""
    return {3: (0, 1), 4: (0, 3)}.get(t.dim(), (0,))
