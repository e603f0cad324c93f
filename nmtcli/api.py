"""The Python API: `from nmtcli import Translator` (docs/python-api.md).

    translator = Translator.load("models/tiny-demo")          # a model dir, or a Hub id OWNER/NAME, as `-m`
    [t] = translator.translate(["Insert image"])
    t.text, t.score, t.confidence                             # "Bild einfügen", -0.31, 0.83

The same calls `nmt translate` and `nmt serve` make: the search settings are built and checked here, the
texts take the one document path (documents/pipeline.py: split, protected spans, joined) and their lines go
through an engine's windows and batches (inference/engine.py: the native engine, inference/translator.py, or
CTranslate2's), so a program gets what the command line prints. Importing this module loads no torch; `Translator.load` does. The API never
prints: the engine's warnings (a line truncated to the model's length, a GPU batch halved) go to the
`nmtcli` logger. Mistakes a caller can make raise `NmtError` with the message `nmt` would print, or
TypeError for a wrong type.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Literal

from nmtcli.errors import NmtError
from nmtcli.inference.glossary import Glossary, glossary_of
from nmtcli.inference.results import Scored, Translation

if TYPE_CHECKING:
    from nmtcli.documents.languages import Detector
    from nmtcli.documents.pipeline import Translated
    from nmtcli.documents.protect import Protection
    from nmtcli.inference.engine import Engine
    from nmtcli.inference.settings import SearchSettings

log = logging.getLogger("nmtcli")

Alignment = Literal["words", "pieces"]
GlossaryLike = Mapping[str, str | list[str]] | Glossary
EngineName = Literal["native", "ctranslate2"]


class Translator:
    """A model loaded once, ready to translate, score and sample texts. Make one with `Translator.load`."""

    def __init__(self, engine: Engine, name: str):
        self._engine = engine
        self.name = name  # the model as it was named to load()
        self._detector: Detector | None = None

    @classmethod
    def load(cls, model: str | os.PathLike[str], *, device: str = "auto", precision: str | None = None,
             revision: str | None = None, source_lang: str | None = None, target_lang: str | None = None,
             engine: EngineName = "native", dtype: str | None = None, shortlist: bool = True) -> Translator:
        """The model of a model dir (written by `nmt average`, `nmt import`, `nmt pull`) or a Hub id OWNER/NAME
        (downloaded once into the Hub cache, at `revision`), as `nmt translate -m` takes it, on `device` (auto,
        cpu, cuda, cuda:N) computing in `precision` (fp32, the default; int8 on a CPU; bf16 or fp16 on a GPU;
        `dtype` is its earlier name, still taken with a DeprecationWarning).
        A multilingual model (M2M-100, NLLB-200) translates into `target_lang` (its code, or ISO 639-1/-3: "de"),
        from `source_lang` (default English). `engine`: "native" (nmt's PyTorch search), or "ctranslate2" for a
        dir written by `nmt export ctranslate2` (the ctranslate2 extra; the text of the best translation only: the
        power length penalty, no n-best lists, alignments, scores, HTML or confidence). `shortlist`: where the model dir has
        a lexical shortlist (`nmt shortlist`), beam and greedy search score only the pieces it allows (False: the whole
        vocabulary; `nmt translate --no-shortlist`)."""
        if dtype is not None:
            warnings.warn("Translator.load(dtype=...) is now precision=...", DeprecationWarning, stacklevel=2)
            precision = precision or dtype
        from nmtcli.inference.settings import SearchSettings

        settings = None if shortlist or engine != "native" else SearchSettings(shortlist=False)
        return cls(open_engine(model, device=device, precision=precision, revision=revision, languages=(source_lang, target_lang),
                               engine=engine, settings=settings), str(model))

    # --- what the model is ------------------------------------------------------------------------

    @property
    def source_language(self) -> str | None:
        """The model's source language code (config.json's "languages"; a multilingual model's: the one chosen), or None
        where it names none."""
        if getattr(self._engine, "languages", None):
            return self._engine.languages[0]
        return (self._engine.config_values.get("languages") or {}).get("source") or None

    @property
    def target_language(self) -> str | None:
        """The model's target language code (a multilingual model's: the one chosen), or None where it names none."""
        if getattr(self._engine, "languages", None):
            return self._engine.languages[1]
        return (self._engine.config_values.get("languages") or {}).get("target") or None

    @property
    def device(self) -> str:
        """The device the model is on ("cpu", "cuda:0")."""
        return str(self._engine.device)

    # --- translating ------------------------------------------------------------------------------

    def translate(self, texts: Iterable[str], *, beam: int = 4, alpha: float = 0.6, nbest: int = 1,
                  prefix: str | Iterable[str] | None = None, glossary: GlossaryLike | None = None,
                  split_sentences: bool = False, alignment: Alignment | None = None, batch_tokens: int | None = None,
                  length_penalty: str = "gnmt", max_len_a: float = 1.0, max_len_b: int = 50, protect: bool = True,
                  protect_regex: Iterable[str] = (), coverage_penalty: float = 0.0,
                  brevity_penalty: float | None = None) -> list[Translation]:
        """Each text's translation, in order: beam search of `beam` (1: greedy) with the GNMT length penalty
        `alpha` (sec. 6.1's settings by default). `texts`: a list, or any iterable (read a window at a time).
        `nbest`: each Translation's `nbest` holds that many, best first. `prefix`: a target prefix every
        translation starts with, one per text (an iterable) or the same for all (a str). `split_sentences`: each
        text is a paragraph, cut into sentences translated one by one and joined with its own whitespace (each
        sentence's translation in `sentences`). `alignment`: each translation's word ("words") or sentencepiece
        ("pieces") alignment to its text, Pharaoh "i-j". `batch_tokens`: padded source tokens per batch from this
        call on. `length_penalty` "power" is |Y|^alpha; the output has at most max_len_a * |x| + max_len_b tokens.
        `protect`: placeholders ({{name}}, {0}, %s, %(name)s, ${var}, <x/>), URLs and e-mail addresses come out byte for
        byte, once each, placed by the word alignment (docs/translating.md); `protect_regex`: more spans to keep, as
        regular expressions (`nmt translate --protect`). A text with such spans carries, where `alignment` is asked for,
        the alignment of the words the model read and wrote (its spans taken out). `glossary`: source term -> target
        term (alternatives as a list, or separated by |), or a `Glossary` (`read_glossary(path)`): each occurrence of a
        source term gets its target term in place of the words the model translated it with (docs/translating.md).
        `coverage_penalty`: GNMT's beta (0: off): the beam's hypotheses reranked by how much of the text they attended
        to, longer and fuller translations from a model that ends sentences early (docs/translating.md).
        `brevity_penalty`: the weight of the penalty a translation shorter than the length its text predicts pays
        (None: the model's own, which `nmt average` calibrates on the validation split; 0: off, the paper's search).
        An empty list gives an empty list; an empty or blank text an empty Translation (score and confidence None)."""
        return list(self.translate_stream(texts, beam=beam, alpha=alpha, nbest=nbest, prefix=prefix, glossary=glossary,
                                          split_sentences=split_sentences, alignment=alignment, batch_tokens=batch_tokens,
                                          length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b,
                                          protect=protect, protect_regex=protect_regex, coverage_penalty=coverage_penalty,
                                          brevity_penalty=brevity_penalty))

    def translate_stream(self, texts: Iterable[str], *, beam: int = 4, alpha: float = 0.6, nbest: int = 1,
                         prefix: str | Iterable[str] | None = None, glossary: GlossaryLike | None = None,
                         split_sentences: bool = False, alignment: Alignment | None = None, batch_tokens: int | None = None,
                         length_penalty: str = "gnmt", max_len_a: float = 1.0, max_len_b: int = 50, protect: bool = True,
                         protect_regex: Iterable[str] = (), coverage_penalty: float = 0.0,
                         brevity_penalty: float | None = None) -> Iterator[Translation]:
        """`translate`, as an iterator: each window's translations are given as soon as it is done, so an endless
        input (a file, a queue) is translated in bounded memory. `nmt translate` writes its output from here."""
        settings = self._settings(beam=beam, alpha=alpha, nbest=nbest, alignment=alignment, batch_tokens=batch_tokens,
                                  length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b,
                                  glossary=_glossary(glossary), coverage_penalty=coverage_penalty,
                                  brevity_penalty=brevity_penalty)
        if split_sentences and prefix is not None:
            raise NmtError("split_sentences does not go with prefix", "a prefix belongs to a whole text: split the texts first",
                           exit_code=2)
        return self._stream(checked(texts, "texts"), settings, prefix, split_sentences, protection(protect, protect_regex))

    def sample(self, texts: Iterable[str], *, samples: int = 1, sampling: str = "full", temperature: float = 1.0,
               seed: int = 1, max_len_a: float = 1.0, max_len_b: int = 50) -> list[Translation]:
        """Translations drawn from the model instead of searched, for back-translation (`nmt translate --sampling`):
        `samples` a text (in each Translation's `nbest`, in the order drawn), from the whole distribution ("full"),
        the K likeliest tokens ("topk:K") or the fewest whose probability reaches P ("topp:P"), of softmax(logits /
        temperature). A text's samples are a function of (seed, its number in `texts`, the sample): the same
        whatever the batching. Each score and log_prob is the model's log-probability of the sample."""
        settings = self._settings(beam=1, nbest=samples, sampling=sampling, temperature=temperature, seed=seed,
                                  max_len_a=max_len_a, max_len_b=max_len_b, coverage_penalty=0.0)
        return list(self._stream(checked(texts, "texts"), settings, None, False))

    def score(self, sources: Iterable[str], targets: Iterable[str], *, alpha: float = 0.6, length_penalty: str = "gnmt",
              alignment: Alignment | None = None, brevity_penalty: float | None = None) -> list[Scored]:
        """Forced decoding (`nmt translate --score-only`): for each (source, target) pair the model's log-probability of
        that target, token by token (`token_log_probs`, the last for EOS), its score as the search would rank it, and
        its confidence; with `alignment` its alignment to the source; `brevity_penalty` as translate's. The two must have
        as many items."""
        settings = self._settings(alpha=alpha, length_penalty=length_penalty, brevity_penalty=brevity_penalty)
        if alignment not in (None, "words", "pieces"):
            raise NmtError(f"unknown alignment {alignment!r}", "choose words or pieces", exit_code=2)
        return list(self._score_with(settings, sources, targets, alignment))

    def translate_html(self, document: str, *, beam: int = 4, alpha: float = 0.6, length_penalty: str = "gnmt",
                       max_len_a: float = 1.0, max_len_b: int = 50, protect: bool = True, protect_regex: Iterable[str] = (),
                       glossary: GlossaryLike | None = None, coverage_penalty: float = 0.0, brevity_penalty: float | None = None) -> str:
        """An HTML document translated (`nmt translate --format html`): every tag, attribute, comment and
        <script>/<style>/<code>/<pre> kept byte for byte, each block's text translated a sentence at a time, inline
        tags placed by the word alignment; protected spans of its text (`protect`, `protect_regex`: as translate's)
        kept as they are written and placed as void elements are; `glossary`, `coverage_penalty` and `brevity_penalty` as
        translate's."""
        if not isinstance(document, str):
            raise TypeError(f"document must be a str, not {type(document).__name__}")
        settings = self._settings(beam=beam, alpha=alpha, length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b,
                                  glossary=_glossary(glossary), coverage_penalty=coverage_penalty,
                                  brevity_penalty=brevity_penalty)
        return self._html_with(settings, document, protection(protect, protect_regex))[0]

    def detect_language(self, text: str) -> list[tuple[str, float]]:
        """The likeliest languages of `text` as (code, confidence 0-100), best first, the model's own two a priori
        likelier (as `nmt serve`'s source "auto"); [] for text without letters."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        if self._detector is None:
            from nmtcli.documents.languages import Detector
            self._detector = Detector([code for code in (self.source_language, self.target_language) if code])
        return [(guess.language, guess.confidence) for guess in self._detector.detect(text)]

    # --- for nmt's own commands: the same calls with the search settings already built -----------------
    # `nmt translate` and `nmt serve` check their flags and request fields themselves (their own messages), then
    # translate through these, the code behind the public methods above. Not part of the API: they may change.

    def close(self) -> None:
        """Let go of the model: its weights, CUDA graphs and cached GPU memory, at once rather than when the Translator is
        garbage-collected (a server loading models in turn, a notebook). A closed Translator raises NmtError if used;
        closing twice does nothing. `with Translator.load(...) as translator:` closes it at the block's end."""
        if not isinstance(self._engine, _Closed):
            self._engine.close()
            self._engine = _Closed()

    def __enter__(self) -> Translator:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def engine(self) -> Engine:
        """The engine underneath (inference/engine.py): the native one's windows, batches, devices and graphs, or CTranslate2's."""
        return self._engine

    def _translate_with(self, settings: SearchSettings, texts: Iterable[str], prefixes: Iterable[str] | None = None,
                       split_sentences: bool = False, protection: Protection | None = None,
                       numbers: dict[int, tuple[int, int]] | None = None) -> Iterator[Translated]:
        """`translate_stream` with `settings` as they are (sampling included), one prefix per text, `protection` built;
        each text with its translation (documents/pipeline.py: a split text's sentences' offsets, for its record).
        `numbers`: as pipeline.translate_texts's."""
        return self._documents(checked(texts, "texts"), settings, prefixes, split_sentences, protection, numbers)

    def _translate_lines(self, settings: SearchSettings, lines: list[str], prefixes: list[str] | None = None,
                        numbers: list[int] | None = None, protection: Protection | None = None) -> list[Translation]:
        """`lines` translated as one unit (sorted and batched together: `nmt serve`'s batch of concurrent requests);
        `numbers` key each line's samples (default 1, 2, ...); `protection`: the spans kept (documents/protect.py)."""
        from nmtcli.documents.pipeline import translate_texts

        def at_once(read: Iterator[str], covering) -> list[list[Translation]]:
            read = list(read)  # every line (protection taken out) before the one call
            wanted = None if covering is None else [covering(n) for n in range(1, len(read) + 1)]
            return self._engine.translate_lines(read, settings, prefixes, numbers, wanted)

        return [t.translation for t in translate_texts(lines, at_once, protection=protection, keep_alignment=settings.alignment is not None)]

    def _score_with(self, settings: SearchSettings, sources: Iterable[str], targets: Iterable[str],
                   alignment: Alignment | None = None) -> Iterator[Scored]:
        """`score` with `settings` as they are, as an iterator (a window at a time)."""
        return self._engine.score(checked(sources, "sources"), checked(targets, "targets"), alignment, settings)

    def _html_with(self, settings: SearchSettings, document: str, protection: Protection | None = None) -> tuple[str, int]:
        """`translate_html` with `settings` as they are (their alignment made COVERING); also the document's sentences."""
        from nmtcli.documents.markup import parse
        from nmtcli.documents.pipeline import Pages
        from nmtcli.inference.alignment import COVERING

        pages = Pages([parse(document, self._split_language(), protect=protection)])
        settings = dataclasses.replace(settings, alignment=COVERING)
        results = self._engine.translate_lines(pages.sentences, settings) if pages.sentences else []
        return pages.rendered(results)[0][0], len(pages.sentences)

    # --- what the calls share -----------------------------------------------------------------------

    def _settings(self, **changes) -> SearchSettings:
        """The engine's settings with this call's `changes`, checked as the command line checks its flags."""
        from nmtcli.inference.penalties import LENGTH_PENALTIES
        from nmtcli.inference.settings import check_search

        for name in ("beam", "nbest", "max_len_b", "batch_tokens"):
            value = changes.get(name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "max_len_b" else 1)):
                raise NmtError(f"{name} must be an integer of at least {0 if name == 'max_len_b' else 1}, not {value!r}", exit_code=2)
        if changes.get("length_penalty", "gnmt") not in LENGTH_PENALTIES:
            raise NmtError(f"unknown length_penalty {changes['length_penalty']!r}", f"choose one of {', '.join(LENGTH_PENALTIES)}", exit_code=2)
        coverage = changes.get("coverage_penalty", 0.0)
        if isinstance(coverage, bool) or not isinstance(coverage, (int, float)):
            raise NmtError(f"coverage_penalty must be a number, not {coverage!r}", "give 0 (off) or more", exit_code=2)
        brevity = changes.get("brevity_penalty")
        if brevity is not None and (isinstance(brevity, bool) or not isinstance(brevity, (int, float))):
            raise NmtError(f"brevity_penalty must be a number or None, not {brevity!r}", "give 0 (off) or more, or None for the model's own",
                           exit_code=2)
        if changes.get("alignment") not in (None, "words", "pieces"):
            raise NmtError(f"unknown alignment {changes['alignment']!r}", "choose words or pieces", exit_code=2)
        if brevity is None:  # the engine's own: the model's, or what the settings it was loaded with say
            changes.pop("brevity_penalty", None)
        settings = dataclasses.replace(self._engine.settings, **{"sampling": None, "alignment": None, **changes})
        check_search(settings)
        if changes.get("batch_tokens") is not None:  # the engine's own budget: changed only once the call's settings hold
            self._engine.budget.tokens = changes["batch_tokens"]
        return settings

    def _stream(self, texts: Iterator[str], settings: SearchSettings, prefix: str | Iterable[str] | None,
                split_sentences: bool, protection: Protection | None = None) -> Iterator[Translation]:
        return (t.translation for t in self._documents(texts, settings, prefix, split_sentences, protection))

    def _documents(self, texts: Iterator[str], settings: SearchSettings, prefix: str | Iterable[str] | None,
                   split_sentences: bool, protection: Protection | None = None,
                   numbers: dict[int, tuple[int, int]] | None = None) -> Iterator[Translated]:
        """The document path (documents/pipeline.py) over the engine's translate_nbest, a target prefix read beside each text."""
        from nmtcli.documents.pipeline import translate_texts

        prefixes = None
        if isinstance(prefix, str):
            texts, prefixes = _each_with(texts, prefix)
        elif prefix is not None:
            prefixes = checked(prefix, "prefix")

        def nbest(lines: Iterator[str], covering) -> Iterable[list[Translation]]:
            return self._engine.translate_nbest(lines, prefixes, settings, covering)

        language = self._split_language() if split_sentences else None
        return translate_texts(texts, nbest, language=language, protection=protection, keep_alignment=settings.alignment is not None,
                               numbers=numbers)

    def _split_language(self) -> str:
        """The language whose rules cut a text into sentences: the model's source language, else English's (a warning)."""
        from nmtcli.documents.sentences import DEFAULT_LANGUAGE

        if not self.source_language:
            self._engine.warn(f"the model's config.json names no source language: sentences are split by the rules for {DEFAULT_LANGUAGE!r}")
        if getattr(self._engine, "languages", None):  # a multilingual model's code (eng_Latn): the rules know en
            from nmtcli.inference.language_codes import iso_639_1

            return iso_639_1(self._engine.languages[0])
        return self.source_language or DEFAULT_LANGUAGE


def protection(protect: bool = True, protect_regex: Iterable[str] = (), flag: str = "protect_regex") -> Protection | None:
    """What a call protects (documents/protect.py): the built-in kinds unless `protect` is False, and the regexes."""
    if not isinstance(protect, bool):
        raise TypeError(f"protect must be a bool, not {type(protect).__name__}")
    if isinstance(protect_regex, (str, bytes)):
        raise TypeError("protect_regex must be a list (or other iterable) of str, not a single str: wrap it in a list")
    from nmtcli.documents.protect import Protection

    return Protection.of(protect, list(protect_regex), flag)


def open_engine(model: str | os.PathLike[str], *, device: str = "auto", precision: str | None = None, revision: str | None = None,
                settings: SearchSettings | None = None, warn: Callable[[str], None] | None = None,
                languages: tuple[str | None, str | None] = (None, None), engine: EngineName = "native", threads: int | None = None) -> Engine:
    """The engine of a model dir or Hub id on a device: what `Translator.load`, `nmt translate` and `nmt serve` load a
    model with. `settings`: the defaults of every call (and the window and batch sizes); `warn`: where the engine's
    warnings go (default: the `nmtcli` logger). `languages`: (source, target) of a multilingual model. `engine`:
    "native", or "ctranslate2" for a dir `nmt export ctranslate2` wrote (`threads`: its CPU threads; 0 or None: nmt's
    default; the native engine's are PyTorch's, torch.set_num_threads)."""
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a model dir or a Hub id (str or path), not {type(model).__name__}")
    from nmtcli.inference.engine import ENGINES

    if engine not in ENGINES:
        raise NmtError(f"unknown engine {engine!r}", f"choose {' or '.join(ENGINES)}", exit_code=2)
    from nmtcli.inference.settings import SearchSettings

    if engine == "ctranslate2":
        from pathlib import Path

        from nmtcli.interop.ctranslate2_translator import CTranslate2Translator

        if languages != (None, None):
            raise NmtError("source_lang/target_lang (--source-lang/--target-lang) work with the native engine",
                           "drop them with the ctranslate2 engine", exit_code=2)
        if revision is not None:
            raise NmtError("revision (--revision) is for Hub ids", "a CTranslate2 model is a local dir written by `nmt export ctranslate2`",
                           exit_code=2)
        if precision not in (None, "fp32"):
            raise NmtError(f"precision {precision} (--precision) is the native engine's", "a CTranslate2 model computes in the type it was exported in "
                           "(`nmt export ctranslate2 --quantization`)", exit_code=2)
        # A CTranslate2 dir is what `nmt export ctranslate2` wrote: never a Hub id. Its search takes the power length penalty.
        return CTranslate2Translator(Path(model), str(device), settings or SearchSettings(length_penalty="power"), threads or 0,
                                     warn=warn or log.warning)
    from nmtcli import hub
    from nmtcli.device import resolve_device
    from nmtcli.inference.translator import Translator as Native

    path = hub.resolve_model(model, revision)
    return Native(path, resolve_device(str(device)), settings or SearchSettings(), precision=precision or "fp32", warn=warn or log.warning,
                  languages=languages)


class _Closed:
    """What a closed Translator holds instead of its engine: every use is an NmtError."""

    def __getattr__(self, name: str):
        raise NmtError("this Translator is closed", "load the model again with Translator.load")


def _glossary(glossary: GlossaryLike | None) -> Glossary | None:
    """The `glossary=` argument as a Glossary; TypeError for one of another type, or a term that is not a str (a
    mistake in the program: the API's rule), NmtError for a bad term (an empty one, a line break in one)."""
    if glossary is None or isinstance(glossary, Glossary):
        return glossary
    if not isinstance(glossary, Mapping):
        raise TypeError(f"glossary must be a mapping of source term -> target term (or a Glossary), not {type(glossary).__name__}")
    for source, target in glossary.items():
        if not isinstance(source, str) or not (isinstance(target, str) or isinstance(target, (list, tuple)) and all(isinstance(t, str) for t in target)):
            raise TypeError(f"glossary[{source!r}]: terms must be str (a target may be a list of str alternatives), "
                            f"not {type(source if not isinstance(source, str) else target).__name__}")
    return glossary_of(glossary)


def checked(items: Iterable[str], name: str) -> Iterator[str]:
    """The strings of `items`, read one at a time; TypeError naming the index of the first that is not a str (and for
    a str or bytes given whole, which would be read a character at a time)."""
    if isinstance(items, (str, bytes)):
        raise TypeError(f"{name} must be a list (or other iterable) of str, not a single {type(items).__name__}: wrap it in a list")
    if not isinstance(items, Iterable):
        raise TypeError(f"{name} must be a list (or other iterable) of str, not {type(items).__name__}")
    return _checked(items, name)


def _checked(items: Iterable[str], name: str) -> Iterator[str]:
    for index, item in enumerate(items):
        if not isinstance(item, str):
            raise TypeError(f"{name}[{index}] is {'None' if item is None else 'a ' + type(item).__name__}, not a str")
        yield item


def _each_with(texts: Iterator[str], prefix: str) -> tuple[Iterator[str], Iterator[str]]:
    """`texts`, and `prefix` once for each text read so far: the one prefix of every text, as a stream read
    beside them that ends where they do."""
    read = 0

    def counted() -> Iterator[str]:
        nonlocal read
        for text in texts:
            read += 1
            yield text

    def prefixes() -> Iterator[str]:
        given = 0
        while given < read:
            given += 1
            yield prefix

    return counted(), prefixes()
