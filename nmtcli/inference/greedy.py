"""Greedy search: at every step the single most probable token, until EOS or the length limit.

Beam search with a beam of 1 is not quite this: it also keeps a hypothesis that ends when EOS is
only the second-best token, and may prefer it. `nmt translate --beam 1` means greedy, token for
token what other toolkits' greedy decoders (Hugging Face `generate(num_beams=1)`, CTranslate2
`beam_size=1`) produce, so it has its own loop.
"""

from __future__ import annotations

import torch
from torch import Tensor

from nmtcli.inference.beam import Hypothesis
from nmtcli.model.transformer import Transformer


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, max_len_a: float = 1.0, max_len_b: int = 50) -> list[list[Hypothesis]]:
    """src: (B, S) ids ending in EOS, right-padded. Output tokens before EOS are at most a*|x| + b (sec. 6.1)."""
    cfg = model.config
    device = src.device
    n_sent = src.size(0)
    src_len = (src != cfg.pad_id).sum(1) - 1
    max_len = (max_len_a * src_len.double() + max_len_b).floor().long().clamp(min=0, max=cfg.max_positions - 2)
    memory, src_mask = model.encode(src)
    state = model.start_decoding(memory, src_mask, 1)
    last = torch.full((n_sent,), cfg.bos_id, dtype=torch.long, device=device)
    active = torch.arange(n_sent, device=device)
    tokens: list[list[int]] = [[] for _ in range(n_sent)]
    log_probs = [0.0] * n_sent
    step = 0
    while active.numel():
        logits = model.decode_step(last, state)
        lp = torch.log_softmax(logits.float(), dim=-1)
        lp[:, cfg.pad_id] = float("-inf")  # never generated, as in beam search
        lp[:, cfg.bos_id] = float("-inf")
        at_max = step >= max_len[active]
        best = lp.argmax(-1)
        best = torch.where(at_max, torch.full_like(best, cfg.eos_id), best)  # the limit forces EOS
        best_lp = lp.gather(1, best[:, None])[:, 0]
        ended = best == cfg.eos_id
        for i, (sent, token, value, end) in enumerate(zip(active.tolist(), best.tolist(), best_lp.tolist(), ended.tolist())):
            log_probs[sent] += value
            if not end:
                tokens[sent].append(token)
        keep = (~ended).nonzero()[:, 0]
        if keep.numel() < active.numel():
            state.select(keep, keep)  # one row per sentence: finished sentences leave both
        active, last = active[keep], best[keep]
        step += 1
    return [[Hypothesis(t, lp, lp)] for t, lp in zip(tokens, log_probs)]
