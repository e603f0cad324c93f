"""`nmt score`: sacreBLEU scores of a translation, or of the newest model on the prepared test set.

`--compat paper` adds (or gives instead) the paper's tokenized, compound-split BLEU (scoring.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli import options
from nmtcli.cli.common import progress_bar, resolve_model, say

NAME = "score"


def command(
    hypothesis: Annotated[Optional[str], typer.Argument(metavar="[HYP]", help="Translations to score, one per line ('-' for stdin). Omitted: translate the prepared test split with the model and score that.", show_default=False)] = None,
    ref: Annotated[Optional[Path], typer.Option("--ref", "-r", help="Reference translations, aligned with HYP.")] = None,
    metrics: Annotated[Optional[str], typer.Option(help="sacreBLEU metrics, comma-separated: bleu, chrf, ter. Default: bleu,chrf.", show_default=False)] = None,
    compat: Annotated[str, typer.Option(help="BLEU convention(s), comma-separated. sacrebleu: detokenized, the number to report. paper: the paper's tokenized BLEU (Moses tokenizer, compounds split at hyphens, multi-bleu.perl), as tensor2tensor's get_ende_bleu.sh computed it; reads higher and is not comparable with sacreBLEU.")] = "sacrebleu",
    target_lang: Annotated[Optional[str], typer.Option("--target-lang", "-t", help="Language of the Moses tokenizer for --compat paper. Default: the model's target language with no HYP, else the suffix of --ref (test.de: de).", show_default=False)] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of text lines.")] = False,
    width: Annotated[Optional[int], typer.Option(help="Decimals shown (sacreBLEU's --width). Default: 1; 2 for --compat paper, as multi-bleu.perl prints.", min=0, max=10, show_default=False)] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model for scoring with no HYP: a model dir or a Hub id OWNER/NAME. Default: $NMT_MODEL, else the newest under models/.")] = None,
    split: Annotated[str, typer.Option(help="Prepared split to translate when HYP is omitted: test or valid.")] = "test",
    device: Annotated[str, typer.Option(help="Device for translating when HYP is omitted: auto, cpu, cuda.")] = "auto",
    shortlist: Annotated[bool, options.shortlist()] = True,
) -> None:
    """Score translations with sacreBLEU (BLEU, chrF, TER), printed with their signatures.

    With HYP and --ref, the BLEU line is exactly what `sacrebleu REF -i HYP -f text` prints.
    With no HYP, translates the test split of the model's prepared data dir (beam 4, alpha 0.6) and
    scores it against the reference; the scores are recorded in the model dir's scores.json. A model trained
    on several pairs has each direction's test split translated, scored and recorded on its own. A model
    dir with a lexical shortlist translates with it, as `nmt translate` does; --no-shortlist scores the
    whole vocabulary's search (recorded apart: "test (no shortlist)").
    --compat paper gives the BLEU of the paper's Table 2 instead (--compat sacrebleu,paper: both).
    """
    from nmtcli.data.text import read_lines
    from nmtcli.errors import NmtError, check_readable
    from nmtcli.scoring import CONVENTIONS, moses_languages, paper_bleu, score

    conventions = [c.strip().lower() for c in compat.split(",") if c.strip()]
    if not conventions or any(c not in CONVENTIONS for c in conventions):
        raise NmtError(f"unknown --compat {compat!r}", f"choose from {', '.join(CONVENTIONS)}, or both comma-separated", exit_code=2)
    if metrics is not None and "sacrebleu" not in conventions:
        raise NmtError("--metrics chooses sacreBLEU's metrics, and --compat paper scores BLEU only",
                       "drop --metrics, or score both: --compat sacrebleu,paper", exit_code=2)
    names = [m.strip().lower() for m in (metrics or "bleu,chrf").split(",") if m.strip()]
    if target_lang is not None and target_lang not in moses_languages():
        raise NmtError(f"the Moses tokenizer does not know the language {target_lang!r}",
                       f"pass --target-lang with one of {', '.join(sorted(moses_languages()))}", exit_code=2)
    if hypothesis is None:
        translated = _translate_split(model, split, device, shortlist)
        if len(translated) > 1:  # a multilingual model: each direction it was trained on, scored and recorded on its own
            _score_directions(translated, names, conventions, target_lang, width, json_output)
            return
        hyps, refs, model_dir, label, lang = translated[0]
        lang_source = "the model's target language"
    else:
        if ref is None:
            raise NmtError("--ref is required when HYP is given", "pass the reference file with --ref", exit_code=2)
        if hypothesis != "-":
            check_readable(hypothesis, "pass a translation file, or '-' for stdin")
        check_readable(ref, "check the path given to --ref")
        hyps = list(read_lines(Path("/dev/stdin") if hypothesis == "-" else Path(hypothesis)))
        refs = list(read_lines(ref))
        model_dir, label = None, None
        lang, lang_source = ref.suffix.lstrip("."), f"the suffix of {ref.name}"
    if target_lang is not None:
        lang, lang_source = target_lang, "--target-lang"
    if "paper" in conventions and lang not in moses_languages():
        raise NmtError(f"--compat paper needs the target language for the Moses tokenizer, and {lang_source} ({lang!r}) is not one it knows",
                       "pass it with --target-lang, e.g. -t de", exit_code=2)
    results = []
    if "sacrebleu" in conventions:
        results += score(hyps, refs, names, 1 if width is None else width)
    if "paper" in conventions:
        say(f"paper BLEU: Moses-tokenized as {lang} ({lang_source}), compounds split; not comparable with sacreBLEU")
        results.append(paper_bleu(hyps, refs, lang, 2 if width is None else width))
    if model_dir is not None:
        _record(model_dir, label, results)
    if json_output:
        print(json.dumps({"sentences": len(hyps), "scores": [r.__dict__ for r in results]}, indent=2, ensure_ascii=False))
    else:
        for r in results:
            print(r.formatted)
    sys.stdout.flush()


def _translate_split(model: str | None, split: str, device: str, shortlist: bool = True):
    from nmtcli.data.prepare import read_manifest, reference_lines
    from nmtcli.device import resolve_device
    from nmtcli.errors import NmtError
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator
    from nmtcli.model.checkpoint import read_model_dir_config

    model_dir = resolve_model(model)
    values = read_model_dir_config(model_dir)
    data_dir = Path(values.get("training", {}).get("data_dir", ""))
    if not (data_dir / "manifest.json").is_file():
        raise NmtError(f"the data the model was trained on ({data_dir}) is not here", "pass HYP and --ref to score a translation")
    manifest = read_manifest(data_dir)
    if manifest.get("directions"):  # multilingual data: each direction's split (data/multilingual.py)
        directions = [(d["source"], d["target"], f"{split}.{d['source']}-{d['target']}") for d in manifest["directions"]]
        directions = [d for d in directions if (data_dir / f"{d[2]}.{d[0]}").is_file()]
        if not directions:
            raise NmtError(f"{data_dir} has no {split} split of any direction", f"prepare it with --{split} SRC-TGT=PREFIX, or pass HYP and --ref")
    else:
        directions = [(manifest["source_lang"], manifest["target_lang"], split)]
    translator = Translator(model_dir, resolve_device(device), SearchSettings(shortlist=shortlist),
                            languages=directions[0][:2] if manifest.get("directions") else (None, None))
    # --no-shortlist where the default search would use one: recorded apart from what users receive
    listed = _shortlist_skipped(model_dir, translator.model.config.vocab_size) if not shortlist else None
    out = []
    for src, tgt, name in directions:
        sources, refs = reference_lines(data_dir, name, src), reference_lines(data_dir, name, tgt)
        if manifest.get("directions"):
            translator.set_languages(src, tgt, str(model_dir))
        unlisted = listed is not None and (not manifest.get("directions") or listed.serves(*translator.languages))
        say(f"translating {len(sources):,} {name} sentences of {data_dir} with {model_dir}")
        hyps = []
        with progress_bar() as progress:
            for line in translator.translate(sources):
                hyps.append(line)
                progress("translating", len(hyps), len(sources))
        label = f"{manifest['name']}/{split}" + (f"/{src}-{tgt}" if manifest.get("directions") else "") + (" (no shortlist)" if unlisted else "")
        out.append((hyps, refs, model_dir, label, tgt))
    return out


def _shortlist_skipped(model_dir: Path, vocab_size: int):
    """The model dir's shortlist that --no-shortlist leaves out, or None (none, or one the default search would refuse)."""
    from nmtcli.errors import NmtError
    from nmtcli.inference.shortlist import load

    try:
        return load(model_dir, vocab_size)
    except NmtError:
        return None


def _score_directions(translated, names, conventions, target_lang, width, json_output) -> None:
    """Each direction's scores, recorded under its own label; printed as `DIRECTION  LINE`, or one JSON object."""
    from nmtcli.scoring import moses_languages, paper_bleu, score

    records = {}
    for hyps, refs, model_dir, label, lang in translated:
        results = score(hyps, refs, names, 1 if width is None else width) if "sacrebleu" in conventions else []
        if "paper" in conventions:
            lang = target_lang or lang
            if lang not in moses_languages():
                say(f"{label}: no paper BLEU, the Moses tokenizer does not know {lang!r}")
            else:
                results.append(paper_bleu(hyps, refs, lang, 2 if width is None else width))
        _record(model_dir, label, results)
        records[label.rsplit("/", 1)[1]] = (len(hyps), results)
    if json_output:
        print(json.dumps({d: {"sentences": n, "scores": [r.__dict__ for r in results]} for d, (n, results) in records.items()},
                         indent=2, ensure_ascii=False))
    else:
        for d, (_, results) in records.items():
            for r in results:
                print(f"{d}\t{r.formatted}")
    sys.stdout.flush()


def _record(model_dir: Path, label: str, results) -> None:
    from huggingface_hub import constants

    from nmtcli.files import atomic_write_json

    if Path(constants.HF_HUB_CACHE).resolve() in Path(model_dir).resolve().parents:
        say("not recorded: the model is in the Hub cache (`nmt pull REPO -o DIR` makes a copy that can keep scores)")
        return
    path = Path(model_dir) / "scores.json"
    recorded = json.loads(path.read_text()) if path.is_file() else {}
    # Merged: a score under one convention keeps those recorded under the other ("BLEU", "BLEU (paper)").
    recorded.setdefault(label, {}).update({r.name: {"score": r.score, "signature": r.signature} for r in results})
    atomic_write_json(path, recorded)
    say(f"recorded in {path}")
