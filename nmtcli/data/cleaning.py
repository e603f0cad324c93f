"""The text filters of `nmt prepare`: which training pairs are noise, each filter named and counted (issue 53).

Noise hurts NMT far more than it hurt phrase-based systems: Khayrallah & Koehn (2018, "On the Impact of Various
Types of Noise on Neural Machine Translation") took a Transformer from 27.2 to 17.3 BLEU by adding a noisy web crawl
as large as the clean corpus, the worst kind being untranslated copies of the source. The filters here follow
Mozilla's default OpusCleaner chain (mozilla/translations, pipeline/clean/opuscleaner/configs/default.filters.json:
language identity, alphabetic share, number and URL mismatches, word length) plus a copy filter; their thresholds
were set on the demo corpus and a generated one with known noise (studies/cleaning.py, docs/data.md).

Each filter judges one pair on its own (but `duplicate`, which remembers the pairs kept), in the order of
`FILTERS`; the first that objects names the drop. Cheap filters go first, language identification last but one.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import random
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from nmtcli.data import language_id
from nmtcli.errors import NmtError
from nmtcli.threads import exit_with_parent

# In order. `empty` always applies; the others are switched by PrepareSettings (the defaults below).
FILTERS = ("empty", "markup", "script", "long_word", "non_alphabetic", "url_mismatch", "number_mismatch", "copy", "wrong_language", "duplicate")
DEFAULTS = {"markup": False, "script": False, "long_word": True, "non_alphabetic": True, "url_mismatch": True, "number_mismatch": True,
            "copy": True, "wrong_language": True, "duplicate": True}

# "Mostly markup": tags, entities and URLs cover more than half of a side's characters.
_MARKUP = re.compile(r"<[^<>]{1,200}>|&[a-zA-Z]{2,8};|&#\d{1,6};|https?://\S+|www\.\S+")
MARKUP_SHARE = 0.5
# "Wrong script": fewer than half of a side's letters are in the script its language is written in.
SCRIPT_SHARE = 0.5
_LATIN = r"A-Za-z\u00C0-\u024F\u1E00-\u1EFF"
SCRIPTS = {
    "latin": (re.compile(f"[{_LATIN}]"), {"en", "de", "fr", "es", "it", "pt", "nl", "cs", "pl", "ro", "fi", "et", "lv", "lt", "tr", "hu", "sv", "da", "no", "is", "hr", "sl", "sk", "ca"}),
    "cyrillic": (re.compile(r"[\u0400-\u04FF]"), {"ru", "uk", "bg", "sr", "kk"}),
    "greek": (re.compile(r"[\u0370-\u03FF]"), {"el"}),
    "arabic": (re.compile(r"[\u0600-\u06FF]"), {"ar", "fa", "ur"}),
    "han": (re.compile(r"[\u4E00-\u9FFF]"), {"zh"}),
    "devanagari": (re.compile(r"[\u0900-\u097F]"), {"hi", "mr", "ne"}),
}
_LETTER = re.compile(r"[^\W\d_]")

# "Long word": a word of more than MAX_WORD characters (URLs aside, which url_mismatch judges) is a base64 blob, a
# hash or words run together, not language. Mozilla's chain allows 150; German's longest compound of note
# ("Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz") has 63 characters. Scripts written without
# spaces (Chinese, Japanese, Thai) have no words to measure.
MAX_WORD = 70
_URL = re.compile(r"https?://[^\s<>\"']+|www\.[^\s<>\"']+")
_UNSPACED = re.compile(r"[\u0E00-\u0E7F\u3040-\u30FF\u3400-\u4DBF\u4E00-\u9FFF]")
# "Non-alphabetic": fewer than ALPHA_SHARE of a side's characters (spaces aside) are letters: numbers, code, tables.
# Mozilla's alpha_ratio uses 0.5 too; only sides of MIN_ALPHA_CHARS characters or more are judged, so that "1 / 2",
# "404" or "v2.0" pass (a pair of them teaches the model to copy them, which is right).
ALPHA_SHARE = 0.5
MIN_ALPHA_CHARS = 8
# "Number mismatch": the digit runs of the two sides differ as sets ("1,000.5" and "1.000,5" both give 1, 000, 5).
_DIGITS = re.compile(r"\d+")
# "Copy": the target is the source (spaces and punctuation aside), with MIN_COPY_WORDS words or more. Short copies are
# often right: names, "OK", "Status", "PDF" are written the same in both languages. Case counts: "Universally unique
# identifier" -> "Universally Unique Identifier" is German's capitalised nouns, not an untranslated copy.
MIN_COPY_WORDS = 3
_NOT_WORD = re.compile(r"[\W_]+")
# "Wrong language": py3langid (language_id.py) on each side with MIN_LANGUAGE_LETTERS letters or more: the detector's
# likeliest language, the corpus's two languages each LANGUAGE_PRIOR times likelier than any other before the text is
# read (as `nmt serve` detects), is not the side's, with a probability of LANGUAGE_CONFIDENCE or more. Fewer letters
# say too little: "Unschedule" (10) is German to the detector. On the demo corpus's 8,456 sides these settings drop
# 4, and 86% of the lines in another language (studies/cleaning.py).
# The detector reads a side's first LANGUAGE_CHARS characters only: its cost grows with the text, and on the
# Declaration's paragraphs (182 characters on average) 100 are as accurate (99.2%) and 1.7x as fast.
MIN_LANGUAGE_LETTERS = 20
LANGUAGE_PRIOR = 10.0
LANGUAGE_CONFIDENCE = 0.5
LANGUAGE_CHARS = 100


def reservoir_add(sample: list, item: object, seen: int, size: int, rng: random.Random) -> None:
    """Reservoir sampling: `item`, the `seen`-th of its kind (from 1), into `sample` of at most `size`, so that every
    item seen so far is in it with the same chance (the samples of cleaning.jsonl, --clean-report)."""
    if len(sample) < size:
        sample.append(item)
    elif (i := rng.randrange(seen)) < size:
        sample[i] = item


def with_filter(train: dict[str, Any], name: str, dropped: int) -> dict[str, Any]:
    """A split's counts (`filters`, `dropped`, `clean_pairs`) with a filter run after the others, which dropped `dropped`."""
    pairs = train["clean_pairs"]
    return {**train, "filters": [*train["filters"], {"filter": name, "before": pairs, "after": pairs - dropped}],
            "dropped": {**train["dropped"], **({name: dropped} if dropped else {})}, "clean_pairs": pairs - dropped}


def script_of(lang: str) -> re.Pattern[str] | None:
    """The letters of the script `lang` is written in, or None where this filter does not know it."""
    for pattern, langs in SCRIPTS.values():
        if lang in langs:
            return pattern
    return None


def mostly_markup(text: str) -> bool:
    if "<" not in text and "&" not in text and "http" not in text and "www." not in text:
        return False
    covered = sum(len(m) for m in _MARKUP.findall(text))
    return covered > MARKUP_SHARE * len(text.strip())


def wrong_script(text: str, script: re.Pattern[str]) -> bool:
    letters = len(_LETTER.findall(text))
    return letters > 0 and len(script.findall(text)) < SCRIPT_SHARE * letters


def long_word(text: str) -> bool:
    return any(len(word) > MAX_WORD and not _URL.match(word) and not _UNSPACED.search(word) for word in text.split())


def non_alphabetic(text: str) -> bool:
    chars = len(text) - text.count(" ")
    return chars >= MIN_ALPHA_CHARS and len(_LETTER.findall(text)) < ALPHA_SHARE * chars


def urls(text: str) -> set[str]:
    return {url.rstrip(".,;:!?)]}").lower() for url in _URL.findall(text)} if "http" in text or "www." in text else set()


def numbers(text: str) -> set[str]:
    return set(_DIGITS.findall(text))


def bare(text: str) -> str:
    """`text` without its spaces and punctuation: what the copy filters compare."""
    return _NOT_WORD.sub("", text)


def copy(src: str, tgt: str) -> bool:
    if len(src.split()) < MIN_COPY_WORDS:
        return False
    return bare(src) == bare(tgt)


def language_judge(lang: str, other: str) -> Callable[[str], bool] | None:
    """A side's wrong-language test: True when text of language `lang` (the pair's other side `other`) is in another
    language; None where the detector does not know `lang`."""
    expected = language_id.primary(lang)
    if expected not in language_id.languages():
        return None
    likelier = {expected, language_id.primary(other)}
    identifier = language_id.identifier()

    def wrong(text: str) -> bool:
        if len(_LETTER.findall(text)) < MIN_LANGUAGE_LETTERS:
            return False
        text = text[:LANGUAGE_CHARS]
        if identifier.classify(text)[0] == expected:  # the prior only makes `expected` likelier: a quick keep
            return False
        best, p = language_id.posterior(text, likelier, LANGUAGE_PRIOR)[0]
        return best != expected and best != language_id.NO_LANGUAGE and p >= LANGUAGE_CONFIDENCE

    return wrong


class PairJudge:
    """The filters that judge a pair on its own (every one but `duplicate`), in FILTERS' order: what a worker
    process runs. `names`: those switched on."""

    def __init__(self, source_lang: str, target_lang: str, names: list[str]):
        self.names = [name for name in names if name != "duplicate"]
        self.scripts = (script_of(source_lang), script_of(target_lang)) if "script" in names else (None, None)
        self.languages = (language_judge(source_lang, target_lang), language_judge(target_lang, source_lang)) if "wrong_language" in names else (None, None)

    def drops(self, name: str, src: str, tgt: str) -> bool:
        if name == "empty":
            return not src.strip() or not tgt.strip()
        if name == "markup":
            return mostly_markup(src) or mostly_markup(tgt)
        if name == "script":
            return wrong_script(src, self.scripts[0]) or wrong_script(tgt, self.scripts[1])
        if name == "long_word":
            return long_word(src) or long_word(tgt)
        if name == "non_alphabetic":
            return non_alphabetic(src) or non_alphabetic(tgt)
        if name == "url_mismatch":
            return urls(src) != urls(tgt)
        if name == "number_mismatch":
            return numbers(src) != numbers(tgt)
        if name == "copy":
            return copy(src, tgt)
        assert name == "wrong_language", name
        return any(judge is not None and judge(text) for judge, text in zip(self.languages, (src, tgt)))

    def reason(self, src: str, tgt: str) -> str | None:
        """None to keep the pair (as far as these filters go), otherwise the name of the first that drops it."""
        for name in self.names:
            if self.drops(name, src, tgt):
                return name
        return None


_judge: PairJudge | None = None  # a worker process's


def _start_worker(source_lang: str, target_lang: str, names: list[str]) -> None:
    global _judge
    _judge = PairJudge(source_lang, target_lang, names)
    exit_with_parent()


def _judge_slice(pairs: list[tuple[str, str]]) -> list[str | None]:
    return [_judge.reason(s, t) for s, t in pairs]


class TextFilter:
    """The text-level filters of one split, in FILTERS' order, each counting what it drops.

    `empty` (a side with nothing but white space) always applies; `switches` turns the others on or off (DEFAULTS
    for those it leaves out). `duplicate` drops exact repeats of a (source, target) pair, remembering an 8-byte BLAKE2
    digest per kept pair (about 80 bytes each in a set: ~360 MB for WMT14's 4.5M pairs). `wrong_language` judges the
    sides whose language the detector knows; `languages_unknown` lists the others. `samples` keeps, per filter, the
    first `sample_size` pairs it dropped and then each later one with the chance that keeps the sample uniform
    (reservoir sampling, seeded): what `--clean-report` writes. `keep(batch)` judges a batch in `workers` processes
    (language identification is the slow filter: some 25,000 lines/s a core); the result does not depend on them.
    """

    def __init__(self, source_lang: str, target_lang: str, sample_size: int = 0, seed: int = 1, workers: int = 1, **switches: bool):
        unknown = set(switches) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown filters: {sorted(unknown)}")
        on = {**DEFAULTS, **switches}
        names = [name for name in FILTERS if name == "empty" or on[name]]
        if on["script"] and None in (script_of(source_lang), script_of(target_lang)):
            unknown_lang = source_lang if script_of(source_lang) is None else target_lang
            raise NmtError(f"the script filter does not know which script {unknown_lang!r} is written in", "leave out --drop-wrong-script")
        self.judge = PairJudge(source_lang, target_lang, names)
        self.languages_unknown = [lang for lang, judge in zip((source_lang, target_lang), self.judge.languages)
                                  if on["wrong_language"] and judge is None]
        if on["wrong_language"] and self.judge.languages == (None, None):
            names.remove("wrong_language")
            self.judge.names.remove("wrong_language")
        self.names = names
        self.before = dict.fromkeys(self.names, 0)
        self.dropped = dict.fromkeys(self.names, 0)
        self._seen: set[bytes] | None = set() if on["duplicate"] else None
        self.sample_size = sample_size
        self.samples: dict[str, list[tuple[str, str]]] = {name: [] for name in self.names}
        self._random = random.Random(seed)
        self._languages = (source_lang, target_lang)
        self.workers = workers
        self._pool: ProcessPoolExecutor | None = None

    def reason(self, src: str, tgt: str) -> str | None:
        """None to keep the pair, otherwise the name of the first filter that drops it."""
        return self._count(src, tgt, self.judge.reason(src, tgt))

    def keep(self, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The pairs of a batch that every filter keeps, in order."""
        reasons = self._judge_all(pairs)
        return [(s, t) for (s, t), r in zip(pairs, reasons) if self._count(s, t, r) is None]

    def _judge_all(self, pairs: list[tuple[str, str]]) -> list[str | None]:
        if self.workers <= 1 or len(pairs) < 2_000:
            return [self.judge.reason(s, t) for s, t in pairs]
        if self._pool is None:
            # spawn, as the encoder's pool: a clean interpreter per worker, safe whatever threads the caller runs.
            self._pool = ProcessPoolExecutor(self.workers, multiprocessing.get_context("spawn"), initializer=_start_worker,
                                             initargs=(*self._languages, self.judge.names))
        step = -(-len(pairs) // (2 * self.workers))
        return [r for part in self._pool.map(_judge_slice, [pairs[i:i + step] for i in range(0, len(pairs), step)]) for r in part]

    def _count(self, src: str, tgt: str, reason: str | None) -> str | None:
        """Count a pair's way through the filters (the judges' `reason`, then duplicates); its reason to drop."""
        if reason is None and self._seen is not None:
            digest = hashlib.blake2b(f"{src}\t{tgt}".encode(), digest_size=8).digest()
            if digest in self._seen:
                reason = "duplicate"
            else:
                self._seen.add(digest)
        for name in self.names:
            self.before[name] += 1
            if name == reason:
                self.dropped[name] += 1
                self._sample(name, src, tgt)
                return name
        return None

    def _sample(self, name: str, src: str, tgt: str) -> None:
        if not self.sample_size:
            return
        reservoir_add(self.samples[name], (src, tgt), self.dropped[name], self.sample_size, self._random)

    def counts(self) -> list[dict[str, int | str]]:
        return [{"filter": n, "before": self.before[n], "after": self.before[n] - self.dropped[n]} for n in self.names]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self) -> TextFilter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
