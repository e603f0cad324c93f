"""`--engine ctranslate2`: the engine contract (inference/engine.py) on a CTranslate2 model, text out.

The model dir is what `nmt export ctranslate2` writes. Tokenization, the EOS on the source, the
suppressed pad/BOS tokens, the a*|x|+b length limit, target prefixes (CTranslate2's `target_prefix`),
one output line per input line in input order: all as in the native engine, so greedy output is token
for token the same.

`--sampling` maps onto CTranslate2's own sampling (sampling_topk, sampling_topp, sampling_temperature,
beam 1), with its random generator seeded once with --seed: the same input and batching give the same
samples, but not the native engine's (CTranslate2 draws its own random numbers, in batch order).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from nmtcli.errors import NmtError
from nmtcli.inference.alignment import COVERING
from nmtcli.inference.engine import Engine
from nmtcli.inference.results import Translation
from nmtcli.inference.tokenizer import load_tokenizer
from nmtcli.inference.sampling import check_sampling, parse_sampling
from nmtcli.inference.batches import BatchBudget, Warn, length_sorted_batches
from nmtcli.inference.settings import SearchSettings, batching_for, check_coverage
from nmtcli.inference.translator import encode_lines, encode_prefixes, numbered_windows, one_line
from nmtcli.interop.ctranslate2 import NMT_FILE, require_ctranslate2
from nmtcli.threads import default_threads


class CTranslate2Translator(Engine):
    """The engine of a CTranslate2 model dir: translations' text only (no scores, n-best lists or alignments)."""

    name = "ctranslate2"

    def __init__(self, model_dir: Path, device: str = "auto", settings: SearchSettings = SearchSettings(), threads: int = 0, warn: Warn | None = None):
        self._ctranslate2 = ctranslate2 = require_ctranslate2()
        model_dir = Path(model_dir)
        if not (model_dir / NMT_FILE).is_file():
            raise NmtError(f"{model_dir} is not a CTranslate2 model written by nmt (no {NMT_FILE})", f"run `nmt export ctranslate2 MODEL_DIR {model_dir}` first")
        self._search(settings)  # what it cannot do is refused before the model is loaded
        self.values = self.config_values = json.loads((model_dir / NMT_FILE).read_text(encoding="utf-8"))
        self.tokenizer = load_tokenizer(model_dir, self.values)
        m = self.values["model"]
        self.pad_id, self.bos_id, self.eos_id = m["pad_id"], m["bos_id"], m["eos_id"]
        self.max_positions = m["max_positions"]
        self.pieces = self.tokenizer.pieces()
        self.pieces += [f"<unused{i}>" for i in range(len(self.pieces), m["vocab_size"])]
        self.piece_id = {p: i for i, p in enumerate(self.pieces)}
        if device == "auto":
            device = "cuda" if ctranslate2.get_cuda_device_count() > 0 else "cpu"
        self.device = device
        device, _, index = device.partition(":")
        # CTranslate2's own default is 4 threads whatever the CPUs: nmt's (nmtcli/threads.py) instead.
        self._threads = (threads or default_threads()) if device == "cpu" else None
        self.translator = ctranslate2.Translator(str(model_dir), device=device, device_index=int(index or 0), intra_threads=self._threads or 0)
        self.settings = settings
        batch_tokens, self.window = batching_for(settings, device)
        self.budget = BatchBudget(batch_tokens)
        self.warn = warn or (lambda message: None)

    @property
    def cpu_threads(self) -> int | None:
        return self._threads

    def close(self) -> None:
        self.translator = None  # CTranslate2 frees the model's memory when its Translator goes

    def _search(self, settings: SearchSettings) -> dict:
        """CTranslate2's arguments for `settings`; NmtError for what it does not do, naming the engine that does."""
        check_sampling(settings.sampling, settings.temperature, settings.seed)
        check_coverage(settings, "--coverage-penalty")
        if settings.brevity_penalty:  # None: the model's own, which an export does not carry
            raise NmtError("CTranslate2 has no brevity penalty", "use the native engine for --brevity-penalty")
        if settings.sampling is None and settings.beam > 1 and settings.alpha > 0 and settings.length_penalty != "power":
            raise NmtError("CTranslate2 implements the power length penalty |Y|^alpha only", "pass --length-penalty power, or --beam 1")
        if settings.nbest != 1:
            raise NmtError("--engine ctranslate2 returns the best translation only", "use the native engine for n-best lists")
        if settings.alignment == COVERING:
            raise NmtError("HTML is placed by word alignments, which --engine ctranslate2 does not give", "use the native engine for HTML")
        if settings.alignment is not None:
            raise NmtError("--engine ctranslate2 gives no word alignments", "use the native engine for --alignment")
        if settings.glossary is not None:  # terms are placed by the attention of a forced pass (inference/terms.py)
            raise NmtError("--engine ctranslate2 cannot place a glossary's terms (they are placed by the native model's attention)",
                           "use the native engine for --glossary")
        if settings.sampling is None:
            # CTranslate2's own variant of GNMT's coverage penalty (one attention head, on the hypotheses finished when its
            # search stops; docs/translating.md), not nmt's rerank of the whole beam
            return {"beam_size": settings.beam, "length_penalty": settings.alpha if settings.beam > 1 else 0.0,
                    "coverage_penalty": settings.coverage_penalty}
        sampling = parse_sampling(settings.sampling)
        # CTranslate2: sampling_topk 0 is the whole vocabulary, sampling_topp 1 no nucleus.
        return {"beam_size": 1, "sampling_topk": sampling.k if sampling.kind == "topk" else 0,
                "sampling_topp": sampling.p if sampling.kind == "topp" else 1.0, "sampling_temperature": settings.temperature}

    def translate(self, lines: Iterable[str], prefixes: Iterable[str] | None = None) -> Iterator[str]:
        """The best translation of each line, in order."""
        for hyps in self.translate_nbest(lines, prefixes):
            yield hyps[0].text if hyps else ""

    def translate_nbest(self, lines: Iterable[str], prefixes: Iterable[str] | None = None, settings: SearchSettings | None = None,
                        covering: Callable[[int], bool] | None = None) -> Iterator[list[Translation]]:
        """Each line's translation as a one-item list ([] for an empty line); `covering` is not asked: protected spans
        between words are placed by position (CTranslate2 gives no alignment)."""
        settings = settings or self.settings
        search = self._search(settings)
        if settings.sampling is not None:  # its own generator, seeded once a call: the same input and batching, the same samples
            self._ctranslate2.set_random_seed(settings.seed)
        for chunk, chunk_prefixes in numbered_windows(lines, self.window, prefixes):
            yield from self._translate_chunk(chunk, settings, search, chunk_prefixes)

    def translate_lines(self, lines: Sequence[str], settings: SearchSettings | None = None, prefixes: Sequence[str] | None = None,
                        numbers: Sequence[int] | None = None, covering: Sequence[bool] | None = None) -> list[list[Translation]]:
        settings = settings or self.settings
        search = self._search(settings)
        if settings.sampling is not None:
            self._ctranslate2.set_random_seed(settings.seed)
        return self._translate_chunk(list(zip(numbers or range(1, len(lines) + 1), lines)), settings, search,
                                     None if prefixes is None else list(prefixes))

    def _translate_chunk(self, chunk: list[tuple[int, str]], s: SearchSettings, search: dict,
                         prefixes: list[str] | None = None) -> list[list[Translation]]:
        results: list[list[Translation]] = [[] for _ in chunk]  # empty or blank lines have no translations
        limit = self.max_positions - 1

        def truncated(index: int, tokens: int) -> None:
            self.warn(f"line {chunk[index][0]}: {tokens} tokens, truncated to the model's {limit}")

        sentences = encode_lines(self.tokenizer.encode, [line for _, line in chunk], limit, truncated)
        forced = None if prefixes is None else encode_prefixes(self.tokenizer, [n for n, _ in chunk], prefixes, limit - 1, self.warn)
        suppress = [[self.pieces[i]] for i in dict.fromkeys((self.pad_id, self.bos_id))]
        for batch in length_sorted_batches(sentences, BatchBudget(self.budget.tokens), forced):
            # Output tokens before EOS are at most a*|x| + b (sec. 6.1), capped by the position table.
            limits = [min(int(s.max_len_a * len(ids) + s.max_len_b), self.max_positions - 2) for _, ids in batch]
            extra = {}
            if forced is not None:  # as prefixes.prefix_tensors: a prefix is never cut; an empty source outputs its prefix
                limits = [len(forced[pos]) if not ids and forced[pos] else max(cap, len(forced[pos])) for (pos, ids), cap in zip(batch, limits)]
                extra["target_prefix"] = [[self.pieces[i] for i in forced[pos]] for pos, _ in batch]
            out = self.translator.translate_batch(
                [[self.pieces[i] for i in ids] + [self.pieces[self.eos_id]] for _, ids in batch],
                **search,
                max_decoding_length=max(limits) + 1,
                suppress_sequences=suppress,
                return_end_token=False,
                **extra,
            )
            for (pos, _), result, cap in zip(batch, out, limits):
                ids = [self.piece_id[p] for p in result.hypotheses[0]][:cap]
                results[pos] = [Translation(one_line(self.tokenizer.decode(ids)), None, None)]
        return results
