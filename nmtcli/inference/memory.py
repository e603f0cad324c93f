"""How much GPU memory a beam search batch holds, and the default batch a GPU takes.

A batch of n sentences of at most L tokens decodes n * beam rows for up to a * L + b positions. Its
largest parts, all computed below from the shapes the search allocates (tests/test_gpu_paths.py
checks them against the real tensors, built on the `meta` device):

- self-attention keys/values: rows x positions x decoder_layers x 2 x d_model, twice (the decoder cache and
  the spare set that reordering and dropping decided sentences copy into: incremental.py);
- encoder-decoder keys/values: n x (L + 1) x decoder_layers x 2 x d_model (each decoder layer projects the source);
- the logits of a step: rows x vocabulary, as the projection gives them, and the float32 log-softmax of the
  few rows at a time that normalise them (outputs.log_normalizer); a captured step (CUDA graphs) holds its own
  in the graphs' pool;
- the check of the first graph (inference/graphs.py): two copies of the span a step reads;
- the search state: token histories and the n-best finished ones (int64), and their gathers.

Short sentences pack many to a batch of `batch_tokens` padded source tokens, and each of them still
holds beam x (L + 51) positions: a GPU batch is capped in sentences too.

With CUDA graphs a batch is searched in a shape class (shape_class: sizes rounded up by `ladder`) and its
tensors are views of buffers kept from batch to batch (graphs.Arena), each as large as the largest class
that came so far needs (arena_bytes names them); arena_reserve is the most a run with the default settings
can reach at a budget.
"""

from __future__ import annotations

from nmtcli.inference.outputs import NORMALIZER_CHUNK_BYTES
from nmtcli.model.config import ModelConfig

GB = 1e9

# GPU memory at least (GB) -> (batch_tokens, sentences): the default batch for that card. The caps keep the
# worst case (the shortest sentences, fp32) under 80% of the memory (tests/test_gpu_paths.py).
GPU_BATCHES = {70: (65536, 2048), 0: (16384, 512)}


def gpu_batch(memory_bytes: int) -> tuple[int, int]:
    """The default (batch_tokens, sentences) of a GPU with this much memory."""
    return next(batch for at_least, batch in GPU_BATCHES.items() if memory_bytes >= at_least * GB)


def positions(config: ModelConfig, longest: int, max_len_a: float = 1.0, max_len_b: int = 50) -> int:
    """Positions the decoder cache of a batch holds: its longest output plus EOS (outputs.max_output_lengths)."""
    return min(int(max_len_a * longest + max_len_b), config.max_positions - 2) + 1


def search_bytes(config: ModelConfig, sentences: int, longest: int, beam: int = 4, dtype_bytes: int = 4,
                 max_len_a: float = 1.0, max_len_b: int = 50, nbest: int = 1, graphs: bool = True,
                 bucket: int = 16) -> dict[str, int]:
    """The bytes a beam search of `sentences` sentences of at most `longest` tokens holds at its peak, by
    part (dtype_bytes: 4 for fp32, 2 for bf16/fp16)."""
    d, layers, vocab = config.d_model, config.decoder_layers, config.vocab_size  # the decoder's: it holds the keys/values
    rows = sentences * beam
    capacity = positions(config, longest, max_len_a, max_len_b)
    per_position = layers * 2 * d * dtype_bytes  # keys and values of every decoder layer, one row
    # The projection's output, and the float32 log-softmax of a chunk of its rows (from half precision with the
    # chunk's float32 copy) that outputs.log_normalizer holds at once.
    chunk = min(rows, max(1, NORMALIZER_CHUNK_BYTES["cuda"] // (4 * vocab)))
    logits = rows * vocab * dtype_bytes + chunk * vocab * 4 * (1 if dtype_bytes == 4 else 2)
    parts = {
        "keys/values": 2 * rows * capacity * per_position,
        "encoder keys/values": sentences * (longest + 1) * per_position,
        "logits": logits,
        # each beam's tokens and parents: int64
        "search state": 8 * capacity * sentences * 2 * beam,
    }
    if graphs:
        parts["graph pool"] = logits
        parts["graph check"] = 2 * rows * min(bucket, capacity) * per_position
    return parts


def worst_case(config: ModelConfig, batch_tokens: int, sentences: int, dtype_bytes: int, beam: int = 4,
               graphs: bool = True) -> tuple[int, int]:
    """(bytes, longest) of the largest batch the defaults make: over every sentence length L, as many
    sentences as fit batch_tokens padded tokens (L + 1 each, EOS included), at most `sentences`."""
    most = 0, 0
    for longest in range(1, config.max_positions - 1):
        n = min(sentences, batch_tokens // (longest + 1))
        if n:
            most = max(most, (sum(search_bytes(config, n, longest, beam, dtype_bytes, graphs=graphs).values()), longest))
    return most


# --- shape classes: the batches CUDA graphs are recorded for (inference/graphs.py) -----------------------


def ladder(x: int) -> int:
    """The class of a size x: 1 to 8 as they are, above that the next of 4, 5, 6 or 7 times a power of two
    (10, 12, 14, 16, 20, 24, ...): at most a quarter larger than x, and a handful of classes per doubling."""
    if x <= 8:
        return max(x, 1)
    step = 1 << ((x - 1).bit_length() - 3)
    return -(-x // step) * step


def shape_class(config: ModelConfig, sentences: int, width: int, steps: int, max_len_a: float = 1.0, max_len_b: int = 50,
                bucket: int = 16, cap: int | None = None) -> tuple[int, int, int]:
    """(sentences, source width, capacity) of the class a batch is searched in: n sentences of `width` padded
    source tokens (EOS included) that decode for at most `steps` positions. The capacity follows from the
    class's width (the longest output it allows), rounded up to whole fixed spans of `bucket` positions;
    `cap`: the batch's most sentences (a GPU's default batch)."""
    n = min(ladder(sentences), max(cap or sentences, sentences)) if cap else ladder(sentences)
    source = min(ladder(width), config.max_positions)
    longest = min(int(max_len_a * (source - 1) + max_len_b), config.max_positions - 2) + 1
    capacity = min(-(-max(longest, steps) // bucket) * bucket, config.max_positions)
    return n, source, capacity


def arena_bytes(config: ModelConfig, sentences: int, source: int, capacity: int, beam: int = 4, nbest: int = 1,
                prefix: int = 0, dtype_bytes: int = 4, slots: bool = False) -> dict[str, int]:
    """The bytes of each tensor of a search in one shape class, by the role the Arena keeps it under (the
    decoder's sets of keys/values, the encoder's keys/values, the search state: beam.BeamSearch). `slots`:
    the cache is read through slots (model/beam_attention.py): one set of keys/values and the slots."""
    rows, d = sentences * beam, config.d_model
    parts = {f"cache.{s}.{kv}.{i}": rows * capacity * d * dtype_bytes
             for s in ((0,) if slots else (0, 1)) for kv in ("keys", "values") for i in range(config.decoder_layers)}
    if slots:
        parts["cache.slots"] = 4 * rows * capacity
    parts |= {f"memory.{kv}.{i}": sentences * source * d * dtype_bytes for kv in ("keys", "values") for i in range(config.decoder_layers)}
    parts |= {"memory_mask": sentences * source * dtype_bytes, "position": 8, "min_len": 8, "banned": 16,
              "last": 8 * rows, "tokens": 8 * rows * capacity, "parents": 8 * rows * capacity, "scores": 4 * rows, "done": sentences,
              "max_len": 8 * sentences, "max_penalty": 4 * sentences, "expected_len": 4 * sentences, "finished_score": 4 * sentences * nbest,
              "finished_log_prob": 4 * sentences * nbest, "finished_beam": 8 * sentences * nbest,
              "finished_length": 8 * sentences * nbest}
    if prefix:
        parts |= {"prefix": 8 * sentences * prefix, "prefix_len": 8 * sentences}
    return parts


def arena_reserve(config: ModelConfig, batch_tokens: int, sentences: int | None, beam: int = 4, nbest: int = 1,
                  dtype_bytes: int = 4, max_len_a: float = 1.0, max_len_b: int = 50, bucket: int = 16,
                  prefix: int = 0, slots: bool = False) -> dict[str, int]:
    """The most bytes the Arena comes to hold for the batches of a budget with these settings: each role's
    largest over every class the budget's batches fall in (over every longest source L, as many sentences as
    fit batch_tokens). The Arena is never made this large in advance: it grows with the classes that come."""
    most: dict[str, int] = {}
    for longest in range(1, config.max_positions - 1):
        n = min(sentences or batch_tokens, batch_tokens // (longest + 1))
        if n:
            shape = shape_class(config, n, longest + 1, 0, max_len_a, max_len_b, bucket, sentences)
            for role, size in arena_bytes(config, *shape, beam, nbest, prefix, dtype_bytes, slots).items():
                most[role] = max(most.get(role, 0), size)
    return most
