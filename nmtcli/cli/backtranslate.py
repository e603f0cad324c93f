"""`nmt prepare --target-mono FILE --bt-model MODEL`: the monolingual text back-translated before the data is prepared.

The reverse model's translation is a real `nmt translate -i DATA/backtranslation.TGT -o DATA/backtranslation.SRC` (shown,
then run in this process as `nmt distill` runs its stages): in chunks in DATA/backtranslation.SRC.parts/, so a killed
`prepare` resumes the translation where it stopped, and DATA/backtranslation.json records what the finished one was
made from, so a second `prepare` into the same dir (another ratio, untagged) reuses it. The rest is the data layer's
(nmtcli/data/backtranslation.py).
"""

from __future__ import annotations

import math
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from nmtcli.cli.common import say, warn
from nmtcli.errors import NmtError

# sentencepiece's special pieces (pad, unknown, BOS, EOS): a tag may not be one of them
SPECIAL_PIECES = ("<pad>", "<unk>", "<s>", "</s>")

if TYPE_CHECKING:
    from nmtcli.data.backtranslation import Synthetic

ATTEMPT = "backtranslation.attempt.json"  # the translation under way: whether the chunks left in the data dir are its own
BEAM = 5  # Edunov et al. 2018's beam for back-translation (and fairseq's recipe)


def back_translate(out: Path, mono: list[Path], reverse_model: str, sampling: str | None, tag: str | None, ratio: float,
                   source_lang: str, target_lang: str, seed: int, chunk_lines: int) -> Synthetic:
    """Check the inputs, translate the monolingual text (or find it translated), and return the synthetic pairs."""
    from nmtcli.cli.common import resolve_model
    from nmtcli.bulk import chunks_done, drop_other_attempt, parts_dir
    from nmtcli.cli.distill import _nmt
    from nmtcli.data import backtranslation as bt

    model = resolve_model(reverse_model)
    languages = _check_reverse(model, source_lang, target_lang)
    for path in mono:
        bt.check_monolingual(path, target_lang, source_lang, seed)
    source, target = bt.files(out, source_lang, target_lang)
    method = {"search": "sampling", "sampling": sampling, "seed": seed} if sampling else {"search": "beam", "beam": BEAM}
    wanted = {"inputs": bt.digests(mono), "reverse_model": {"path": str(model.resolve()), "fingerprint": bt.model_fingerprint(model)},
              "method": method}
    record = bt.current_record(out, wanted, source, target)
    if record is not None:
        say(f"back-translation: {source} is the reverse model's translation of these files already ({record['lines']:,} lines); reused")
        return bt.Synthetic(source, target, tag, ratio, record)
    bt.record_path(out).unlink(missing_ok=True)  # a translation cut short has none
    lines = bt.join_monolingual(mono, target)
    search = ["--sampling", sampling, "--seed", str(seed)] if sampling else ["--beam", str(BEAM)]
    args = ["translate", "-m", str(model), "-i", str(target), "-o", str(source), *search, *languages,
            "--chunk-lines", str(chunk_lines), "--precision", _precision()]
    say(f"back-translation of {lines:,} lines by {model} (resumable: the same command continues it)")
    if drop_other_attempt(parts_dir(source), out / ATTEMPT, "backtranslation", {**wanted, "args": args}):
        say(f"back-translation: the chunks of an earlier attempt with other files, model or settings dropped ({parts_dir(source)})")
    resumed = chunks_done(source)  # `nmt translate` takes them up (and says so)
    say(f"$ nmt {' '.join(shlex.quote(a) for a in args)}")
    _nmt(args)
    return bt.Synthetic(source, target, tag, ratio, bt.write_record(out, wanted, source, target, lines), resumed)


def _precision() -> str:
    """bf16 on a GPU; fp32 on a CPU, where int8's sums depend on the other sentences of a batch: a chunk size of its
    own (--chunk-pairs) or the same line twice gave other translations of 589 of 1,500 lines. In fp32 the translation
    is a function of the line alone, and so is the prepared data."""
    import torch

    return "bf16" if torch.cuda.is_available() else "fp32"


def _check_reverse(model: Path, source_lang: str, target_lang: str) -> list[str]:
    """The reverse model translates target -> source (pair_scores.check_direction, as the score filter's models). Returns
    the flags `nmt translate` needs for it (a multilingual model: -s TGT -t SRC)."""
    from nmtcli.pair_scores import check_direction

    if check_direction(model, target_lang, source_lang, "--bt-model", purpose=f"back-translation for {source_lang}->{target_lang} data",
                       fix=f"give a model that translates {target_lang} into {source_lang} (train one on the real pairs reversed)", warn=warn):
        return ["-s", target_lang, "-t", source_lang]
    return []


def check_flags(target_mono: list[Path] | None, bt_model: str | None, bt_sampling: str | None, vocab_from: str | None,
                tag: str | None, several: bool, ratio: float = 1.0) -> None:
    """The back-translation flags together, before anything is written (one error line, exit 2)."""
    if not target_mono and bt_model is None:
        if bt_sampling is not None:
            raise NmtError("--bt-sampling applies to back-translation", "add --target-mono FILE and --bt-model MODEL, or drop it", exit_code=2)
        return
    if not target_mono or bt_model is None:
        missing, given = ("--bt-model", "--target-mono") if bt_model is None else ("--target-mono", "--bt-model")
        raise NmtError(f"{given} without {missing}", "back-translation needs both: the target-language text and a model that "
                       "translates it into the source language", exit_code=2)
    if several:
        raise NmtError("back-translation prepares one language pair, not several --train corpora", "prepare one pair at a time", exit_code=2)
    if tag is not None and (not tag or any(c.isspace() for c in tag) or "\u2581" in tag or tag in SPECIAL_PIECES):
        raise NmtError(f"--bt-tag-token {tag!r} cannot be the tag",
                       "give a piece of its own: no space, no \u2581, none of " + " ".join(SPECIAL_PIECES) + " (the default: <BT>)", exit_code=2)
    if not math.isfinite(ratio):
        raise NmtError(f"--bt-ratio {ratio:g} is not a number of pairs", "give a finite ratio, e.g. 1 (as many real pairs as synthetic)", exit_code=2)
    if vocab_from is not None and tag is not None:
        raise NmtError("tagged back-translation adds a piece to the vocabulary, which --vocab-from keeps as it is",
                       "add --no-bt-tag, or leave out --vocab-from", exit_code=2)
    if bt_sampling is not None:
        from nmtcli.inference.sampling import SAMPLING_FORMS, parse_sampling

        try:
            parse_sampling(bt_sampling)
        except ValueError as e:
            raise NmtError(f"--bt-sampling {bt_sampling!r}: {e}", f"use {SAMPLING_FORMS}; e.g. --bt-sampling topk:10", exit_code=2) from None
