"""How much GPU memory a beam search batch holds, and the default batch a GPU takes.

A batch of n sentences of at most L tokens decodes n * beam rows for up to a * L + b positions. Its
largest parts, all computed below from the shapes the search allocates (tests/test_gpu_paths.py
checks them against the real tensors, built on the `meta` device):

- self-attention keys/values: rows x positions x layers x 2 x d_model, twice (the decoder cache and
  the spare set that reordering and dropping decided sentences copy into: incremental.py);
- encoder-decoder keys/values: n x (L + 1) x layers x 2 x d_model;
- the logits of a step: rows x vocabulary, as the projection gives them, in float32 and as
  log-probabilities; a captured step (CUDA graphs) holds its own in the graphs' pool;
- the check of the first graph (inference/graphs.py): two copies of the span a step reads;
- the search state: token histories and the n-best finished ones (int64), and their gathers.

Short sentences pack many to a batch of `batch_tokens` padded source tokens, and each of them still
holds beam x (L + 51) positions: a GPU batch is capped in sentences too.
"""

from __future__ import annotations

from nmtcli.model.config import ModelConfig

GB = 1e9

# GPU memory at least (GB) -> (batch_tokens, sentences): the default batch for that card. The caps keep the
# worst case (the shortest sentences, fp32) under 80% of the memory (tests/test_gpu_paths.py).
GPU_BATCHES = {70: (65536, 2048), 0: (16384, 512)}


def gpu_batch(memory_bytes: int) -> tuple[int, int]:
    """The default (batch_tokens, sentences) of a GPU with this much memory."""
    return next(batch for at_least, batch in GPU_BATCHES.items() if memory_bytes >= at_least * GB)


def positions(config: ModelConfig, longest: int, max_len_a: float = 1.0, max_len_b: int = 50) -> int:
    """Positions the decoder cache of a batch holds: its longest output plus EOS (beam.max_output_lengths)."""
    return min(int(max_len_a * longest + max_len_b), config.max_positions - 2) + 1


def search_bytes(config: ModelConfig, sentences: int, longest: int, beam: int = 4, dtype_bytes: int = 4,
                 max_len_a: float = 1.0, max_len_b: int = 50, nbest: int = 1, graphs: bool = True,
                 bucket: int = 16) -> dict[str, int]:
    """The bytes a beam search of `sentences` sentences of at most `longest` tokens holds at its peak, by
    part (dtype_bytes: 4 for fp32, 2 for bf16/fp16)."""
    d, layers, vocab = config.d_model, config.layers, config.vocab_size
    rows = sentences * beam
    capacity = positions(config, longest, max_len_a, max_len_b)
    per_position = layers * 2 * d * dtype_bytes  # keys and values of every layer, one row
    logits = rows * vocab * (dtype_bytes + 4 + 4)  # the projection's output, in float32, log-probabilities
    parts = {
        "keys/values": 2 * rows * capacity * per_position,
        "encoder keys/values": sentences * (longest + 1) * per_position,
        "logits": logits,
        # history, its gather, finished tokens (nbest + 2 beam candidates while merging): int64
        "search state": 8 * capacity * sentences * (2 * beam + 2 * nbest + 2 * beam),
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
