"""Batched beam search (sec. 6.1: beam 4, length penalty alpha 0.6, max length input + 50, early stop).

The encoder runs once per batch; the decoder runs one position at a time with cached self-attention
keys/values and encoder-decoder keys/values computed once. Rows are (sentence, beam) pairs
flattened into one batch dimension; a sentence leaves the batch as soon as it is decided.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmtcli.model.transformer import Transformer

LENGTH_PENALTIES = ("gnmt", "power")


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # log-probability divided by the length penalty: what the search ranks by
    log_prob: float


def length_penalty(length: int | Tensor, alpha: float, kind: str = "gnmt"):
    """GNMT (Wu et al. 2016, used by the paper): ((5 + |Y|) / 6)^alpha; "power" (fairseq, CTranslate2): |Y|^alpha.

    |Y| counts the generated tokens including the final EOS.
    """
    if kind == "gnmt":
        return ((5 + length) / 6) ** alpha
    if kind == "power":
        return length**alpha
    raise ValueError(f"length penalty must be one of {LENGTH_PENALTIES}, not {kind!r}")


@torch.inference_mode()
def beam_search(
    model: Transformer,
    src: Tensor,
    beam: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    nbest: int = 1,
    penalty: str = "gnmt",
    min_len: int = 0,
) -> list[list[Hypothesis]]:
    """src: (B, S) ids ending in EOS, right-padded. Returns the `nbest` best hypotheses of each sentence.

    A sentence is decided when `nbest` hypotheses have ended and no live one can still beat them:
    log-probabilities only fall as a hypothesis grows, so a live hypothesis's best possible final
    score is its current log-probability divided by the largest penalty it could reach.
    """
    if beam < 1 or nbest < 1 or nbest > beam:
        raise ValueError(f"need 1 <= nbest ({nbest}) <= beam ({beam})")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, not {alpha}")
    cfg = model.config
    device = src.device
    n_sent, K, V = src.size(0), beam, cfg.vocab_size
    src_len = (src != cfg.pad_id).sum(1) - 1  # without EOS
    # Output tokens before EOS are at most a*|x| + b, and must fit the position table.
    max_len = (max_len_a * src_len.double() + max_len_b).floor().long().clamp(min=0, max=cfg.max_positions - 2)
    max_penalty = length_penalty(max_len.double() + 1, alpha, penalty)  # per sentence, EOS included

    memory, src_mask = model.encode(src)
    state = model.start_decoding(memory, src_mask, K)
    tokens = torch.full((n_sent * K, 1), cfg.bos_id, dtype=torch.long, device=device)
    scores = torch.full((n_sent, K), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all beams start identical: keep one alive so the first step has no duplicates
    active = torch.arange(n_sent, device=device)  # original sentence index of each live sentence
    finished: list[list[Hypothesis]] = [[] for _ in range(n_sent)]
    # The nbest-th best finished score of each sentence: a live hypothesis must beat it to matter.
    kth_finished = torch.full((n_sent,), float("-inf"), device=device)

    step = 0
    while active.numel():
        n = active.numel()
        log_probs = torch.log_softmax(model.decode_step(tokens[:, -1], state).float(), dim=-1)  # (n * K, V)
        log_probs[:, cfg.pad_id] = float("-inf")
        log_probs[:, cfg.bos_id] = float("-inf")
        if step < min_len:
            log_probs[:, cfg.eos_id] = float("-inf")
        at_max = step >= max_len[active]  # these sentences may only end now
        if at_max.any():
            rows_at_max = at_max.repeat_interleave(K)
            eos = log_probs[rows_at_max, cfg.eos_id]
            log_probs[rows_at_max] = float("-inf")
            log_probs[rows_at_max, cfg.eos_id] = eos
        candidates = log_probs.view(n, K, V).add_(scores.unsqueeze(-1)).view(n, K * V)
        top_scores, top_index = candidates.topk(2 * K, dim=1)  # each beam ends at most once: K live remain
        top_beam, top_token = top_index // V, top_index % V
        is_eos = (top_token == cfg.eos_id) & top_scores.isfinite()

        # Every ended candidate becomes a finished hypothesis.
        if is_eos.any():
            which = is_eos.nonzero()[:, 0]
            rows = which * K + top_beam[is_eos]
            penalty_now = length_penalty(step + 1, alpha, penalty)
            for i, prefix, log_prob in zip(which.tolist(), tokens[rows, 1:].tolist(), top_scores[is_eos].tolist()):
                sentence = int(active[i])
                finished[sentence].append(Hypothesis(prefix, log_prob / penalty_now, log_prob))
                if len(finished[sentence]) >= nbest:
                    kth = sorted((h.score for h in finished[sentence]), reverse=True)[nbest - 1]
                    kth_finished[sentence] = kth

        # The K best candidates that did not end continue.
        keep = torch.argsort(is_eos.to(torch.int8), dim=1, stable=True)[:, :K]
        next_beam = top_beam.gather(1, keep)
        next_token = top_token.gather(1, keep)
        next_scores = top_scores.gather(1, keep)

        best_live = next_scores.max(1).values / max_penalty[active]
        still = ~(at_max | (kth_finished[active] >= best_live))
        rows = (torch.arange(n, device=device).unsqueeze(1) * K + next_beam)[still].view(-1)
        tokens = torch.cat([tokens[rows], next_token[still].view(-1, 1)], dim=1)
        scores = next_scores[still]
        state.select(rows, None if bool(still.all()) else still.nonzero()[:, 0])
        active = active[still]
        step += 1

    return [sorted(hyps, key=lambda h: h.score, reverse=True)[:nbest] for hyps in finished]
