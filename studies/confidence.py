"""Which confidence predicts translation quality: estimators nmt can compute without a second model, compared on
held-out data by Spearman correlation with sentence chrF against the references, and the chosen one's calibration.

For each model and data dir (a prepared dir with valid.SRC/.TGT and test.SRC/.TGT, e.g. `nmt quickstart`'s
data/demo and models/tiny-demo) the valid and test splits are translated (beam 4, the 4-best kept) and every
sentence gets:

  mean_log_prob   log P(y|x) / (|y| + 1): the length-normalised log-probability of the best translation (free:
                  the search computes it)
  min_token_prob  the lowest probability of one of its tokens (a forced-decoding pass over it)
  nbest_agree     the mean sentence chrF of the best against the other 3 of the 4-best (beam n-best, free)
  sample_agree    the mean sentence chrF of the best against 4 samples from the model (4 sampled decodings)
  round_trip      with --reverse-model DIR (a model of the other direction, tgt->src): log P(x|y) / (|x| + 1), the
                  forced score of the source given the translation under it (a forced pass); skipped (a row saying
                  so, the mix without it) for a set without one, or whose reverse model is of another pair
  mix             a fractional logistic regression of chrF / 100 on the (standardised) estimators above, fitted
                  on the valid split
  mix_free        the same of mean_log_prob and nbest_agree alone (no pass beyond the search)

Spearman's rho is measured on the test split (the mix and the calibration are fitted on valid). The calibration:
confidence = sigmoid(slope * mean_log_prob + intercept), fitted on valid (cross-entropy against chrF / 100, the
curve nmtcli/inference/confidence.py holds), on the valid splits of all the sets given together (one model's
scores span too little of the range: a weak model has few good translations, a strong one few bad), then on
each test split the confidence bins against the mean chrF in each, and what "confidence >= 0.8" selected. `--fit` prints the Calibration line to paste into confidence.py.

A model with a brevity weight (`nmt average` calibrated one) also gets the penalty's own table: its test split
translated again with `brevity_penalty=0`, and mean_log_prob's Spearman with and without the weight, over the lines
the penalty leaves as they are and over those it changes (their chrF, length and mean log-probability both ways): whether
the confidence lost its ranking because the penalty's tails cost it probability, or because the penalty mends the
short translations that it had ranked last (issue 51, item 1; studies/results/confidence-weak-rule-cpu-2026-11-29.txt).

Usage:
  python studies/confidence.py --model models/tiny-demo --data data/demo [--reverse-model DIR] [--device cpu]
  python studies/confidence.py --model A --data DA --model B --data DB      # several held-out sets in one table
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from sacrebleu.metrics import CHRF

from nmtcli import Translator
from nmtcli.data.prepare import read_manifest, reference_lines
from nmtcli.inference.confidence import CALIBRATION, Calibration, mean_log_prob

CHRF_METRIC = CHRF()
SAMPLES = 4
NBEST = 4
BINS = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0001]


def chrf(hypothesis: str, reference: str) -> float:
    return CHRF_METRIC.sentence_score(hypothesis, [reference]).score


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho: Pearson's correlation of the ranks (ties share their mean rank)."""
    def ranks(a: np.ndarray) -> np.ndarray:
        order = np.argsort(a, kind="stable")
        r = np.empty(len(a))
        r[order] = np.arange(len(a))
        for value in np.unique(a):  # mean rank for ties
            tied = a == value
            r[tied] = r[tied].mean()
        return r
    rx, ry = ranks(x), ranks(y)
    return float(np.corrcoef(rx, ry)[0, 1])


def fit_logistic(features: np.ndarray, targets: np.ndarray, steps: int = 100, ridge: float = 1e-3) -> np.ndarray:
    """Fractional logistic regression: weights w (last: the intercept) minimising the cross-entropy of
    sigmoid(features @ w[:-1] + w[-1]) against targets in [0, 1], by Newton's method."""
    x = np.hstack([features, np.ones((len(features), 1))])
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(x @ w)))
        gradient = x.T @ (p - targets) + ridge * w
        hessian = (x * (p * (1 - p))[:, None]).T @ x + ridge * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.abs(step).max() < 1e-9:
            break
    return w


def features_of(translator: Translator, reverse: Translator | None, sources: list[str], references: list[str]) -> dict:
    """Each estimator's value for every sentence of a split, and the sentence chrF of the best translation."""
    started = time.perf_counter()
    results = translator.translate(sources, beam=NBEST, nbest=NBEST)
    texts = [t.text for t in results]
    quality = np.array([chrf(t, r) for t, r in zip(texts, references)])
    f: dict[str, np.ndarray] = {}
    f["mean_log_prob"] = np.array([mean_log_prob(t.log_prob, len(t.tokens)) if t.log_prob is not None else 0.0 for t in results])
    scored = translator.score(sources, texts)
    f["min_token_prob"] = np.array([float(np.exp(min(s.token_log_probs))) for s in scored])
    f["nbest_agree"] = np.array([np.mean([chrf(h.text, t.text) for h in t.nbest[1:]]) if len(t.nbest) > 1 else 100.0
                                 for t in results])
    samples = translator.sample(sources, samples=SAMPLES, seed=1)
    f["sample_agree"] = np.array([np.mean([chrf(h.text, t.text) for h in s.nbest]) if s.nbest else 100.0
                                  for t, s in zip(results, samples)])
    if reverse is not None:
        back = reverse.score(texts, sources)
        f["round_trip"] = np.array([b.log_prob / (len(b.tokens) + 1) for b in back])
    print(f"  {len(sources)} sentences in {time.perf_counter() - started:.0f} s")
    return {"features": f, "chrf": quality, "texts": texts, "tokens": np.array([len(t.tokens) for t in results])}


def compare(name: str, model: Path, data: Path, reverse_model: Path | None, device: str) -> tuple[list[str], Calibration, dict]:
    manifest = read_manifest(data)
    src, tgt = manifest["source_lang"], manifest["target_lang"]
    translator = Translator.load(model, device=device)
    reverse, skipped = None, "no --reverse-model given"
    if reverse_model:
        reverse = Translator.load(reverse_model, device=device)
        pair = (reverse.source_language, reverse.target_language)
        if None not in pair and pair != (tgt, src):
            reverse, skipped = None, f"the reverse model translates {pair[0]}->{pair[1]}, not {tgt}->{src}"
    print(f"{name}: {model} on {data} ({src}->{tgt})" + ("" if reverse else f"; round_trip skipped: {skipped}"))
    fit = features_of(translator, reverse, reference_lines(data, "valid", src), reference_lines(data, "valid", tgt))
    held = features_of(translator, reverse, reference_lines(data, "test", src), reference_lines(data, "test", tgt))
    names = list(fit["features"])
    # the mix: standardised on valid, fitted on valid
    mean = np.array([fit["features"][n].mean() for n in names])
    std = np.array([fit["features"][n].std() or 1.0 for n in names])
    stack = lambda split: (np.stack([split["features"][n] for n in names], axis=1) - mean) / std  # noqa: E731
    w = fit_logistic(stack(fit), fit["chrf"] / 100)
    held["features"]["mix"] = 1 / (1 + np.exp(-(stack(held) @ w[:-1] + w[-1])))
    print("  mix weights (standardised): " + ", ".join(f"{n} {v:+.3f}" for n, v in zip(names, w[:-1])))
    free = [names.index("mean_log_prob"), names.index("nbest_agree")]  # what a beam search with nbest=beam gives for nothing
    w = fit_logistic(stack(fit)[:, free], fit["chrf"] / 100)
    held["features"]["mix_free"] = 1 / (1 + np.exp(-(stack(held)[:, free] @ w[:-1] + w[-1])))
    rows = [f"| {name} | {n} | {spearman(held['features'][n], held['chrf']):+.3f} |" for n in [*names, "mix", "mix_free"]]
    if reverse is None:
        rows.insert(len(names), f"| {name} | round_trip | skipped ({skipped}) |")
    if translator.engine.settings.brevity_penalty:
        print("\n".join(penalty_effect(translator, reference_lines(data, "test", src), reference_lines(data, "test", tgt), held)))
    return rows, fit, held


def penalty_effect(translator: Translator, sources: list[str], references: list[str], held: dict) -> list[str]:
    """What the model's brevity weight does to the confidence's ranking on the test split (`held`: its default search)."""
    plain = translator.translate(sources, beam=NBEST, nbest=NBEST, brevity_penalty=0)  # the default's search but the weight
    plain_chrf = np.array([chrf(t.text, r) for t, r in zip(plain, references)])
    plain_lp = np.array([mean_log_prob(t.log_prob, len(t.tokens)) if t.log_prob is not None else 0.0 for t in plain])
    lp, quality = held["features"]["mean_log_prob"], held["chrf"]
    same = np.array([t.text == d for t, d in zip(plain, held["texts"])])
    tokens, plain_tokens = held["tokens"], np.array([len(t.tokens) for t in plain])
    lines = [f"brevity weight {translator.engine.settings.brevity_penalty:g}: mean_log_prob's Spearman with sentence chrF "
             f"{spearman(lp, quality):+.3f} (weight 0: {spearman(plain_lp, plain_chrf):+.3f}; mean sentence chrF {quality.mean():.1f}, "
             f"weight 0 {plain_chrf.mean():.1f})",
             "| test lines | lines | Spearman, the default | Spearman, weight 0 | chrF default / weight 0 | mean log-prob default / weight 0 | pieces default / weight 0 |",
             "|---|---|---|---|---|---|---|"]
    for name, chosen in (("the penalty leaves as they are", same), ("the penalty changes", ~same)):
        if chosen.sum() > 2:
            lines.append(f"| {name} | {chosen.sum()} | {spearman(lp[chosen], quality[chosen]):+.3f} | "
                         f"{spearman(plain_lp[chosen], plain_chrf[chosen]):+.3f} | {quality[chosen].mean():.1f} / "
                         f"{plain_chrf[chosen].mean():.1f} | {lp[chosen].mean():.3f} / {plain_lp[chosen].mean():.3f} | "
                         f"{tokens[chosen].mean():.1f} / {plain_tokens[chosen].mean():.1f} |")
    return lines


def calibration_table(calibration: Calibration, held: dict) -> list[str]:
    confidence = np.array([calibration(x) for x in held["features"]["mean_log_prob"]])
    quality = held["chrf"]
    lines = ["| confidence | sentences | mean confidence | mean chrF / 100 | chrF >= 50 |", "|---|---|---|---|---|"]
    for low, high in zip(BINS, BINS[1:]):
        chosen = (confidence >= low) & (confidence < high)
        if chosen.any():
            lines.append(f"| {low:.1f}-{min(high, 1.0):.1f} | {chosen.sum()} | {confidence[chosen].mean():.2f} | "
                         f"{quality[chosen].mean() / 100:.2f} | {100 * (quality[chosen] >= 50).mean():.0f}% |")
        else:
            lines.append(f"| {low:.1f}-{min(high, 1.0):.1f} | 0 | | | |")
    for threshold in (0.5, 0.8):
        chosen = confidence >= threshold
        if chosen.any():
            lines.append(f"\nconfidence >= {threshold}: {chosen.sum()} of {len(chosen)} sentences, mean chrF {quality[chosen].mean():.1f} "
                         f"(the others {quality[~chosen].mean() if (~chosen).any() else float('nan'):.1f}), "
                         f"{100 * (quality[chosen] >= 50).mean():.0f}% of them chrF >= 50")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--data", type=Path, action="append", required=True)
    parser.add_argument("--name", action="append", help="a name for each held-out set (default: the model dir's)")
    parser.add_argument("--reverse-model", "--reverse", dest="reverse", type=Path, action="append",
                        help="for the round_trip estimator: a model dir of the other direction for each --model, in order ('-': none)")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    names = args.name or [m.name for m in args.model]
    reverses = [*(args.reverse or []), *[None] * len(args.model)][:len(args.model)]  # a set without one: round_trip skipped
    table = ["| held-out set | estimator | Spearman rho with sentence chrF (test split) |", "|---|---|---|"]
    sets = []
    for name, model, data, reverse in zip(names, args.model, args.data, reverses):
        rows, fit, held = compare(name, model, data, None if reverse in (None, Path("-")) else reverse, args.device)
        table += rows
        sets.append((name, fit, held))
    print("\n" + "\n".join(table))
    x = np.concatenate([fit["features"]["mean_log_prob"] for _, fit, _ in sets])
    y = np.concatenate([fit["chrf"] for _, fit, _ in sets]) / 100
    a, b = fit_logistic(x[:, None], y)
    calibration = Calibration(round(float(a), 4), round(float(b), 4))
    print(f"\nCALIBRATION = {calibration}  # fitted on the valid splits of {', '.join(n for n, _, _ in sets)}")
    for name, _, held in sets:
        print(f"\nThat curve on {name}'s test split:\n" + "\n".join(calibration_table(calibration, held)))
        print(f"(the curve confidence.py holds now, {CALIBRATION}:)\n" + "\n".join(calibration_table(CALIBRATION, held)))


if __name__ == "__main__":
    main()
