"""What a search is asked for (SearchSettings), checked once, and the batch sizes a device translates in by default.

`nmt translate`'s and `nmt serve`'s search flags, the Python API's arguments and a training run's validation BLEU all
become one SearchSettings; `check_search` turns the values a user can get wrong into one NmtError line each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nmtcli.errors import NmtError
from nmtcli.inference.penalties import Brevity
from nmtcli.inference.glossary import Glossary
from nmtcli.inference.sampling import DEFAULT_SEED, check_sampling


@dataclass(frozen=True)
class SearchSettings:
    beam: int = 4  # sec. 6.1
    alpha: float = 0.6  # sec. 6.1, GNMT length penalty
    max_len_a: float = 1.0  # output length at most a * |x| + b: "input length + 50" (sec. 6.1)
    max_len_b: int = 50
    nbest: int = 1
    length_penalty: str = "gnmt"
    batch_tokens: int | None = None  # padded source tokens per batch; None: the device's default
    window: int | None = None  # lines read, sorted, translated and written at a time; None: the device's default
    cuda_graphs: bool = True  # replay beam search steps as CUDA graphs on a GPU (inference/graphs.py)
    sampling: str | None = None  # full, topk:K or topp:P: draw `nbest` samples instead of searching (inference/sampling.py)
    temperature: float = 1.0  # sampling: softmax(logits / temperature)
    seed: int = DEFAULT_SEED  # sampling: with the line number, what every draw hashes
    alignment: str | None = None  # "words" or "pieces": each translation's alignment; HTML's "covering" (inference/alignment.py)
    glossary: Glossary | None = None  # target terms put in where their source terms occur (inference/glossary.py, terms.py)
    coverage_penalty: float = 0.0  # GNMT's coverage penalty beta: the beam's hypotheses reranked by it (inference/coverage.py); 0: off
    brevity_penalty: float | None = None  # the brevity penalty's weight (penalties.Brevity); None: the model's own (`nmt average` calibrates it), else 0
    length_ratio: float | None = None  # target pieces per source piece the brevity penalty expects; None: the model's own, else 1.0
    shortlist: bool = True  # beam and greedy search score only the pieces the model's lexical shortlist allows, where it has one (inference/shortlist.py)

    @property
    def brevity(self) -> Brevity:
        """The brevity penalty these settings search and score with (Translator.own_length resolves what they leave
        to the model first; left unresolved, it is off)."""
        return Brevity(self.brevity_penalty or 0.0, self.length_ratio or 1.0)


MAX_COVERAGE_PENALTY = 10.0  # the largest coverage penalty beta taken (GNMT used 0.2; past ~1 it only lengthens)
MAX_BREVITY_PENALTY = 20.0  # the largest brevity penalty weight taken (past ~8 it only lengthens: docs/translating.md)

# (batch_tokens, window) by device type (a GPU's batch_tokens depends on its memory: inference/memory.py). On a CPU a step's logits (rows x vocabulary) should stay near the
# size of the last-level cache: 1,024 padded tokens is some 36 natural-length lines (144 beam rows), and
# larger batches only make every step slower. A GPU decoding step costs about the same for 100 sentences
# as for 2,000, so it takes them all.
DEVICE_DEFAULTS = {"cpu": (1024, 1000), "cuda": (65536, 10000)}


def batching_for(settings: SearchSettings, device_type: str) -> tuple[int, int]:
    """(batch_tokens, window): the settings' own, else the device's defaults."""
    batch_tokens, window = DEVICE_DEFAULTS["cpu" if device_type == "cpu" else "cuda"]
    return settings.batch_tokens or batch_tokens, settings.window or window


def check_search(settings: SearchSettings) -> None:
    """A call's own search settings (serve's request, the Python API's arguments): sampling's, and nbest within the beam."""
    check_sampling(settings.sampling, settings.temperature, settings.seed)
    if settings.nbest > settings.beam and settings.sampling is None:
        raise NmtError(f"nbest {settings.nbest} exceeds beam {settings.beam}", "n-best lists come from the beam", exit_code=2)
    check_coverage(settings, "coverage_penalty")
    check_brevity(settings, "brevity_penalty")
    for name, value, low in (("alpha", settings.alpha, None), ("max_len_a", settings.max_len_a, 0.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or low is not None and value < low:
            raise NmtError(f"{name} {value!r} is out of range", "give a finite number" + (f" of at least {low:g}" if low is not None else "")
                           + " (a NaN or an infinity makes every score NaN)", exit_code=2)


def check_brevity(settings: SearchSettings, name: str) -> None:
    """The brevity penalty's weight: None (the model's), or 0 to MAX_BREVITY_PENALTY; the length ratio positive."""
    weight = settings.brevity_penalty
    if weight is not None and (isinstance(weight, bool) or not isinstance(weight, (int, float)) or not (math.isfinite(weight) and 0 <= weight <= MAX_BREVITY_PENALTY)):
        raise NmtError(f"{name} {weight} is out of range", f"give 0 (off) to {MAX_BREVITY_PENALTY:g}; leave it out for the model's own "
                       "(`nmt info MODEL` shows it)", exit_code=2)
    ratio = settings.length_ratio
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not (math.isfinite(ratio) and 0 < ratio <= 10)):
        raise NmtError(f"length ratio {ratio} is out of range", "give target pieces per source piece, above 0 and at most 10", exit_code=2)


def check_coverage(settings: SearchSettings, name: str) -> None:
    """The coverage penalty's beta: 0 or more, and for a beam search (sampling has no hypotheses to rerank)."""
    if not (math.isfinite(settings.coverage_penalty) and 0 <= settings.coverage_penalty <= MAX_COVERAGE_PENALTY):
        raise NmtError(f"{name} {settings.coverage_penalty} is out of range", f"give 0 (off) to {MAX_COVERAGE_PENALTY:g}: GNMT used 0.2, "
                       "nmt's measurements 0.2-1.0", exit_code=2)
    if settings.coverage_penalty and settings.sampling is not None:
        raise NmtError(f"{name} ranks a beam search's hypotheses; sampling has none to rank", "drop it, or search with --beam", exit_code=2)
