"""`nmt prepare`: a named corpus or parallel text files -> a prepared data dir (joint BPE, binarized, manifest)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import DATA_ROOT, announce, progress_bar, say, warn
from nmtcli.errors import NmtError

NAME = "prepare"
FILES = "Your own parallel text (instead of NAME)"
CLEANING = "Cleaning"
VOCAB = "Vocabulary"
SCORING = "Score filter (a model's forced decoding)"
RUN = "Download and execution"
BACK = "Back-translation (target-side monolingual text)"


def _list_recipes() -> None:
    from rich.console import Console
    from rich.table import Table

    from nmtcli.data.recipes import RECIPES

    table = Table(box=None, pad_edge=False, show_edge=False)
    for column in ("name", "direction", "train pairs", "vocab", "source", "license"):
        table.add_column(column, overflow="fold")
    for r in RECIPES.values():
        table.add_row(r.name, f"{r.source_lang}->{r.target_lang}", r.pairs, f"{r.vocab_size:,}", r.source, r.license)
    Console(highlight=False, soft_wrap=False).print(table)


def command(
    name: Annotated[Optional[str], typer.Argument(help="A named corpus (see --list), e.g. wmt14-en-de or demo. Downloaded, cleaned and binarized into data/NAME/.", metavar="NAME", show_default=False)] = None,
    list_recipes: Annotated[bool, typer.Option("--list", help="List the named corpora with their size, source and license, and exit.")] = False,
    train: Annotated[Optional[list[str]], typer.Option(help="Training files: PREFIX.SRC and PREFIX.TGT, one sentence a line, aligned. Repeated: one multilingual model's data, each corpus with its pair as SRC-TGT=PREFIX or in a directory named SRC-TGT (corpus/en-fr/train); -s/-t are then refused.", metavar="PREFIX", show_default=False, rich_help_panel=FILES)] = None,
    valid: Annotated[Optional[list[str]], typer.Option(help="Validation files PREFIX.SRC / PREFIX.TGT (e.g. newstest2013). With several --train: one per training direction, named as they are.", metavar="PREFIX", show_default=False, rich_help_panel=FILES)] = None,
    test: Annotated[Optional[list[str]], typer.Option(help="Test files PREFIX.SRC / PREFIX.TGT (e.g. newstest2014), kept as plain text for `nmt score`. With several --train: any of the training directions, named as they are.", metavar="PREFIX", show_default=False, rich_help_panel=FILES)] = None,
    source_lang: Annotated[Optional[str], typer.Option("--source-lang", "-s", help="Source language code (the file suffix). Default: en, or the recipe's.", show_default=False, rich_help_panel=FILES)] = None,
    target_lang: Annotated[Optional[str], typer.Option("--target-lang", "-t", help="Target language code (the file suffix). Default: de, or the recipe's.", show_default=False, rich_help_panel=FILES)] = None,
    vocab_from: Annotated[Optional[str], typer.Option("--vocab-from", help="Encode with this model's tokenizer instead of training a new one (a model dir or Hub id; nmt's own, or from `nmt import marian|m2m100|nllb`), so that `nmt train --init MODEL` can fine-tune it on this data. Languages default to the model's; a multilingual model's tags of -s and -t go before each side.", metavar="MODEL", show_default=False, rich_help_panel=VOCAB)] = None,
    vocab_size: Annotated[Optional[int], typer.Option(help="Joint sentencepiece BPE vocabulary (sec. 5.1: about 37,000 for WMT14's 4.5M pairs). Default: the recipe's; for your own files, from the training pairs: 37,000 x sqrt(pairs / 4.5M) to the nearest 1,000, from 1,000 (30k pairs: 3,000; 100k: 6,000; 1M: 17,000).", min=300, show_default=False, rich_help_panel=VOCAB)] = None,
    spm_sentences: Annotated[Optional[int], typer.Option(help="Training pairs sampled (seeded) to train sentencepiece; each gives two lines. Default: the recipe's, or 1,000,000.", min=1, show_default=False, rich_help_panel=VOCAB)] = None,
    seed: Annotated[int, typer.Option(help="Seed (0 to 4294967295) for sampling the sentencepiece training text, the misaligned filter's sample, folds and random pairings, and --clean-report's pairs: another seed drops a few other borderline pairs.", min=0, max=2**32 - 1, rich_help_panel=VOCAB)] = 1,
    max_tokens: Annotated[int, typer.Option(help="Drop pairs with a side longer than this many subword tokens.", min=1, rich_help_panel=CLEANING)] = 250,
    max_ratio: Annotated[Optional[float], typer.Option(help="Drop training pairs whose longer side has more than this many times the shorter side's subword tokens (plus --ratio-slack). Default: the recipe's (demo 3.0), else 1.5.", min=1.0, show_default=False, rich_help_panel=CLEANING)] = None,
    ratio_slack: Annotated[Optional[int], typer.Option(help="Tokens the longer side may have beyond --max-ratio x the shorter: short pairs (\"Upload\" -> \"Hochladen\", 2 pieces against 5 in a small vocabulary) are kept (5 keeps all but 0.7% of the demo corpus, the plain 1.5 drops 17%). Default: 0, fairseq's plain ratio (the slack did not raise BLEU on the demo corpus).", min=0, show_default=False, rich_help_panel=CLEANING)] = None,
    drop_duplicates: Annotated[bool, typer.Option("--drop-duplicates/--keep-duplicates", help="Drop exact repeats of a training pair (the first is kept).", rich_help_panel=CLEANING)] = True,
    drop_markup: Annotated[bool, typer.Option("--drop-markup", help="Drop training pairs with a side that is mostly tags, entities or URLs.", rich_help_panel=CLEANING)] = False,
    drop_wrong_script: Annotated[bool, typer.Option("--drop-wrong-script", help="Drop training pairs with a side where fewer than half the letters are in its language's script.", rich_help_panel=CLEANING)] = False,
    drop_wrong_language: Annotated[bool, typer.Option("--drop-wrong-language/--keep-wrong-language", help="Drop training pairs with a side of 20 letters or more that the language detector (py3langid, the corpus's two languages 10x likelier) takes for another language; sides of a language it does not know are kept.", rich_help_panel=CLEANING)] = True,
    drop_copies: Annotated[bool, typer.Option("--drop-copies/--keep-copies", help="Drop training pairs whose target is the source (case, spaces and punctuation aside) with 3 words or more; shorter copies (names, \"OK\") are kept.", rich_help_panel=CLEANING)] = True,
    drop_number_mismatch: Annotated[bool, typer.Option("--drop-number-mismatch/--keep-number-mismatch", help="Drop training pairs whose sides hold different numbers (digit runs, as sets).", rich_help_panel=CLEANING)] = True,
    drop_url_mismatch: Annotated[bool, typer.Option("--drop-url-mismatch/--keep-url-mismatch", help="Drop training pairs whose sides hold different URLs.", rich_help_panel=CLEANING)] = True,
    drop_non_alphabetic: Annotated[bool, typer.Option("--drop-non-alphabetic/--keep-non-alphabetic", help="Drop training pairs with a side of 8 characters or more (spaces aside) under half of them letters.", rich_help_panel=CLEANING)] = True,
    drop_misaligned: Annotated[bool, typer.Option("--drop-misaligned/--keep-misaligned", help="Drop training pairs whose words do not translate each other: IBM Model 1, learnt from the corpus in both directions, scores each pair no better than 95% of random pairings of the corpus's sentences of its lengths (a second pass after the other text filters; sides with under half their words seen twice are not judged).", rich_help_panel=CLEANING)] = True,
    drop_long_words: Annotated[bool, typer.Option("--drop-long-words/--keep-long-words", help="Drop training pairs with a word over 70 characters (URLs aside; scripts without spaces are not judged).", rich_help_panel=CLEANING)] = True,
    clean_report: Annotated[Optional[Path], typer.Option("--clean-report", help="Write up to 20 pairs each text filter dropped (drawn with --seed), one JSON object a line: filter, source, target (and direction for several pairs), to see whether it was right.", metavar="FILE", show_default=False, rich_help_panel=CLEANING)] = None,
    target_mono: Annotated[Optional[list[Path]], typer.Option("--target-mono", help="Target-language text, one sentence a line, to back-translate with --bt-model and train on beside the real pairs (Sennrich et al. 2016). Repeatable. Its translation is kept in the data dir (backtranslation.SRC, resumable, reused by the next prepare into it).", metavar="FILE", show_default=False, rich_help_panel=BACK)] = None,
    bt_model: Annotated[Optional[str], typer.Option("--bt-model", help="The model that translates --target-mono into the source language (a model dir or Hub id of a TGT->SRC model, e.g. one trained on the real pairs reversed; it may be the score filter's --reverse-model too).", metavar="MODEL", show_default=False, rich_help_panel=BACK)] = None,
    bt_sampling: Annotated[Optional[str], typer.Option("--bt-sampling", help="Sample the back-translations instead of beam search (beam 5, the default): full, topk:K or topp:P, seeded with --seed. Edunov et al. 2018 found sampling better where there is much parallel data, beam better where there is little.", metavar="SPEC", show_default=False, rich_help_panel=BACK)] = None,
    bt_tag: Annotated[bool, typer.Option("--bt-tag/--no-bt-tag", help="Start each synthetic source with --bt-tag-token, a reserved piece no input text can make (Caswell et al. 2019, Tagged Back-Translation); translating needs no tag.", rich_help_panel=BACK)] = True,
    bt_tag_token: Annotated[str, typer.Option("--bt-tag-token", help="The tag's piece.", rich_help_panel=BACK)] = "<BT>",
    bt_ratio: Annotated[float, typer.Option("--bt-ratio", help="Real to synthetic pairs in the train split: each real pair goes in max(1, round(RATIO x synthetic / real)) times (fairseq's --upsample-primary). 1: as many real as synthetic (the parallel data is small, the reverse model weak).", min=0.0, rich_help_panel=BACK)] = 1.0,
    score_model: Annotated[Optional[str], typer.Option("--score-model", help="Drop the training pairs this SRC->TGT model (a model dir or Hub id) finds least likely: its per-token cross-entropy by forced decoding, after the text filters and before the vocabulary; with --reverse-model, Junczys-Dowmunt's dual conditional cross-entropy. Resumable; on --device.", metavar="MODEL", show_default=False, rich_help_panel=SCORING)] = None,
    reverse_model: Annotated[Optional[str], typer.Option("--reverse-model", help="A TGT->SRC model: its per-token cross-entropy of each pair turned round joins --score-model's (dual conditional cross-entropy: |H_f - H_b| + (H_f + H_b) / 2), or alone ranks the pairs.", metavar="MODEL", show_default=False, rich_help_panel=SCORING)] = None,
    drop_worst: Annotated[Optional[float], typer.Option(help="Percent of the training pairs the score filter drops, those of the highest cross-entropy (ties: the earlier line). Default: 5 with --score-model or --reverse-model.", min=0.0, max=99.0, show_default=False, rich_help_panel=SCORING)] = None,
    device: Annotated[str, typer.Option(help="Where the score filter's models run: auto, cpu, cuda or cuda:N.", rich_help_panel=SCORING)] = "auto",
    revision: Annotated[Optional[str], typer.Option(help="Hub dataset revision (branch, tag or commit) to download; the manifest records the commit used. Default: the recipe's.", show_default=False, rich_help_panel=RUN)] = None,
    workers: Annotated[int, typer.Option(help="Encoding processes and sentencepiece training threads; 0 uses every core. Does not change the output.", min=0, rich_help_panel=RUN)] = 0,
    chunk_pairs: Annotated[int, typer.Option(help="Pairs encoded per chunk, the unit an interrupted run resumes from (back-translation: lines translated per chunk, at most 5,000). Does not change the output.", min=1, rich_help_panel=RUN)] = 100_000,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Data dir to write. Default: data/NAME, or data/SRC-TGT for files (several pairs: data/SRC-TGT+SRC-TGT...).", show_default=False)] = None,
) -> None:
    """Download or read parallel text, clean it, train a joint BPE vocabulary and binarize it for training.

    [bold]nmt prepare wmt14-en-de[/bold] downloads WMT 2014 from the Hugging Face Hub (cached, resumable;
    HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE work as for every Hub tool); [bold]nmt prepare demo[/bold]
    uses the small corpus shipped with nmt, offline. [bold]nmt prepare --train PREFIX --valid PREFIX[/bold]
    prepares your own files instead; several [bold]--train SRC-TGT=PREFIX[/bold] (a --valid for each) prepare one
    multilingual model's data: one BPE over every language, sampled with temperature, and language tags.

    Drops, from the training split, empty pairs, pairs with a word over 70 characters or mostly not letters,
    mismatched numbers or URLs, copies of the source, a side in another language (py3langid), exact
    duplicates, pairs whose words do not translate each other (IBM Model 1 learnt from the corpus), pairs over --max-tokens subword tokens and pairs whose length ratio exceeds --max-ratio,
    and optionally markup and wrong-script pairs; each filter has a --keep-* switch, and --clean-report
    FILE shows a sample of what each dropped. --score-model (and --reverse-model) drop the --drop-worst
    percent a model finds least likely. Validation pairs lose only empty and over-long ones.
    Writes sentencepiece.model, binarized train/valid arrays, plain-text valid/test copies and
    manifest.json (counts before and after each filter, settings, source revision, checksums,
    versions). An interrupted run resumes where it stopped; a finished one re-runs in seconds; the
    same inputs and settings give byte-identical files.
    """
    from nmtcli.bulk import CHUNK_LINES
    from nmtcli.cli.backtranslate import check_flags
    from nmtcli.data.prepare import prepare_files, prepare_recipe

    if list_recipes:
        return _list_recipes()
    _check_inputs(name, train, valid, test)
    check_flags(target_mono, bt_model, bt_sampling, vocab_from, bt_tag_token if bt_tag else None, bool(train and len(train) > 1), bt_ratio)
    back = dict(mono=target_mono, reverse_model=bt_model, sampling=bt_sampling, tag=bt_tag_token if bt_tag else None, ratio=bt_ratio,
                seed=seed, chunk_lines=min(chunk_pairs, CHUNK_LINES)) if target_mono else None
    filters = dict(drop_duplicates=drop_duplicates, drop_markup=drop_markup, drop_wrong_script=drop_wrong_script,
                   drop_wrong_language=drop_wrong_language, drop_copies=drop_copies, drop_number_mismatch=drop_number_mismatch,
                   drop_url_mismatch=drop_url_mismatch, drop_non_alphabetic=drop_non_alphabetic, drop_long_words=drop_long_words, drop_misaligned=drop_misaligned)
    if train and len(train) > 1:
        _check_no_score_filter(score_model, reverse_model, drop_worst)
        return _multilingual(train, valid or [], test or [], source_lang, target_lang, vocab_from, vocab_size, spm_sentences, max_ratio, seed,
                             dict(max_tokens=max_tokens, workers=workers, chunk_pairs=chunk_pairs, **filters), revision, output, clean_report)
    _check_one_pair(valid, test)
    vocabulary, vocab_size, source_lang, target_lang = _vocabulary_from(vocab_from, vocab_size, spm_sentences, name, source_lang, target_lang)
    options = dict(max_tokens=max_tokens, seed=seed, workers=workers, chunk_pairs=chunk_pairs, **filters)
    settings, out = _settings(name, revision, source_lang, target_lang, vocab_size, spm_sentences, max_ratio, ratio_slack, options, output)
    scoring = _score_filter(score_model, reverse_model, drop_worst, device, settings.source_lang, settings.target_lang)
    with _only_writer(out):
        vocabulary = _announce(out, settings, vocabulary)
        synthetic = _back_translate(out, settings, back)
        with progress_bar() as progress:
            if name is not None:
                manifest = prepare_recipe(name, out, settings, revision, progress, vocabulary, synthetic, scoring)
            else:
                manifest = prepare_files(out, Path(train[0]), Path(valid[0]), Path(test[0]) if test else None, settings,
                                         f"{settings.source_lang}-{settings.target_lang}", progress, vocabulary, synthetic, scoring)
    _report(out, manifest, clean_report)


@contextmanager
def _only_writer(out: Path):
    """The data dir locked for this command (DIR/.lock, released however the process ends): a second `nmt prepare`
    into it is refused in one line instead of overwriting the text the first one is reading."""
    from nmtcli.bulk import locked

    if out.exists() and not out.is_dir():
        raise NmtError(f"-o {out} is a file", "give a directory for the prepared data", exit_code=2)
    made = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        with locked(out / ".lock", out):
            yield
    finally:
        if made and [p.name for p in out.iterdir()] == [".lock"]:  # refused before anything was written: leave no dir
            (out / ".lock").unlink()
            out.rmdir()


def _check_inputs(name: str | None, train: list[str] | None, valid: list[str] | None, test: list[str] | None) -> None:
    """A corpus name, or --train and --valid (and --test): one of the two."""
    if name is not None and (train or valid or test):
        raise NmtError(f"both a corpus name ({name}) and --train/--valid/--test given", "use one or the other")
    if name is None and (not train or not valid):
        raise NmtError("nothing to prepare", "name a corpus (`nmt prepare --list`) or pass --train PREFIX and --valid PREFIX")


def _check_no_score_filter(score_model: str | None, reverse_model: str | None, drop_worst: float | None) -> None:
    """Several --train corpora: no score filter, which takes one language pair."""
    if score_model or reverse_model or drop_worst is not None:
        raise NmtError("the score filter takes one language pair, not several --train corpora", "prepare each pair with its own "
                       "--score-model, or leave the score filter out", exit_code=2)


def _check_one_pair(valid: list[str] | None, test: list[str] | None) -> None:
    """One --train: one --valid and at most one --test."""
    for flag, given in (("--valid", valid), ("--test", test)):
        if given and len(given) > 1:
            raise NmtError(f"{flag} given {len(given)} times for one --train", f"pass one {flag}, or one --train per language pair (a multilingual model)", exit_code=2)


def _vocabulary_from(vocab_from: str | None, vocab_size: int | None, spm_sentences: int | None, name: str | None,
                     source_lang: str | None, target_lang: str | None):
    """--vocab-from: the model's vocabulary, its size (recorded as what it is: the model's) and, for your own files, its
    languages as the defaults of -s and -t. Returns (vocabulary or None, vocab_size, source_lang, target_lang)."""
    if vocab_from is None:
        return None, vocab_size, source_lang, target_lang
    vocabulary = _vocabulary(vocab_from, vocab_size, spm_sentences)
    if name is None and vocabulary.languages_known:  # not the "src"/"tgt" of an import that could not tell
        source_lang, target_lang = source_lang or vocabulary.source_lang, target_lang or vocabulary.target_lang
    return vocabulary, vocabulary.size, source_lang, target_lang


def _settings(name: str | None, revision: str | None, source_lang: str | None, target_lang: str | None, vocab_size: int | None,
              spm_sentences: int | None, max_ratio: float | None, ratio_slack: int | None, options: dict, output: Path | None):
    """The PrepareSettings and the data dir: a named corpus's (its languages; its vocabulary size, sentencepiece sample and
    length ratio unless given) or your own files' (en-de unless -s/-t say otherwise)."""
    from nmtcli.data.settings import PrepareSettings
    from nmtcli.data.text import MAX_RATIO, RATIO_SLACK

    slack = RATIO_SLACK if ratio_slack is None else ratio_slack
    if name is not None:
        from nmtcli.data.recipes import get_recipe

        recipe = get_recipe(name)
        for flag, given, wanted in (("-s", source_lang, recipe.source_lang), ("-t", target_lang, recipe.target_lang)):
            if given is not None and given != wanted:
                raise NmtError(f"{name} translates {recipe.source_lang}->{recipe.target_lang}, not {flag} {given}", f"leave out {flag}, or pick another recipe from `nmt prepare --list`")
        settings = PrepareSettings(recipe.source_lang, recipe.target_lang, vocab_size or recipe.vocab_size,
                                   spm_sentences=spm_sentences or recipe.spm_sentences, max_ratio=max_ratio or recipe.max_ratio,
                                   ratio_slack=slack, **options)
        return settings, output or DATA_ROOT / name
    if revision is not None:
        raise NmtError("--revision applies to named corpora only", "leave it out with --train/--valid")
    src, tgt = source_lang or "en", target_lang or "de"
    settings = PrepareSettings(src, tgt, vocab_size, spm_sentences=spm_sentences or 1_000_000, max_ratio=max_ratio or MAX_RATIO,
                               ratio_slack=slack, **options)
    return settings, output or DATA_ROOT / f"{src}-{tgt}"


def _multilingual(train: list[str], valid: list[str], test: list[str], source_lang, target_lang, vocab_from, vocab_size, spm_sentences,
                  max_ratio, seed, options: dict, revision, output, clean_report) -> None:
    """Several --train: one data dir for one multilingual model (data/multilingual.py)."""
    from nmtcli.data.multilingual import check_corpora, parse_corpus, prepare_multilingual
    from nmtcli.data.settings import PrepareSettings
    from nmtcli.data.text import MAX_RATIO

    for flag, given in (("-s/-t", source_lang or target_lang), ("--vocab-from", vocab_from), ("--revision", revision)):
        if given is not None:
            raise NmtError(f"{flag} does not apply to several --train corpora (each names its own pair)",
                           "leave it out; fine-tuning an imported multilingual model takes one pair: one --train", exit_code=2)
    corpora = {flag: [parse_corpus(spec, flag) for spec in specs] for flag, specs in (("--train", train), ("--valid", valid), ("--test", test))}
    check_corpora(corpora["--train"], corpora["--valid"], corpora["--test"])  # before anything is announced
    settings = PrepareSettings("src", "tgt", vocab_size, spm_sentences=spm_sentences or 1_000_000, max_ratio=max_ratio or MAX_RATIO, seed=seed, **options)
    out = output or DATA_ROOT / "+".join(c.direction for c in corpora["--train"])
    announce("prepared data", out)
    with _only_writer(out), progress_bar() as progress:
        manifest = prepare_multilingual(out, corpora["--train"], corpora["--valid"], corpora["--test"] or None, settings, progress)
    _report(out, manifest, clean_report)


def _score_filter(score_model: str | None, reverse_model: str | None, drop_worst: float | None, device: str, src: str, tgt: str):
    """--score-model / --reverse-model / --drop-worst: the score filter (data/score_filter.py), its models checked
    against the data's languages before anything is written; None without a model."""
    if score_model is None and reverse_model is None:
        if drop_worst is not None:
            raise NmtError("--drop-worst needs --score-model or --reverse-model", "name the model that scores the pairs", exit_code=2)
        return None
    from nmtcli.cli.common import warn
    from nmtcli.data.score_filter import DEFAULT_PERCENT, ScoreFilter
    from nmtcli.device import resolve_device
    from nmtcli.pair_scores import locate, scorer

    resolve_device(device)  # a GPU that is not there: said before anything is written
    forward = locate(score_model, src, tgt, "--score-model", warn) if score_model is not None else None
    reverse = locate(reverse_model, tgt, src, "--reverse-model", warn) if reverse_model is not None else None
    percent = DEFAULT_PERCENT if drop_worst is None else drop_worst
    return ScoreFilter(percent, {"forward": forward and forward[1], "reverse": reverse and reverse[1]}, scorer(forward, reverse, (src, tgt), device, warn))


def _announce(out: Path, settings, vocabulary):
    """The vocabulary checked against the data's languages (a multilingual model's: with their tags found) before
    anything is written: data in the other direction is no use to the model."""
    if vocabulary is not None:
        from nmtcli.data.vocabulary import check_languages

        vocabulary = _with_tags(vocabulary, settings.source_lang, settings.target_lang)
        check_languages(vocabulary, settings.source_lang, settings.target_lang)
    announce("prepared data", out)
    return vocabulary


def _back_translate(out: Path, settings, back: dict | None):
    """--target-mono: translated by --bt-model into the data dir (cli/backtranslate.py), before the data is prepared."""
    if back is None:
        return None
    from nmtcli.cli.backtranslate import back_translate

    return back_translate(out, source_lang=settings.source_lang, target_lang=settings.target_lang, **back)


def _with_tags(vocabulary, source_lang: str, target_lang: str):
    """A multilingual model's vocabulary with the model's codes for -s and -t (`en` -> `eng_Latn`), whose tags
    go before each side of the data; any other vocabulary as it is."""
    if not vocabulary.multilingual:
        return vocabulary
    import dataclasses

    from nmtcli.inference.language_codes import nearest, resolve

    model, codes = vocabulary.origin.get("model", vocabulary.model_dir), list(vocabulary.tokenizer["languages"])
    tags = {}
    for side, flag, code in (("source", "-s", source_lang), ("target", "-t", target_lang)):
        tags[side] = resolve(code, codes)
        if tags[side] is None:
            raise NmtError(f"{model} has no language {code!r} ({flag}); the nearest it has: {', '.join(nearest(code, codes))}",
                           f"`nmt info {model}` lists its languages", exit_code=2)
    return dataclasses.replace(vocabulary, tags=tags)


def _vocabulary(spec: str, vocab_size: int | None, spm_sentences: int | None):
    """--vocab-from MODEL: the model's tokenizer (through the Hub cache for an OWNER/NAME id)."""
    from nmtcli import hub
    from nmtcli.data.vocabulary import read_vocabulary

    if vocab_size is not None or spm_sentences is not None:
        raise NmtError("--vocab-size and --spm-sentences train a new vocabulary, which --vocab-from replaces",
                       "leave them out: the model's vocabulary is used as it is", exit_code=2)
    if hub.looks_like_repo_id(spec):
        say(f"vocabulary of {spec} (from the Hub cache, or downloaded)")
        model_dir, origin = hub.locate_model(spec)
    else:
        model_dir, origin = Path(spec), None
    return read_vocabulary(model_dir, origin)


def _say_unknown(split: str, side: str, lang: str | None, unknown: dict, pairs: int) -> None:
    """A warning where the vocabulary (--vocab-from) cannot write some of a side's text: what is fine-tuned on it
    learns to write nothing there (issue 51: "rüde" came out as "rde")."""
    lines = unknown.get(f"{side}_lines", 0)
    if lines:
        characters = unknown.get(f"{side}_characters", "")
        what = f"characters its vocabulary lacks ({' '.join(characters[:40])}{' ...' if len(characters) > 40 else ''})" if characters else "pieces its vocabulary lacks"
        warn(f"{split}: {lines:,} of {pairs:,} {side} lines{f' ({lang})' if lang else ''} hold {what}: they are read as the unknown token, and a "
             "model trained on them cannot write them; start from a model whose vocabulary covers this text, or train one "
             "with its own vocabulary (no --vocab-from)")


MISALIGNED_WARNING = 0.5  # of the pairs judged: more than this looks like files out of step, not noise


def _say_misaligned(split: str, counts: dict) -> None:
    """A warning where the misaligned filter dropped most of the pairs: the files are likely out of step (a line
    missing on one side shifts every pair after it), which no filter can mend."""
    step = next((f for f in counts.get("filters", []) if f["filter"] == "misaligned"), None)
    if step and step["before"] and (step["before"] - step["after"]) > MISALIGNED_WARNING * step["before"]:
        gone = step["before"] - step["after"]
        warn(f"{split}: {gone:,} of {step['before']:,} pairs ({100 * gone / step['before']:.0f}%) look misaligned (their words do not "
             "translate each other): check that each line of the source file is the translation of the same line of the target file "
             "(a line missing on one side shifts every pair after it); --keep-misaligned keeps them")


def _report(out: Path, manifest: dict, clean_report: Path | None = None) -> None:
    """What was prepared, on stderr: per split the pairs kept of those read and why the others were dropped; the
    sample of dropped pairs written to --clean-report."""
    if manifest.get("reused"):
        say(f"{out} is already prepared with these inputs and settings (checksums verified); nothing to do")
    if manifest.get("source") and manifest["source"].get("commit"):
        say(f"source: {manifest['source']['repo']} at commit {manifest['source']['commit']}")
    back = manifest.get("backtranslation")
    for split, counts in manifest["splits"].items():
        if "pairs" in counts:
            dropped = ", ".join(f"{k} {v:,}" for k, v in counts["dropped"].items()) or "none"
            kept = back["real_pairs"] if split == "train" and back else counts["pairs"]
            say(f"{split}: {kept:,} of {counts['input_pairs']:,} pairs kept (dropped: {dropped})")
            if split == "train" and "directions" in counts:  # multilingual data: each pair's share
                say("  " + ", ".join(f"{d} {c['pairs']:,}" for d, c in counts["directions"].items()))
            for side, lang in (("source", manifest.get("source_lang")), ("target", manifest.get("target_lang"))):
                _say_unknown(split, side, lang, counts.get("unknown", {}), counts["pairs"])
            for direction, c in counts.get("directions", {"": counts}).items():
                _say_misaligned(f"{split}{' ' + direction if direction else ''}", c)
                if c.get("language_unknown"):
                    say(f"{split}{' ' + direction if direction else ''}: language not judged for {', '.join(c['language_unknown'])} "
                        "(the detector does not know it)")
        else:
            say(f"{split}: {counts['lines']:,} lines of plain text for scoring")
    if back:
        dropped = ", ".join(f"{k} {v:,}" for k, v in back["dropped"].items()) or "none"
        tag = f"tagged {back['tag']}" if back["tag"] else "untagged"
        say(f"back-translation: {back['pairs']:,} of {back['input_lines']:,} synthetic pairs kept (dropped: {dropped}), {tag}; "
            f"train: the {back['real_pairs']:,} real pairs x {back['upsample']} + {back['pairs']:,} synthetic = {manifest['splits']['train']['pairs']:,} pairs")
    if manifest.get("score_filter"):
        from nmtcli.data.score_filter import DROPPED

        models = manifest["score_filter"]
        by = ("dual conditional cross-entropy" if models["forward"] and models["reverse"] else
              f"the {'forward' if models['forward'] else 'reverse'} model's per-token cross-entropy")
        if manifest["splits"]["train"]["dropped"].get("score"):
            say(f"score filter: the worst {models['percent']:g}% by {by} dropped, listed worst first in {out / DROPPED}")
        else:
            say(f"score filter: no pair dropped (the worst {models['percent']:g}% of the pairs is less than one)")
    say(_vocabulary_line(manifest))
    say(f"done in {manifest['seconds']} s")
    if clean_report is not None:
        from nmtcli.data.text_stages import write_clean_report

        say(f"{clean_report}: {write_clean_report(out, clean_report):,} dropped pairs, up to 20 of each filter")


def _vocabulary_line(manifest: dict) -> str:
    """What vocabulary size was chosen and why, in one line."""
    pieces, choice = manifest["vocab_size"], manifest.get("vocabulary")  # older data dirs have no "vocabulary"
    source = manifest.get("vocab_from")
    if source is not None:  # --vocab-from: the model's, as it is
        revision = f" at {source['revision'][:12]}" if source.get("revision") else ""
        return f"vocabulary of {source['model']}{revision}: {pieces:,} pieces"
    if choice is None:
        return f"vocabulary: {pieces:,} pieces"
    asked = choice["asked"]
    sampled = manifest.get("sentencepiece", {}).get("lines_sampled")
    if "temperature" in manifest.get("sentencepiece", {}):  # multilingual data: one BPE over every language, sampled with temperature
        return (f"vocabulary: {pieces:,} pieces ({len(manifest['tokenizer']['languages'])} of them language tags), the BPE trained on lines "
                f"sampled with temperature T = {manifest['sentencepiece']['temperature']:g}: "
                + ", ".join(f"{lang} {n:,}" for lang, n in sampled.items()))
    if choice["by"] == "corpus":
        why = f"for {choice['training_pairs']:,} training pairs: {choice['rule']}; --vocab-size N to choose"
    elif choice["by"] == "recipe":
        why = f"the {manifest['name']} recipe's"
    else:
        why = "--vocab-size"
    found = f"; the text holds only {pieces:,} pieces of the {asked:,} asked" if pieces < asked else ""
    return f"vocabulary: {pieces:,} pieces ({why}){found}"
