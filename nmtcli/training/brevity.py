"""A model's brevity penalty, calibrated on its validation split when `nmt average` writes it (issue 40).

A Transformer trained on a small corpus of short strings ends long sentences early: `tiny` on the demo corpus
writes translations a quarter too short (BLEU's brevity penalty 0.75), and its own scores prefer the short
hypothesis, so no length penalty of the paper's search lengthens them without running others on
(docs/training.md, "Short outputs"). The search's brevity penalty (inference/beam.py, `Brevity`) holds a
finished hypothesis to the length the training data predicts from its source: ratio * |X|, ratio the training
pairs' median target pieces per source piece. Its weight is the model's own: the smallest of WEIGHTS whose
translations of the validation split reach BLEU's brevity penalty TARGET_BP (as long as their references,
within some 4%), found by bisection (length grows with the weight). A model already that long gets weight 0: the
paper's search, unchanged. The weight and the ratio go into the model dir's config.json ("search"), where
`nmt translate` reads them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

TARGET_BP = 0.96  # BLEU's brevity penalty the validation translations must reach: some 4% shorter than their references
WEIGHTS = (*(i / 2 for i in range(21)), 12.0, 15.0, 20.0)  # the weights tried: 0 to 10 by 0.5, then 12, 15, 20
# weight 0, the bisection's probes over WEIGHTS, and the largest weight where every probe fell short: 7 translations at most
MAX_TRIALS = 2 + math.ceil(math.log2(len(WEIGHTS) - 1))
VALID_LINES = 1000  # the validation lines translated for each weight tried (the first ones), at most
# The cost's bound: each translation takes as many of VALID_LINES as the translations left may take in what is left of
# BUDGET_SECONDS, at the slowest pace seen (the first PROBE_LINES timed first), but never fewer than MIN_LINES (a BP of
# fewer lines is noise): at most about BUDGET_SECONDS, or MAX_TRIALS translations of MIN_LINES lines where those take longer.
BUDGET_SECONDS = 120.0
PROBE_LINES, MIN_LINES = 50, 200
TASK = "calibrating the length on the validation split"  # the progress bar's


@dataclass
class Trial:
    """The validation split translated at one weight: BLEU, its brevity penalty, and the output's length over the references'."""

    weight: float
    bleu: float
    bp: float
    ratio: float
    lines: int = 0  # the validation lines it translated (the first ones)


@dataclass
class Calibration:
    """The weight chosen, the length ratio it holds translations to, and every weight tried (first: 0, the paper's search)."""

    weight: float
    length_ratio: float
    lines: int
    trials: list[Trial] = field(default_factory=list)

    def trial(self, weight: float) -> Trial:
        return next(t for t in self.trials if t.weight == weight)

    def record(self) -> dict[str, Any]:
        """config.json's "search": what `nmt translate` reads, and how it was found."""
        before, after = self.trial(0.0), self.trial(self.weight)
        return {
            "brevity_penalty": self.weight,
            "length_ratio": round(self.length_ratio, 4),
            "calibrated_on": {"split": "valid", "lines": self.lines, "target_bp": TARGET_BP,
                              "bp": [round(before.bp, 4), round(after.bp, 4)], "bleu": [round(before.bleu, 2), round(after.bleu, 2)]},
        }


def training_length_ratio(data_dir: Path, source_lang: str, target_lang: str, vocab_size: int) -> float:
    """The training pairs' median of target pieces per source piece: the penalty is a sentence's, so the ratio is the
    typical sentence's (on the demo corpus 1.0, where the sums' ratio, 1.13, is the long sentences'; at the sums'
    ratio the same brevity costs 0.2-0.5 BLEU more: docs/translating.md, "Length")."""
    from nmtcli.data.shards import Shard

    from nmtcli.errors import NmtError

    try:
        source = Shard(Path(data_dir) / f"train.{source_lang}", vocab_size).lengths
        target = Shard(Path(data_dir) / f"train.{target_lang}", vocab_size).lengths
    except (OSError, ValueError) as e:  # a shard missing or cut short: said, never a failure after the model is written
        raise NmtError(f"cannot read the training split's lengths in {data_dir}: {e}", "prepare the data again") from None
    if len(source) != len(target):
        raise NmtError(f"{data_dir}'s training split has {len(source):,} {source_lang} lines but {len(target):,} {target_lang} ones",
                       "prepare the data again")
    kept = source > 0
    return float(np.median(target[kept] / source[kept])) if kept.any() else 1.0


def calibrate(model_dir: Path, data_dir: Path, manifest: dict[str, Any], device: str,
              progress: Callable[[str, int, int | None], None] | None = None, budget: float = BUDGET_SECONDS,
              clock: Callable[[], float] = time.perf_counter) -> Calibration:
    """The brevity penalty weight for the model in `model_dir`, found on the validation split of `data_dir` (its
    prepared data, `manifest` its manifest.json) as the module says, in about `budget` seconds (see BUDGET_SECONDS).
    `progress(task, done, total)` hears of each translation of the split (total: MAX_TRIALS)."""
    import sacrebleu

    from nmtcli.data.prepare import reference_lines
    from nmtcli.errors import NmtError
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator

    source_lang, target_lang = manifest["source_lang"], manifest["target_lang"]
    sources = reference_lines(data_dir, "valid", source_lang)[:VALID_LINES]
    references = reference_lines(data_dir, "valid", target_lang)[:VALID_LINES]
    if len(sources) != len(references):
        raise NmtError(f"{data_dir}'s valid split has {len(sources):,} {source_lang} lines but {len(references):,} {target_lang} ones",
                       "prepare the data again")
    if not sources:
        raise NmtError(f"{data_dir}'s valid split is empty", "prepare the data with a validation split (--valid PREFIX)")
    tags = manifest.get("language_tags")  # data prepared for a multilingual model (--vocab-from): its codes
    languages = (tags["source"], tags["target"]) if tags else (None, None)
    translator = Translator(model_dir, device, languages=languages)
    ratio = training_length_ratio(data_dir, source_lang, target_lang, translator.model.config.vocab_size)
    if progress:
        progress(TASK, 0, MAX_TRIALS)

    def translated(lines: list[str], weight: float) -> list[str]:
        settings = SearchSettings(brevity_penalty=weight, length_ratio=ratio)
        return [hyps[0].text if hyps else "" for hyps in translator.translate_lines(lines, settings)]

    # The first lines at weight 0, timed; then before each translation, as many lines as the trials left may take in
    # what is left of the budget at the slowest pace seen so far (a larger weight makes longer, slower translations).
    started = clock()
    first = translated(sources[:PROBE_LINES], 0.0)
    pace = max(1e-9, (clock() - started) / max(1, len(first)))  # seconds a line
    calibration = Calibration(0.0, ratio, len(sources))
    tried: dict[float, Trial] = {}

    def at(weight: float) -> Trial:
        nonlocal pace
        if weight not in tried:
            left = budget - (clock() - started)
            lines = min(len(sources), max(MIN_LINES, int(left / (max(1, MAX_TRIALS - len(tried)) * pace))))
            begun = clock()
            if weight == 0.0:
                hypotheses = first[:lines] + translated(sources[len(first):lines], 0.0)
            else:
                hypotheses = translated(sources[:lines], weight)
            pace = max(pace, (clock() - begun) / max(1, lines - (len(first) if weight == 0.0 else 0)))
            bleu = sacrebleu.corpus_bleu(hypotheses, [references[:lines]])
            tried[weight] = Trial(weight, bleu.score, bleu.bp, bleu.sys_len / max(1, bleu.ref_len), len(hypotheses))
            calibration.trials.append(tried[weight])
            if progress:
                progress(TASK, len(tried), MAX_TRIALS)
        return tried[weight]

    calibration.lines = at(0.0).lines
    if at(0.0).bp >= TARGET_BP:
        if progress:
            progress(TASK, MAX_TRIALS, MAX_TRIALS)  # no bisection: the bar is full
        return calibration
    # The smallest weight that reaches TARGET_BP (the largest if none does): bisection over WEIGHTS.
    low, high = 0, len(WEIGHTS) - 1  # WEIGHTS[low] falls short; WEIGHTS[high] reaches it, or is the last
    while high - low > 1:
        middle = (low + high) // 2
        if at(WEIGHTS[middle]).bp >= TARGET_BP:
            high = middle
        else:
            low = middle
    calibration.weight = WEIGHTS[high]
    calibration.lines = at(calibration.weight).lines
    calibration.trials.sort(key=lambda t: t.weight)
    if progress:
        progress(TASK, MAX_TRIALS, MAX_TRIALS)
    return calibration

