"""Greedy search: at every step the single most probable token, until EOS or the length limit.

Beam search with a beam of 1 is not quite this: it also keeps a hypothesis that ends when EOS is
only the second-best token, and may prefer it. `nmt translate --beam 1` means greedy, token for
token what other toolkits' greedy decoders (Hugging Face `generate(num_beams=1)`, CTranslate2
`beam_size=1`) produce, so it has its own loop. Like beam search it keeps its state on the device and
looks at it from the host only every `sync_every` steps. A target prefix is forced token by token as in
beam search (inference/beam.py), at the model's log-probabilities of its tokens.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from nmtcli.inference.outputs import default_sync_every, max_output_lengths
from nmtcli.inference.prefixes import prefix_tensors
from nmtcli.inference.outputs import Hypothesis, TokenRows, ban, log_normalizer, log_probs_of, never_produced
from nmtcli.inference.shortlist import Shortlist, for_batch
from nmtcli.model.incremental import decode_step, start_decoding
from nmtcli.model.transformer import Transformer


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, max_len_a: float = 1.0, max_len_b: int = 50,
                  sync_every: int | None = None, prefixes: Sequence[list[int]] | None = None,
                  shortlist: Shortlist | None = None) -> list[list[Hypothesis]]:
    """src: (B, S) ids ending in EOS, right-padded. Output tokens before EOS are at most a*|x| + b (sec. 6.1).
    `prefixes`: token ids each sentence's output must start with ([] for none; see prefixes.prefix_tensors).
    `shortlist`: each step scores only the target pieces the batch's sources can translate to (inference/shortlist.py)."""
    device = src.device
    n = src.size(0)
    sync_every = sync_every or default_sync_every(device)
    max_len = max_output_lengths(model, src, max_len_a, max_len_b)
    carried = {}
    if prefixes is not None and any(prefixes):
        prefix, prefix_len, max_len = prefix_tensors(model, prefixes, src, max_len)
        carried = {"prefix": prefix, "prefix_len": prefix_len}
    steps = int(max_len.max()) + 1 if n else 0
    banned = never_produced(model, device)
    output = for_batch(model, shortlist, src, prefixes)
    if output is not None:  # the logits' columns are the shortlist's ids; each sentence's own are 0 in its mask
        banned = output.columns_among(banned)
    memory, src_mask = model.encode(src)
    state = start_decoding(model, memory, src_mask, 1, capacity=steps)
    rows = TokenRows(model, state, max_len, steps, carried={**carried, **({"allowed": output.mask} if output is not None else {})})
    results: list[list[Hypothesis]] = [[] for _ in range(n)]
    for step in range(steps):
        logits = decode_step(model, rows.last, state, None if output is None else output.project)  # (rows, V or S)
        if output is not None:
            logits = logits + rows.carried["allowed"]
        normalizer = log_normalizer(logits)
        best = ban(logits, banned).argmax(-1)  # the most probable token has the largest logit
        if output is not None:
            best = output.ids[best]
        if carried:  # within its prefix a sentence takes the prefix's token (never EOS: limits >= prefixes)
            prefix, prefix_len = rows.carried["prefix"], rows.carried["prefix_len"]
            best = torch.where(step < prefix_len, prefix[:, min(step, prefix.size(1) - 1)], best)
        token = rows.limited(step, best)
        column = token if output is None else output.column(token)  # EOS and a prefix's ids are in the shortlist
        log_prob = log_probs_of(logits.gather(1, column[:, None]), normalizer)[:, 0]  # a banned prefix token: -inf
        if carried and step == 0 and model.config.language_tags:  # the target language's tag is certain (beam.candidates)
            log_prob = log_prob.masked_fill(rows.carried["prefix_len"] > 0, 0.0)
        rows.add(step, token, log_prob)
        if (step + 1) % sync_every and step + 1 < steps:
            continue
        if rows.collect(results):
            break
    return results
