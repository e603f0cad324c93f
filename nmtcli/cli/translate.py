"""`nmt translate`: text in, translations out, one line for every line, in order."""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, BinaryIO, Optional

import typer

from nmtcli.cli import chunked, options
from nmtcli.cli.common import resolve_model, say, warn
from nmtcli.cli.translate_flags import check_flags
from nmtcli.cli.translate_lines import flagged, read_text_lines, scores, sentence_warn, translations
from nmtcli.bulk import CHUNK_LINES
from nmtcli.inference.glossary import MAX_GLOSSARY

if TYPE_CHECKING:
    from nmtcli.inference.settings import SearchSettings

NAME = "translate"


def command(
    ctx: typer.Context,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model dir, or a Hub id OWNER/NAME (downloaded once into the Hub cache; HF_HUB_OFFLINE=1 uses the cache only). Default: $NMT_MODEL, else the newest under models/.")] = None,
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit of the Hub model given with -m.")] = None,
    input: Annotated[Optional[Path], typer.Option("--input", "-i", help="Input text, one sentence a line. Default: stdin.")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Output file (written atomically). Default: stdout.")] = None,
    beam: Annotated[int, options.beam()] = 4,
    alpha: Annotated[float, options.alpha("; 0 disables it")] = 0.6,
    length_penalty: Annotated[str, options.length_penalty(" (fairseq, CTranslate2)")] = "gnmt",
    coverage_penalty: Annotated[float, options.coverage_penalty()] = 0.0,
    brevity_penalty: Annotated[Optional[float], options.brevity_penalty()] = None,
    shortlist: Annotated[bool, options.shortlist()] = True,
    max_len_a: Annotated[float, options.max_len_a(" (sec. 6.1: 1)")] = 1.0,
    max_len_b: Annotated[int, options.max_len_b(" (sec. 6.1: 50)")] = 50,
    nbest: Annotated[int, typer.Option(help="Translations per line, best first (at most --beam); with --sampling, samples per line in the order drawn. More than 1 needs --output-format json.", min=1)] = 1,
    sampling: Annotated[Optional[str], typer.Option(help="Sample instead of searching, for back-translation: full (the model's whole distribution), topk:K (the K most probable tokens) or topp:P (the fewest most probable tokens whose probability reaches P). score and log_prob are the model's log-probability of the sample (temperature 1, unfiltered).", rich_help_panel="Sampling")] = None,
    temperature: Annotated[Optional[float], typer.Option(help="Sampling: draw from softmax(logits / T), before the top-k or top-p filter. Default: 1.", rich_help_panel="Sampling")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Sampling: a line's samples are a function of (seed, line number, sample): the same whatever the batching. Default: 1.", min=0, rich_help_panel="Sampling")] = None,
    output_format: Annotated[str, typer.Option(help="text: one translation per line; json: one JSON object per line with translation, score, log_prob, tokens and the n-best list.")] = "text",
    batch_tokens: Annotated[Optional[int], options.batch_tokens(also=" (halved automatically if the GPU runs out of memory)")] = None,
    window: Annotated[Optional[int], typer.Option(help="Lines read, sorted by length and translated together; bounds memory on endless input. Default: 1000 on a CPU, 10000 on a GPU.", min=1)] = None,
    device: Annotated[str, options.device()] = "auto",
    precision: Annotated[str, options.precision()] = "fp32",
    threads: Annotated[Optional[int], options.threads("PyTorch's or CTranslate2's")] = None,
    cuda_graphs: Annotated[bool, typer.Option("--cuda-graphs/--no-cuda-graphs", help="On a GPU, replay each beam search step as one CUDA graph (checked against the eager step first; off by itself if they differ).")] = True,
    engine: Annotated[str, typer.Option(help="native: nmt's PyTorch search; ctranslate2: a model dir written by `nmt export ctranslate2` (needs the ctranslate2 extra; an int8 export is the fastest on CPU).")] = "native",
    prefix_file: Annotated[Optional[Path], typer.Option(help="Target prefixes, one a line beside each input line (an empty line: none). Each translation starts with its prefix's target tokens exactly and the search continues from there; the prefix is part of the output, its score and the length limit (a longer prefix is output whole).")] = None,
    alignment: Annotated[Optional[str], typer.Option(help="words or pieces: add each translation's source-target alignment to the JSON records (\"alignment\": \"0-0 1-2 ...\", Pharaoh format over whitespace-separated words or sentencepiece pieces), from the encoder-decoder attention. Needs --output-format json.")] = None,
    forced_decoding: Annotated[bool, typer.Option("--forced-decoding", help="Score given translations instead of searching (forced decoding): one line out per input line and --target-file line; text: the score as the search ranks it (log-probability / length penalty; --alpha 0: the log-probability), json: score, log_prob, per_token, length, tokens, token_log_probs.")] = False,
    target_file: Annotated[Optional[Path], typer.Option(help="The translations --forced-decoding scores, one per input line.")] = None,
    split_sentences: Annotated[bool, typer.Option("--split-sentences", help="Input lines are paragraphs: cut each into sentences (by the rules of the model's source language), translate them one by one, and join their translations with the line's own whitespace; still one output line per input line. --window counts sentences. json: the joined translation, summed score and log_prob, and each sentence's record under \"sentences\".")] = False,
    format: Annotated[str, typer.Option("--format", help="text: one line in, one line out; html: the whole input is one HTML document, written back with every tag, attribute, comment and <script>/<style>/<code>/<pre> kept byte for byte, each block's text translated a sentence at a time and inline tags placed by the word alignment; txt, srt, vtt, po, xliff, md, docx, pptx, odt, odp, epub: a document of that format, read whole and written whole with everything but its text kept (docs/translating.md, \"Documents\"). auto: the format of -i FILE's extension (.srt, .vtt, .po, .pot, .xliff, .xlf, .md, .html, .docx, .pptx, .odt, .odp, .epub), else text.")] = "auto",
    target_lang: Annotated[Optional[str], typer.Option("--target-lang", "-t", help="A multilingual model (M2M-100, NLLB-200): the language to translate into, as the model writes it (deu_Latn, de) or an ISO 639-1/-3 code (de, deu); `nmt info MODEL` lists its languages. Other models: checked against the model's own.")] = None,
    source_lang: Annotated[Optional[str], typer.Option("--source-lang", "-s", help="A multilingual model: the language of the input (as --target-lang). Default: English.")] = None,
    min_confidence: Annotated[Optional[float], typer.Option(help="Flag translations whose confidence (0-1: the mean sentence chrF / 100 that held-out translations so rated reached; docs/python-api.md) is below this: they are still written, json records get \"low_confidence\": true, and stderr counts them.", min=0.0, max=1.0)] = None,
    protect: Annotated[Optional[list[str]], typer.Option("--protect", metavar="REGEX", help="Also keep the spans this regular expression (Python's re) matches byte for byte, once each, placed by the word alignment; repeatable. Built in (unless --no-protect): {{name}}, {0}, %s, %(name)s, ${var}, <x/>-style tags, URLs, e-mail addresses (docs/translating.md).", rich_help_panel="Protected spans")] = None,
    no_protect: Annotated[bool, typer.Option("--no-protect", help="Translate placeholders, URLs, e-mail addresses and tags like any text (the built-in protected kinds off; --protect still applies).", rich_help_panel="Protected spans")] = False,
    glossary: Annotated[Optional[Path], typer.Option(help="Terms to put into the translations: a UTF-8 file of `source TAB target` lines (# comments; target forms as alternatives: Haus|Hauses). Each occurrence of a source term (whole words, or anywhere in scripts without spaces; a lower-case term in any case; the longest match wins) gets its target term in place of the words the model translated it with (docs/translating.md).", rich_help_panel="Glossary")] = None,
    max_glossary: Annotated[int, typer.Option(help="The most entries --glossary may have.", min=1, rich_help_panel="Glossary")] = MAX_GLOSSARY,
    closest_to: Annotated[Optional[Path], typer.Option(help="With --nbest N: write, of each line's N translations, the one of the best sentence chrF against this file's line (its reference): a teacher's translations for distillation (mozilla/translations' extract_best). Text output.", rich_help_panel="Large files")] = None,
    chunk_lines: Annotated[int, typer.Option(help="With -i FILE -o OUT: lines translated per chunk, each written to OUT.parts/ as it finishes; running the same command again resumes from the chunks done (a kill loses one chunk at most).", min=1, rich_help_panel="Large files")] = CHUNK_LINES,
    gpus: Annotated[Optional[int], typer.Option(help="With -i FILE -o OUT: start this many ranks on this node through torchrun (one a GPU; with --device cpu, CPU processes), each translating its share of the chunks; several nodes: run torchrun yourself (docs/translating.md).", rich_help_panel="Large files")] = None,
) -> None:
    """Translate text with beam search: beam 4, length penalty 0.6, at most input length + 50 tokens.

    Reads raw text (stdin by default), writes detokenized translations: exactly one output line per
    input line, in input order. Empty lines stay empty; over-long lines are truncated with a warning.
    With --prefix-file, each translation starts with its line's target prefix (docs/translating.md).
    With --sampling, each line's translation is drawn from the model instead (back-translation).
    With --split-sentences, each line is a paragraph translated sentence by sentence.
    With -i FILE -o OUT, the file is translated in chunks that a second run resumes, on --gpus N ranks if asked.
    """
    started = time.perf_counter()
    from nmtcli.inference.alignment import COVERING
    from nmtcli.inference.settings import SearchSettings

    format, protection, terms = check_flags(
        ctx, input=input, output_format=output_format, nbest=nbest, engine=engine, length_penalty=length_penalty, closest_to=closest_to,
        forced_decoding=forced_decoding, protect=protect, no_protect=no_protect, sampling=sampling, temperature=temperature, seed=seed,
        prefix_file=prefix_file, format=format, alignment=alignment, target_file=target_file, split_sentences=split_sentences,
        min_confidence=min_confidence, glossary=glossary, max_glossary=max_glossary)
    settings = SearchSettings(beam=beam, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b, nbest=nbest,
                              length_penalty=length_penalty, batch_tokens=batch_tokens, window=window, cuda_graphs=cuda_graphs,
                              alignment=COVERING if format == "html" else None if forced_decoding else alignment, glossary=terms,
                              coverage_penalty=coverage_penalty, brevity_penalty=brevity_penalty, shortlist=shortlist)
    if sampling is not None:
        settings = dataclasses.replace(settings, sampling=sampling, temperature=1.0 if temperature is None else temperature,
                                       seed=settings.seed if seed is None else seed)
    chunked.check_paths(output, input, target_file, prefix_file, closest_to)
    in_chunks, world = _in_chunks(input, output, format, split_sentences, sampling, gpus)
    if gpus is not None and world == 1:
        return chunked.launch(gpus, device)
    if in_chunks:
        return chunked.translate_in_chunks(
            input, output, chunk_lines, settings, output_format, forced_decoding, target_file, prefix_file, closest_to, alignment,
            protection, split_sentences, min_confidence, open_translator=lambda device, threads, warn: _translator(
                engine, model, revision, device, precision, threads, output_format, settings, warn, (source_lang, target_lang)),
            device=device, threads=threads, what={"engine": engine, "precision": precision, "glossary": _digest(glossary),
                                                  "languages": [source_lang, target_lang]})
    if format not in ("text", "html"):  # a document: documents/formats/ through the Python API
        from nmtcli.cli.documents import translate_document_file

        return translate_document_file(lambda: _translator(engine, model, revision, device, precision, threads, output_format, settings,
                                                           warn, (source_lang, target_lang)), input, output, format, dict(
            beam=beam, alpha=alpha, length_penalty=length_penalty, max_len_a=max_len_a, max_len_b=max_len_b,
            protect=not no_protect, protect_regex=protect or [], glossary=terms, coverage_penalty=coverage_penalty,
            brevity_penalty=brevity_penalty))
    sentence_numbers: dict[int, tuple[int, int]] = {}  # --split-sentences: a sentence's number -> (its line, its place in it)
    translator = _translator(engine, model, revision, device, precision, threads, output_format, settings,
                             sentence_warn(sentence_numbers) if split_sentences else warn, (source_lang, target_lang))
    if format == "html":
        return _html_file(translator, input, output, settings, protection, started)
    _line_file(translator, settings, input, output, prefix_file, forced_decoding, target_file, closest_to, output_format, alignment,
               protection, split_sentences, sentence_numbers, min_confidence, started)


def _html_file(translator, input: Path | None, output: Path | None, settings: SearchSettings, protection, started: float) -> None:
    """--format html: the input (a file, or stdin) translated as one HTML document, then the count and time on stderr."""
    source = open(input, "rb") if input is not None else sys.stdin.buffer
    count = _translate_html(translator, source, output, settings, protection)
    if input is not None:
        source.close()
    elapsed = time.perf_counter() - started
    say(f"translated {count:,} sentence(s) of HTML in {elapsed:.1f} s{_on_cpu(translator)}")


def _line_file(translator, settings: SearchSettings, input: Path | None, output: Path | None, prefix_file: Path | None,
               forced_decoding: bool, target_file: Path | None, closest_to: Path | None, output_format: str, alignment: str | None,
               protection, split_sentences: bool, sentence_numbers: dict[int, tuple[int, int]], min_confidence: float | None,
               started: float) -> None:
    """Text: each input line (a file, or stdin) translated (or with --forced-decoding, its given translation scored) into
    one output line, then the count, speed and flagged lines on stderr."""
    source = open(input, "rb") if input is not None else sys.stdin.buffer
    lines = read_text_lines(source, str(input) if input is not None else "stdin")
    prefix_source = open(prefix_file, "rb") if prefix_file is not None else None
    prefixes = read_text_lines(prefix_source, str(prefix_file)) if prefix_source is not None else None
    below = [0, 0]  # --min-confidence: lines flagged, lines translated
    if forced_decoding:
        results = scores(translator, settings, lines, target_file, output_format, alignment)
    else:
        references = read_text_lines(open(closest_to, "rb"), str(closest_to)) if closest_to is not None else None
        rated = translations(translator, settings, lines, prefixes, output_format, protection, split_sentences, sentence_numbers,
                             references)
        results = flagged(rated, min_confidence, below)
    try:
        count, first = _write(results, output)
    finally:
        if input is not None:
            source.close()
        if prefix_source is not None:
            prefix_source.close()
    elapsed = time.perf_counter() - started
    timing = f" in {elapsed:.1f} s ({count / elapsed:,.1f} lines/s; the first after {first - started:.1f} s)" if first else ""
    say(f"{'scored' if forced_decoding else 'translated'} {count:,} {'pair' if forced_decoding else 'line'}(s){timing}{_on_cpu(translator)}")
    if min_confidence is not None:
        say(f"{below[0]:,} of {below[1]:,} translated line(s) below --min-confidence {min_confidence:g}")


def _in_chunks(input: Path | None, output: Path | None, format: str, split_sentences: bool, sampling: str | None,
               gpus: int | None) -> tuple[bool, int]:
    """(whether the input goes in chunks, the world size torchrun set): a file into a file goes in chunks; but for
    sentences drawn by sampling, keyed by their number in the whole input. Ranks share chunks only; an output file
    written otherwise must not be another run's (bulk.check_unlocked)."""
    from nmtcli.errors import NmtError

    in_chunks = (output is not None and input is not None and input.is_file() and format == "text"
                 and not (split_sentences and sampling is not None))
    world = chunked.ranks()[1]
    if (gpus is not None or world > 1) and not in_chunks:
        raise NmtError("ranks share the chunks of a file translated into another file", "give -i FILE and -o OUT (a regular file), "
                       "or drop --gpus", exit_code=2)
    if output is not None and not in_chunks:  # (never with --gpus, which needs chunks)
        from nmtcli.bulk import check_unlocked

        check_unlocked(output)
    return in_chunks, world


def _digest(path: Path | None) -> str | None:
    from nmtcli.checksums import file_sha256

    return None if path is None else file_sha256(path)


def _translate_html(translator, source: BinaryIO, output: Path | None, settings: SearchSettings, protection=None) -> int:
    """--format html: the input read whole as one document, translated in one call, written whole; its sentences."""
    from nmtcli.errors import file_system_error
    from nmtcli.files import atomic_path

    raw = source.read()
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        warn("the HTML input holds invalid UTF-8: replaced with U+FFFD")
        text = raw.decode("utf-8-sig", errors="replace")
    translated, count = translator._html_with(settings, text, protection)
    if output is None:
        try:
            sys.stdout.write(translated)
            sys.stdout.flush()
        except OSError as e:
            raise (file_system_error(e, "standard output") or e) from e
    else:
        with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8", newline="") as f:
            f.write(translated)
    return count


def _translator(engine: str, model: str | None, revision: str | None, device: str, precision: str, threads: int | None,
                output_format: str, settings: SearchSettings, warn=warn, languages: tuple[str | None, str | None] = (None, None)):
    """The Python API's Translator of the model dir `-m` names (or the default), on the native engine, or on
    CTranslate2's for a dir `nmt export ctranslate2` wrote."""
    from nmtcli.api import Translator, open_engine
    from nmtcli.errors import NmtError

    if engine == "ctranslate2":
        # A CTranslate2 dir is what `nmt export ctranslate2` wrote; it is never a default or a Hub id.
        if model is None:
            raise NmtError("--engine ctranslate2 needs -m CT2_DIR", "export one with `nmt export ctranslate2 MODEL_DIR CT2_DIR`", exit_code=2)
        if output_format != "text":
            raise NmtError("--engine ctranslate2 writes text only", "use the native engine for --output-format json", exit_code=2)
        if languages != (None, None):
            raise NmtError("--source-lang/--target-lang work with the native engine", "drop them with --engine ctranslate2", exit_code=2)
        return Translator(open_engine(Path(model), engine="ctranslate2", device=device, precision=precision, revision=revision, settings=settings,
                                      warn=warn, threads=threads), model)
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    path = resolve_model(model, revision)
    translator = Translator(open_engine(path, device=device, precision=precision, settings=settings, warn=warn, languages=languages), str(path))
    engine = translator.engine
    trained = (engine.config_values.get("training") or {}).get("directions")
    if trained and engine.languages and "-".join(engine.languages) not in trained:
        warn(f"{engine.languages[0]}->{engine.languages[1]} is a zero-shot direction: {path} was trained on {', '.join(trained)} only, "
             "so expect weaker translations (or output in another language)")
    return translator


def _on_cpu(translator) -> str:
    """" on N CPU threads" on a CPU (nmtcli/threads.py chooses N unless told); on a GPU what the CUDA graphs did
    (inference/graphs.py), so that a run whose graphs fell off says so; else nothing."""
    engine = getattr(translator, "engine", translator)  # the Python API's Translator, or CTranslate2's
    n = engine.cpu_threads
    if n:
        return f" on {n} CPU thread{'s' if n > 1 else ''}"
    graphs = getattr(engine, "graphs", None)
    if graphs is None:
        return ""
    state = graphs.summary()
    if not state["enabled"]:
        return f"; CUDA graphs were OFF ({state['off_reason']})"
    return (f"; CUDA graphs: {state['captured']:,} captured, {state['dropped']:,} dropped, {state['replayed']:,} replays")


def _write(results: Iterator[str], output: Path | None) -> tuple[int, float | None]:
    """Write each result as a line to stdout (flushed at once) or to `output` (atomically); returns
    (lines written, the time the first was ready)."""
    from nmtcli.errors import file_system_error
    from nmtcli.files import atomic_path

    count, first = 0, None
    if output is None:
        try:
            for line in results:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()  # a reader downstream gets each window as soon as it is done
                count += 1
                first = first or time.perf_counter()
        except OSError as e:  # e.g. stdout redirected to a full disk
            raise (file_system_error(e, "standard output") or e) from e
    else:
        with atomic_path(output) as tmp, open(tmp, "w", encoding="utf-8") as f:
            for line in results:
                f.write(line + "\n")
                count += 1
                first = first or time.perf_counter()
    return count, first
