"""Lexically constrained beam search: every translation holds the target terms a glossary asks for.

A constraint is a target term, given as one or more alternatives (token id sequences; any one satisfies it:
`Haus|Hauses`). The search is dynamic beam allocation (Post & Vilar 2018) in its vectorised form (Hu et al.
2019): at every step each hypothesis may add its best tokens as usual *and* the next token of every term it
has not produced yet (the term's first token, or the next one of a term it is in the middle of), and the
candidates are ranked in banks by how many tokens of the terms they hold. The K that go on are taken in turn
from the banks, best bank first (a candidate's rank within its bank, then its bank), so the beam always holds
the best hypotheses that are furthest along the terms next to the best unconstrained ones.

A hypothesis may end (EOS) only once it holds every term. Since the furthest bank can always add a term's next
token, a hypothesis that holds every term exists after as many steps as the terms have tokens; only where the
length limit comes first does a hypothesis end without them (the caller reports it, and the line is still
translated). Scores are the model's own log-probabilities of the tokens chosen, as in the plain search: the
constraint decides which hypotheses are kept, never what they are worth.

Matching is on token ids, a suffix at a time: a term's progress goes one token on where the token continues it,
back to one where the token starts it again, else to zero (a term that overlaps itself, like `a a b` in
`a a a b`, is then found one token later, never wrongly). Tensor operations only, as the plain step; the
searches run without CUDA graphs (inference/translator.py batches the lines with terms apart from the others,
which therefore come out byte for byte as without a glossary).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from nmtcli.inference.beam import NO_BREVITY, BeamSearch, Brevity, default_leave_fraction, default_sync_every, lp
from nmtcli.inference.outputs import log_normalizer, log_probs_of
from nmtcli.model.incremental import decode_step
from nmtcli.model.transformer import Transformer

# One sentence's constraints: each a list of alternatives, each a list of target token ids.
Constraints = Sequence[Sequence[Sequence[int]]]


@torch.inference_mode()
def constrained_beam_search(model: Transformer, src: Tensor, constraints: Sequence[Constraints], beam: int = 4,
                            alpha: float = 0.6, max_len_a: float = 1.0, max_len_b: int = 50, nbest: int = 1,
                            length_penalty: str = "gnmt", min_len: int = 0, sync_every: int | None = None,
                            prefixes: Sequence[list[int]] | None = None, brevity: Brevity = NO_BREVITY) -> list[list]:
    """beam_search (inference/beam.py) whose every sentence's hypotheses hold its `constraints` before they end.
    Returns each sentence's `nbest` hypotheses, those holding every term first."""
    if beam < 1 or nbest < 1 or nbest > beam:
        raise ValueError(f"need 1 <= nbest ({nbest}) <= beam ({beam})")
    if len(constraints) != src.size(0):
        raise ValueError(f"{len(constraints)} constraint lists for {src.size(0)} sentences")
    lp(1, alpha, length_penalty)
    search = ConstrainedSearch(model, src, beam, alpha, max_len_a, max_len_b, nbest, length_penalty, min_len, prefixes, constraints, brevity)
    return search.run(sync_every or default_sync_every(src.device), None, default_leave_fraction(src.device))


class ConstrainedSearch(BeamSearch):
    """BeamSearch's state (n sentences, K beams) and, for the terms (A alternatives of C constraints a sentence):

    phrases (n, A, L)          each alternative's tokens (-1 after its end), term_length (n, A) its length (0: none)
    owner (n, A)               the constraint an alternative satisfies; weight (n, C) the tokens a constraint counts for
                               in the banks (its longest alternative; 0 for none, which is met from the start)
    met (n, K, C)              the constraints each hypothesis holds
    progress (n, K, A)         the tokens of each alternative the hypothesis ends with (the term it is in the middle of)
    finished_met (n, nbest)    whether a finished hypothesis holds every term (those that do rank first)
    """

    def __init__(self, model: Transformer, src: Tensor, beam: int, alpha: float, max_len_a: float, max_len_b: int,
                 nbest: int, length_penalty: str, min_len: int, prefixes: Sequence[list[int]] | None, constraints: Sequence[Constraints],
                 brevity: Brevity = NO_BREVITY):
        super().__init__(model, src, beam, alpha, max_len_a, max_len_b, nbest, length_penalty, min_len, prefixes, brevity=brevity)
        n, K, device = src.size(0), beam, src.device
        alternatives = [[(c, list(alt)) for c, alts in enumerate(cs) for alt in alts] for cs in constraints]
        A = max(1, max(map(len, alternatives), default=0))
        L = max(1, max((len(alt) for alts in alternatives for _, alt in alts), default=0))
        C = max(1, max(map(len, constraints), default=0))
        phrases = torch.full((n, A, L), -1, dtype=torch.long)
        term_length = torch.zeros((n, A), dtype=torch.long)
        owner = torch.zeros((n, A), dtype=torch.long)
        weight = torch.zeros((n, C), dtype=torch.long)
        met = torch.ones((n, C), dtype=torch.bool)
        for i, alts in enumerate(alternatives):
            met[i, : len(constraints[i])] = False
            for a, (c, alt) in enumerate(alts):
                if not alt:
                    raise ValueError(f"sentence {i}: an empty alternative of constraint {c}")
                phrases[i, a, : len(alt)] = torch.tensor(alt)
                term_length[i, a], owner[i, a] = len(alt), c
                weight[i, c] = max(int(weight[i, c]), len(alt))
        self.phrases, self.term_length, self.owner, self.weight = (t.to(device) for t in (phrases, term_length, owner, weight))
        self.banks = int(weight.sum(1).max()) + L + 1  # above every bank a hypothesis can reach (known on the host)
        self.met = met.to(device).unsqueeze(1).repeat(1, K, 1)
        self.progress = torch.zeros((n, K, A), dtype=torch.long, device=device)
        self.finished_met = torch.zeros((n, nbest), dtype=torch.bool, device=device)
        self.earlier = torch.ones(A, A, dtype=torch.bool, device=device).tril(-1)  # (a, b): alternative b comes before a
        self.owners = torch.nn.functional.one_hot(self.owner, C).to(torch.float32)  # (n, A, C): which constraint each satisfies

    def step(self) -> None:
        """BeamSearch.step with the terms' tokens among the candidates and the K kept taken from the banks in turn."""
        cfg = self.model.config
        n, K = self.scores.shape
        cache = self.state.cache
        R = cache.rows // n  # rows per sentence: K, or 1 at the first step
        logits = decode_step(self.model, self.last[: n * R], self.state)
        generated = cache.position
        normalizer = log_normalizer(logits)  # the model's distribution, before EOS is masked below
        at_max = generated > self.max_len  # (n,)
        met, progress = self.met[:, :R], self.progress[:, :R]  # (n, R, C), (n, R, A)
        # EOS only for a hypothesis holding every term, or at its length limit (where it is all a row may do).
        unmet = ~met.all(-1) & ~at_max.unsqueeze(1)
        logits[:, cfg.eos_id].masked_fill_(unmet.view(-1), float("-inf"))
        log_probs, tokens = self.candidates(logits, generated, R, normalizer)  # (n * R, P): the plain search's
        L = self.phrases.size(2)  # each alternative's next token, where the hypothesis's progress in it stands (n, R, A):
        wanted = self.phrases.unsqueeze(1).expand(n, R, -1, L).gather(3, progress.clamp(max=L - 1).unsqueeze(-1)).squeeze(-1)
        term_log_probs, term_tokens = self._term_candidates(logits, normalizer, tokens, met, wanted, generated, at_max)
        P, M = tokens.size(1), tokens.size(1) + term_tokens.size(-1)
        tokens = torch.cat([tokens.view(n, R, P), term_tokens], dim=2)  # (n, R, M)
        log_probs = torch.cat([log_probs.view(n, R, P), term_log_probs], dim=2)
        new_met, new_progress, bank = self._advance(met, progress, wanted, tokens)  # (n, R, M, C), (n, R, M, A), (n, R, M)

        cand_scores = (self.scores[:, :R].unsqueeze(-1) + log_probs).view(n, R * M)
        cand_token = tokens.view(n, R * M)
        cand_met, bank = new_met.view(n, R * M, -1), bank.view(n, R * M)
        cand_beam = torch.arange(R, device=cand_scores.device).repeat_interleave(M).expand(n, -1)
        finite = cand_scores.isfinite()
        # As in the plain search, a candidate ends where it is among the 2K best (here: of its bank).
        leading = self._rank_in_bank(cand_scores, bank) < 2 * K
        ends = (cand_token == cfg.eos_id) & finite & leading & ~self.done.unsqueeze(1)
        self._record(ends, cand_beam, cand_scores, cand_met.all(-1), generated)

        keep = self._allocate(torch.where(ends | ~finite, float("-inf"), cand_scores), bank, K, self.banks)  # (n, K)
        next_beam = cand_beam.gather(1, keep)
        next_scores = torch.where(ends.gather(1, keep), float("-inf"), cand_scores.gather(1, keep))
        next_token = cand_token.gather(1, keep)
        best_live = next_scores.max(1).values / self.max_penalty
        best_done = torch.where(self.finished_met[:, -1], self.finished_score[:, -1], float("-inf"))
        self.done |= at_max | (best_done >= best_live)

        self.tokens.index_copy_(2, generated - 1, next_token.unsqueeze(-1))
        self.parents.index_copy_(2, generated - 1, next_beam.unsqueeze(-1))
        self.scores.copy_(next_scores)
        self.last.copy_(next_token.view(-1))
        flat = keep.unsqueeze(-1)
        self.met.copy_(cand_met.gather(1, flat.expand(-1, -1, cand_met.size(-1))))
        self.progress.copy_(new_progress.view(n, R * M, -1).gather(1, flat.expand(-1, -1, new_progress.size(-1))))
        self.state.reorder((torch.arange(n, device=next_beam.device).unsqueeze(1) * R + next_beam).view(-1))

    def _term_candidates(self, logits: Tensor, normalizer: tuple[Tensor, Tensor], tokens: Tensor, met: Tensor, wanted: Tensor,
                         generated: Tensor, at_max: Tensor) -> tuple[Tensor, Tensor]:
        """For each row, the next token of each alternative of a term it does not hold yet, with its log-probability
        (n, R, A) each; -inf where there is none, where the row already offers that token (`tokens`, its best), where
        an earlier alternative offers it, inside a prefix and at the length limit. `wanted` (n, R, A): each alternative's
        next token for the row."""
        n, R, A = wanted.shape
        open_term = (self.term_length > 0).unsqueeze(1) & ~met.gather(2, self.owner.unsqueeze(1).expand(n, R, A))
        wanted = torch.where(open_term, wanted, 0)  # a valid id everywhere; closed ones are masked below
        offered = (wanted.unsqueeze(-1) == tokens.view(n, R, 1, -1)).any(-1)
        repeated = ((wanted.unsqueeze(-1) == wanted.unsqueeze(-2)) & self.earlier & open_term.unsqueeze(-2)).any(-1)
        shut = at_max.unsqueeze(1).expand(n, R)
        if self.prefix is not None:
            shut = shut | (generated <= self.prefix_len).unsqueeze(1)
        usable = open_term & ~offered & ~repeated & ~shut.unsqueeze(-1)
        log_probs = log_probs_of(logits.gather(1, wanted.view(n * R, A)), normalizer).view(n, R, A)
        return torch.where(usable, log_probs, float("-inf")), wanted

    def _advance(self, met: Tensor, progress: Tensor, wanted: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Each candidate's terms once its token (n, R, M) is added to its row's hypothesis: the constraints it holds
        (n, R, M, C), its progress in each alternative (n, R, M, A), and its bank: the terms' tokens it holds (a held
        constraint counts its weight; of those it is in the middle of, the furthest). `wanted`: as _term_candidates'."""
        n, R, A = progress.shape
        t = tokens.unsqueeze(-1)  # (n, R, M, 1)
        on = t == wanted.unsqueeze(2)  # (n, R, M, A): the token continues the alternative
        again = t == self.phrases[:, :, 0].view(n, 1, 1, A)  # or starts it anew
        live = (self.term_length > 0).view(n, 1, 1, A)
        new_progress = torch.where(on & live, progress.unsqueeze(2) + 1, (again & live).long())
        complete = live & (new_progress == self.term_length.view(n, 1, 1, A))
        completed = torch.einsum("nrma,nac->nrmc", complete.float(), self.owners) > 0
        new_met = met.unsqueeze(2) | completed
        held = new_met.gather(3, self.owner.view(n, 1, 1, A).expand_as(new_progress))
        new_progress = torch.where(complete | held, 0, new_progress)
        bank = (new_met * self.weight.view(n, 1, 1, -1)).sum(-1) + new_progress.amax(-1)
        return new_met, new_progress, bank

    @staticmethod
    def _rank_in_bank(scores: Tensor, bank: Tensor) -> Tensor:
        """Each candidate's rank (n, candidates) among the candidates of its bank, by score (0: the best); -inf
        candidates rank after every other (as many as there are candidates)."""
        by_score = scores.argsort(dim=1, descending=True, stable=True)
        banks = torch.where(scores.isfinite(), bank, -1).gather(1, by_score)
        by_bank = banks.argsort(dim=1, descending=True, stable=True)
        order = by_score.gather(1, by_bank)  # bank first (highest), score within it
        sorted_bank = banks.gather(1, by_bank)
        position = torch.arange(order.size(1), device=order.device).expand_as(order)
        starts = torch.ones_like(sorted_bank, dtype=torch.bool)
        starts[:, 1:] = sorted_bank[:, 1:] != sorted_bank[:, :-1]
        first = torch.where(starts, position, 0).cummax(dim=1).values
        rank = torch.where(sorted_bank >= 0, position - first, order.size(1))
        return torch.empty_like(rank).scatter_(1, order, rank)

    @classmethod
    def _allocate(cls, scores: Tensor, bank: Tensor, K: int, banks_above: int) -> Tensor:
        """The K candidates (n, K) that go on, as indices into (n, candidates): in turn from the banks, a candidate's
        rank within its bank first, then its bank (highest first); -inf candidates last (a beam left without any is
        dead: -inf). `banks_above`: a number above every bank."""
        rank = cls._rank_in_bank(scores, bank)
        key = rank * (banks_above + 1) + (banks_above - bank)
        return key.argsort(dim=1, stable=True)[:, :K]

    def _record(self, ends: Tensor, beam: Tensor, scores: Tensor, holds: Tensor, generated: Tensor) -> None:
        """BeamSearch._record_finished keeping whether each finished hypothesis holds every term: those that do rank
        before those that do not (which ended at the length limit), each by score."""
        all_score = torch.cat([self.finished_score, torch.where(ends, self.final_scores(scores, generated), float("-inf"))], dim=1)
        all_met = torch.cat([self.finished_met, holds & ends], dim=1)
        by_score = torch.sort(all_score, dim=1, descending=True, stable=True).indices
        order = by_score.gather(1, torch.sort(all_met.gather(1, by_score).to(torch.int8), dim=1, descending=True, stable=True).indices)
        order = order[:, : self.nbest]
        merged = [(self.finished_score, all_score), (self.finished_met, all_met),
                  (self.finished_log_prob, torch.cat([self.finished_log_prob, torch.where(ends, scores, float("-inf"))], dim=1)),
                  (self.finished_beam, torch.cat([self.finished_beam, beam], dim=1)),
                  (self.finished_length, torch.cat([self.finished_length, (generated - 1).expand_as(beam)], dim=1))]
        for mine, new in merged:
            mine.copy_(new.gather(1, order))

    def _collect(self, which: list[int]) -> None:
        """BeamSearch._collect, keeping of each sentence's finished hypotheses those that hold every term; where
        none does (the length limit came first), the best of the others alone."""
        index = torch.tensor(which, device=self.done.device)
        sentences, holds = self.sentence.index_select(0, index).tolist(), self.finished_met.index_select(0, index).tolist()
        super()._collect(which)
        for s, flags in zip(sentences, holds):
            hyps = self.results[s]
            self.results[s] = [h for h, held in zip(hyps, flags) if held] if flags[0] else hyps[:1]

    def _by_sentence(self) -> tuple[str, ...]:
        return (*super()._by_sentence(), "phrases", "term_length", "owner", "owners", "weight", "met", "progress", "finished_met")
