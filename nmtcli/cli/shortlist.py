"""`nmt shortlist`: learn a model's lexical shortlist from its training data, and measure what it keeps and saves."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from nmtcli.cli import options
from nmtcli.cli.common import progress_bar, say

NAME = "shortlist"
CHECK_LINES = 500  # of the validation split, translated with and without the shortlist
WARM_LINES = 20
TASK = "pairs read"
MAX_LOSS = 1.0  # BLEU on the validation lines a shortlist may cost before the command warns
MIN_GAIN = 1.2  # the speed-up below which it says the shortlist is not worth having


def command(
    model_dir: Annotated[Path, typer.Argument(help="The model dir to write shortlist.safetensors into.", show_default=False)],
    data: Annotated[Path, typer.Option("--data", help="The data dir the model was trained on (prepared by `nmt prepare`, or with --vocab-from MODEL): its training pairs, in the model's pieces.")],
    per_piece: Annotated[int, typer.Option(help="Target pieces kept for each source piece: the most probable under IBM Model 1 (Marian's students: 50).", min=1, max=1000)] = 50,
    frequent: Annotated[int, typer.Option(help="The most frequent target pieces, in every batch's list.", min=0)] = 100,
    seed: Annotated[int, typer.Option(help="Seed of the sample of pairs Model 1 learns from.", min=0, max=2**32 - 1)] = 1,
    check: Annotated[bool, typer.Option("--check/--no-check", help=f"Translate the first {CHECK_LINES} lines of the data's validation split with and without the shortlist and record BLEU and lines/s of both (as `nmt info` shows them).")] = True,
    device: Annotated[str, options.device()] = "auto",
) -> None:
    """Learn a lexical shortlist for a model: beam search then scores only the target pieces a sentence's source can translate to.

    For each source piece, the target pieces that translate it under IBM Model 1 (learnt by EM from the training
    pairs' pieces); a sentence is decoded over its pieces' lists, the most frequent target pieces, its own pieces and
    EOS (alone or in any batch, the same translation), and the output projection and softmax shrink with it. What it
    is worth depends on the model: a student with 32,000 pieces and two decoder layers spends most of a step there (benchmarks/shortlist_speed.py),
    a model with a small vocabulary little. The check says both for this model, on its own validation lines;
    `nmt translate --no-shortlist` decodes over the whole vocabulary again.
    """
    from nmtcli.data.prepare import read_manifest
    from nmtcli.data.shards import Shard
    from nmtcli.data.vocabulary import data_vocabulary, read_vocabulary
    from nmtcli.errors import NmtError
    from nmtcli.inference.shortlist import learn

    if not model_dir.is_dir():
        raise NmtError(f"{model_dir} is not a model dir", "nmt shortlist writes into a local model dir: for a Hub model "
                       "`nmt pull OWNER/NAME -o DIR` first, then pass DIR")
    vocabulary = read_vocabulary(model_dir)
    manifest = read_manifest(data)
    if data_vocabulary(manifest) != vocabulary.files or manifest["vocab_size"] != vocabulary.size:
        raise NmtError(f"{data} was not prepared with the vocabulary of {model_dir}",
                       f"prepare the training data with `nmt prepare --vocab-from {model_dir} ...`, then pass that dir")
    source_lang, target_lang = manifest["source_lang"], manifest["target_lang"]
    try:
        source, target = (Shard(data / f"train.{lang}", vocabulary.size) for lang in (source_lang, target_lang))
    except (OSError, ValueError) as e:
        raise NmtError(f"cannot read the training split of {data}: {e}", "prepare the data again") from None
    if len(source) != len(target):
        raise NmtError(f"{data}'s training split has {len(source):,} {source_lang} lines but {len(target):,} {target_lang} ones", "prepare the data again")
    directions = _directions(manifest)
    checked = _check_sets(data, manifest) if check else []  # a split the check lacks is said before the learning
    _writable(model_dir)  # and a dir it cannot write
    started = time.perf_counter()
    with progress_bar("pairs") as progress:
        def pairs():
            for i in range(len(source)):
                if i % 10_000 == 0:
                    progress(TASK, i, len(source))
                yield source[i], target[i]
            progress(TASK, len(source), len(source))

        shortlist = learn(pairs(), vocabulary.size, per_piece, frequent, seed)
    shortlist.info.update(data=str(data.resolve()), seconds=round(time.perf_counter() - started, 1), vocabulary=vocabulary.files)
    if directions:
        shortlist.info["directions"] = directions  # a multilingual model searches with it in these directions only
    say(f"learnt from {shortlist.info['learnt_from']:,} of {len(source):,} pairs in {shortlist.info['seconds']} s: "
        f"{shortlist.info['source_pieces']:,} source pieces listed, {len(shortlist.always):,} target pieces always in")
    if check:
        shortlist.info.update(_check(model_dir, checked, shortlist, device))
    path = shortlist.save(model_dir)
    say(f"wrote {path}; `nmt translate` uses it (--no-shortlist: the whole vocabulary)")
    if check:
        (full, short), (slow, fast) = shortlist.info["valid_bleu"], shortlist.info["valid_lines_per_s"]
        if short < full - MAX_LOSS:
            say(f"warning: the shortlist costs {full - short:.1f} BLEU on the validation lines: try a larger --per-piece or --frequent, "
                f"or delete {path}")
        if fast < MIN_GAIN * slow:
            say(f"warning: the shortlist makes this model only {fast / max(slow, 1e-9):.2f}x as fast (its output projection is a small "
                f"part of a step: a small vocabulary or a narrow model): delete {path} to translate as before")


def _directions(manifest: dict) -> list[str]:
    """The directions ("SRC-TGT", a multilingual model's codes) of a multilingual model's data: the pair `prepare
    --vocab-from` tagged, or each direction of multilingual data; [] for a model of one direction."""
    if manifest.get("directions"):
        return [f"{d['source']}-{d['target']}" for d in manifest["directions"]]
    tags = manifest.get("language_tags")
    return [f"{tags['source']}-{tags['target']}"] if tags else []


def _check_sets(data: Path, manifest: dict) -> list[tuple[tuple[str | None, str | None], list[str], list[str]]]:
    """((source, target) languages of a multilingual model, or Nones; sources; references) of the validation lines the
    check translates: the first CHECK_LINES of the split, or of multilingual data as many of each direction's in turn."""
    from nmtcli.data.prepare import reference_lines

    if not manifest.get("directions"):
        tags = manifest.get("language_tags") or {}
        split = [((tags.get("source"), tags.get("target")), "valid", manifest["source_lang"], manifest["target_lang"])]
    else:
        split = [((d["source"], d["target"]), f"valid.{d['source']}-{d['target']}", d["source"], d["target"]) for d in manifest["directions"]]
    share = max(1, CHECK_LINES // len(split))
    return [(languages, reference_lines(data, name, source)[:share], reference_lines(data, name, target)[:share])
            for languages, name, source, target in split]


def _writable(model_dir: Path) -> None:
    """One line, before any work, where the shortlist could not be written into `model_dir` (read-only, no rights)."""
    import os
    import tempfile

    from nmtcli.files import file_system_errors
    from nmtcli.model.checkpoint import SHORTLIST_FILE

    with file_system_errors(model_dir / SHORTLIST_FILE):
        fd, tmp = tempfile.mkstemp(prefix=f".{SHORTLIST_FILE}.", suffix=".tmp", dir=model_dir)
        os.close(fd)
        os.unlink(tmp)


def _check(model_dir: Path, checked: list, shortlist, device: str) -> dict:
    """BLEU and lines/s on the validation lines `checked` (_check_sets), without and with the shortlist."""
    import sacrebleu

    from nmtcli.device import resolve_device
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator

    # The model dir's present shortlist is not read: it may be the damaged one this command replaces.
    translator = Translator(model_dir, resolve_device(device), SearchSettings(shortlist=False), languages=checked[0][0])
    references = [line for _, _, refs in checked for line in refs]
    bleu, pace = [], []
    translator.translate_lines(checked[0][1][:WARM_LINES], SearchSettings(shortlist=False))  # the first batch's allocations, not timed
    translator.model_shortlist = translator.shortlist = shortlist  # the one learnt (set_languages: each direction it serves)
    for on in (False, True):
        hypotheses, seconds = [], 0.0
        for languages, sources, _ in checked:
            translator.set_languages(*languages)
            started = time.perf_counter()
            hypotheses += [hyps[0].text if hyps else "" for hyps in translator.translate_lines(sources, SearchSettings(shortlist=on))]
            seconds += time.perf_counter() - started
        pace.append(round(len(references) / max(1e-9, seconds), 1))
        bleu.append(round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2))
    say(f"validation ({len(references)} lines): BLEU {bleu[0]:.2f} without, {bleu[1]:.2f} with the shortlist; "
        f"{pace[0]:.1f} -> {pace[1]:.1f} lines/s ({pace[1] / max(pace[0], 1e-9):.2f}x) on {translator.device}")
    return {"valid_lines": len(references), "valid_bleu": bleu, "valid_lines_per_s": pace, "device": str(translator.device)}


def written_over(model_dir: Path) -> None:
    """After a command wrote a model into `model_dir` (average, import, pull -o): a shortlist left there by the model it
    replaced goes where it was learnt for another vocabulary, and is said to be kept where it fits this one."""
    from nmtcli.inference.shortlist import drop_foreign
    from nmtcli.model.checkpoint import SHORTLIST_FILE, read_model_dir_config

    if not (Path(model_dir) / SHORTLIST_FILE).is_file():
        return
    if drop_foreign(model_dir, int(read_model_dir_config(model_dir)["model"]["vocab_size"])):
        say(f"removed {Path(model_dir) / SHORTLIST_FILE}: it was learnt for the vocabulary of the model this one replaced "
            f"(`nmt shortlist {model_dir} --data DIR` learns one for this one)")
    else:
        say(f"kept {Path(model_dir) / SHORTLIST_FILE} (the same vocabulary: its lists still hold; its check measured the model "
            f"this one replaced, `nmt shortlist {model_dir} --data DIR` measures this one)")
