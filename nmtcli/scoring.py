"""Corpus scores under two conventions: sacreBLEU's (the default), and the paper's tokenized BLEU.

`nmt score` prints each sacreBLEU metric exactly as `sacrebleu REF -i HYP -m METRIC -f text` does,
so the numbers agree to the last digit. This is the number to report.

The paper's BLEU (sec. 6.1, Table 2) is older and not comparable with it: tensor2tensor's
`get_ende_bleu.sh` Moses-tokenized the hypothesis and the reference (`tokenizer.perl -l de`,
escaping on, no aggressive hyphen splitting), split hyphenated compounds
(`s{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g`, "for historical reasons", to match GNMT and ConvS2S),
and ran Moses' `multi-bleu.perl`. `paper_bleu` does the same in Python: `sacremoses` is
the Moses tokenizer of 2017 line for line (it keeps a sentence-final "5." whole, as tokenizer.perl
did before November 2018), and `multi_bleu` is multi-bleu.perl's arithmetic.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF, TER

from nmtcli.errors import NmtError

METRICS = {"bleu": BLEU, "chrf": CHRF, "ter": TER}
CONVENTIONS = ("sacrebleu", "paper")
PAPER_BLEU = "BLEU (paper)"  # the name in --json and scores.json, beside sacreBLEU's "BLEU"


@dataclass(frozen=True)
class Score:
    name: str  # "BLEU", "chrF2", "TER", "BLEU (paper)"
    score: float  # full precision
    signature: str
    formatted: str  # sacreBLEU's own one-line text form; for the paper's BLEU, the same layout


def score(hypotheses: list[str], references: list[str], metrics: list[str], width: int = 1) -> list[Score]:
    """Score `hypotheses` against one reference each, with sacreBLEU's default settings per metric."""
    _check_aligned(hypotheses, references)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise NmtError(f"unknown metric {', '.join(unknown) or '(none)'}", f"choose from {', '.join(METRICS)}", exit_code=2)
    results = []
    for name in metrics:
        metric = METRICS[name]()
        result = metric.corpus_score(hypotheses, [references])
        signature = metric.get_signature().format()
        results.append(Score(result.name, result.score, signature, result.format(width, False, signature)))
    return results


def closest(hypotheses: list[str], reference: str) -> int:
    """The index of the hypothesis with the best sentence chrF against `reference` (the first of equals): what
    distillation keeps of a teacher's n-best list for a training pair (mozilla/translations' extract_best)."""
    metric = CHRF()
    scores = [metric.sentence_score(h, [reference]).score for h in hypotheses]
    return max(range(len(scores)), key=lambda i: (scores[i], -i))


def _check_aligned(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise NmtError(
            f"the hypothesis has {len(hypotheses)} lines but the reference has {len(references)}",
            "they must be aligned line by line; was a translation cut short?",
        )


# --- The paper's BLEU -------------------------------------------------------------------------

def moses_languages() -> set[str]:
    """Language codes the Moses tokenizer has non-breaking prefixes for (others would fall back to English's)."""
    from sacremoses.corpus import NonbreakingPrefixes

    return {code for code in NonbreakingPrefixes().available_langs.values()}


def moses_tokenize(lines: list[str], lang: str) -> list[str]:
    """`tokenizer.perl -l LANG` with its defaults: XML escaping on (`&quot;`, `&apos;`...), `-a` off."""
    from sacremoses import MosesTokenizer

    tokenizer = MosesTokenizer(lang=lang)
    return [tokenizer.tokenize(line, escape=True, return_str=True, aggressive_dash_splits=False) for line in lines]


# multi-bleu.perl and `perl -ple` read bytes, where \s is ASCII whitespace only; re.ASCII is the same
# rule on str (every non-ASCII character is \S, as each byte of its UTF-8 form is to perl).
_COMPOUND = re.compile(r"(\S)-(\S)", re.ASCII)
_TOKEN = re.compile(r"\S+", re.ASCII)


def split_compounds(line: str) -> str:
    """`perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`: "Fahrer-Schutz" -> "Fahrer ##AT##-##AT## Schutz".

    Matches do not overlap, as in perl: "a-b-c" -> "a ##AT##-##AT## b-c".
    """
    return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", line)


@dataclass(frozen=True)
class MultiBleu:
    bleu: float  # 0..1, as multi-bleu.perl computes it before printing 100 * bleu
    precisions: tuple[float, float, float, float]  # 0..1
    brevity_penalty: float
    hyp_len: int
    ref_len: int

    @property
    def ratio(self) -> float:
        return self.hyp_len / self.ref_len if self.ref_len else 0.0


def multi_bleu(hypotheses: list[str], references: list[str]) -> MultiBleu:
    """Corpus BLEU of tokenized text, as Moses' multi-bleu.perl computes it (one reference, no -lc).

    Case-sensitive, tokens split on whitespace, n-grams up to 4 with clipped counts, no smoothing:
    a precision of 0 makes the score 0 (multi-bleu's log(0) is -9999999999). Brevity penalty
    exp(1 - r/c) when the hypothesis is shorter than the reference (Papineni et al., 2002).
    """
    _check_aligned(hypotheses, references)
    correct, total = [0] * 5, [0] * 5
    hyp_len = ref_len = 0
    for hyp, ref in zip(hypotheses, references):
        hyp_words, ref_words = _TOKEN.findall(hyp), _TOKEN.findall(ref)
        hyp_len += len(hyp_words)
        ref_len += len(ref_words)
        for n in range(1, 5):
            hyp_ngrams, ref_ngrams = _ngrams(hyp_words, n), _ngrams(ref_words, n)
            total[n] += sum(hyp_ngrams.values())
            correct[n] += sum(min(count, ref_ngrams[ngram]) for ngram, count in hyp_ngrams.items())
    precisions = tuple(correct[n] / total[n] if total[n] else 0.0 for n in range(1, 5))
    if ref_len == 0 or hyp_len == 0:  # multi-bleu.perl prints "BLEU = 0" (or divides by zero)
        return MultiBleu(0.0, precisions, 0.0, hyp_len, ref_len)
    brevity_penalty = math.exp(1 - ref_len / hyp_len) if hyp_len < ref_len else 1.0
    # The same operations in the same order as multi-bleu.perl, so the doubles agree bit for bit.
    bleu = brevity_penalty * math.exp(sum(math.log(p) if p else -9999999999 for p in precisions) / 4)
    return MultiBleu(bleu, precisions, brevity_penalty, hyp_len, ref_len)


def _ngrams(words: list[str], n: int) -> Counter:
    return Counter(tuple(words[i : i + n]) for i in range(len(words) - n + 1))


def paper_bleu(hypotheses: list[str], references: list[str], lang: str, width: int = 2) -> Score:
    """The paper's BLEU of detokenized text: Moses-tokenize, split compounds, multi-bleu.perl.

    `lang` is the target language (`tokenizer.perl -l`). `width` decimals for the score (multi-bleu.perl
    prints 2); the n-gram precisions get 1 and BP and ratio 3, as there.
    """
    import sacremoses

    _check_aligned(hypotheses, references)
    if lang not in moses_languages():
        raise NmtError(f"the Moses tokenizer does not know the language {lang!r}",
                       f"pass --target-lang with one of {', '.join(sorted(moses_languages()))}", exit_code=2)
    hyp = [split_compounds(line) for line in moses_tokenize(hypotheses, lang)]
    ref = [split_compounds(line) for line in moses_tokenize(references, lang)]
    result = multi_bleu(hyp, ref)
    precisions = "/".join(f"{100 * p:.1f}" for p in result.precisions)
    formatted = (
        f"BLEU (paper: moses -l {lang}, compound-split, multi-bleu) = {100 * result.bleu:.{width}f} {precisions} "
        f"(BP = {result.brevity_penalty:.3f} ratio = {result.ratio:.3f} hyp_len = {result.hyp_len} ref_len = {result.ref_len})"
    )
    signature = f"nrefs:1|case:mixed|tok:moses-{lang}|compound:atat|smooth:none|impl:multi-bleu|sacremoses:{sacremoses.__version__}"
    return Score(PAPER_BLEU, 100 * result.bleu, signature, formatted)
