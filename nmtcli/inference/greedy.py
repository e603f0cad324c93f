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

from nmtcli.inference.beam import Hypothesis, default_sync_every, max_output_lengths, prefix_tensors
from nmtcli.model.incremental import decode_step, start_decoding
from nmtcli.model.transformer import Transformer


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, max_len_a: float = 1.0, max_len_b: int = 50,
                  sync_every: int | None = None, prefixes: Sequence[list[int]] | None = None) -> list[list[Hypothesis]]:
    """src: (B, S) ids ending in EOS, right-padded. Output tokens before EOS are at most a*|x| + b (sec. 6.1).
    `prefixes`: token ids each sentence's output must start with ([] for none; see beam.prefix_tensors)."""
    cfg = model.config
    device = src.device
    n = src.size(0)
    sync_every = sync_every or default_sync_every(device)
    max_len = max_output_lengths(model, src, max_len_a, max_len_b)
    prefix = prefix_len = None
    if prefixes is not None and any(prefixes):
        prefix, prefix_len, max_len = prefix_tensors(model, prefixes, src, max_len)
    steps = int(max_len.max()) + 1 if n else 0
    memory, src_mask = model.encode(src)
    state = start_decoding(model, memory, src_mask, 1, capacity=steps)
    banned = torch.tensor([cfg.pad_id, cfg.bos_id], device=device)
    sentence = torch.arange(n, device=device)
    last = torch.full((n,), cfg.bos_id, dtype=torch.long, device=device)
    tokens = torch.zeros((n, max(steps, 1)), dtype=torch.long, device=device)
    length = torch.zeros(n, dtype=torch.long, device=device)
    log_prob = torch.zeros(n, device=device)
    done = torch.zeros(n, dtype=torch.bool, device=device)
    results: list[list[Hypothesis]] = [[] for _ in range(n)]
    for step in range(steps):
        log_probs = torch.log_softmax(decode_step(model, last, state).float(), dim=-1)
        log_probs.index_fill_(1, banned, float("-inf"))  # never generated, as in beam search
        best = log_probs.argmax(-1)
        if prefix is not None:  # within its prefix a sentence takes the prefix's token (never EOS: limits >= prefixes)
            best = torch.where(step < prefix_len, prefix[:, min(step, prefix.size(1) - 1)], best)
        best = torch.where(step >= max_len, cfg.eos_id, best)  # the limit forces EOS
        best_lp = log_probs.gather(1, best[:, None])[:, 0]
        log_prob += torch.where(done, 0.0, best_lp)
        tokens[:, step] = best
        ended = (best == cfg.eos_id) & ~done
        length = torch.where(ended, step, length)
        done |= ended
        last = best
        if (step + 1) % sync_every and step + 1 < steps:
            continue
        finished = done.tolist()
        if not any(finished):
            continue
        which = [i for i, d in enumerate(finished) if d]
        for s, row, count, lp in zip(sentence[which].tolist(), tokens[which].tolist(), length[which].tolist(), log_prob[which].tolist()):
            results[s] = [Hypothesis(row[:count], lp, lp)]
        if len(which) == len(finished):
            break
        live = torch.tensor([i for i, d in enumerate(finished) if not d], device=device)
        state.keep(live)  # one row per sentence: finished sentences leave
        sentence, last, tokens, length, log_prob, done = (t.index_select(0, live) for t in (sentence, last, tokens, length, log_prob, done))
        max_len = max_len.index_select(0, live)
        if prefix is not None:
            prefix, prefix_len = prefix.index_select(0, live), prefix_len.index_select(0, live)
    return results
