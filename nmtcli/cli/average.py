"""`nmt average`: average the last checkpoints of a run (or those up to its best validation) into a model dir (sec. 6.1)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from nmtcli.cli import options
from nmtcli.cli.common import MODELS_ROOT, announce, default_run_dir, progress_bar, say

if TYPE_CHECKING:
    import torch

NAME = "average"


def command(
    paths: Annotated[Optional[list[Path]], typer.Argument(help="A run dir (--last of its checkpoints are averaged, as --at says) or checkpoint dirs. Default: the newest run under runs/.", show_default=False)] = None,
    last: Annotated[Optional[int], typer.Option(help="How many of the run's checkpoints to average (sec. 6.1: 5 for base, 20 for big). Default: 5; for a fine-tuning run (`nmt train --init`) 1, its best checkpoint alone.", min=1, show_default=False)] = None,
    at: Annotated[str, typer.Option(help="Which checkpoints of a run: the newest (last), those up to its best validation (best), or auto: best for a run that validated BLEU (tiny, small and the students, which stop early on it), else last.")] = "auto",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Model dir to write. Default: models/RUN.")] = None,
    calibrate: Annotated[bool, typer.Option(help="Calibrate the model's brevity penalty on the run's validation split: the smallest weight whose "
                                                 "translations reach BLEU's brevity penalty 0.96 (as long as their references within some 4%); 0, the paper's "
                                                 "search, for a model already that long. --no-calibrate: 0 without translating.")] = True,
    device: Annotated[str, options.device()] = "auto",
) -> None:
    """Average checkpoints element-wise into a self-contained model dir.

    The model dir holds config.json, model.safetensors, sentencepiece.model and a README.md model card:
    everything `nmt translate -m DIR` needs. Averaging one checkpoint exports it. A run that validated
    BLEU (tiny, small and the students, which stop early on it) is averaged over the checkpoints up to its best
    validation, which `nmt train` keeps; other runs over their newest, as the paper's. A fine-tuning
    run gives its best checkpoint alone: averaging in the less adapted ones before it undoes part of
    the adaptation.

    Then the model's brevity penalty is calibrated: a model trained on a small corpus ends long sentences
    early, and `nmt translate` holds its translations to the length its training data predicts with the
    weight found here (docs/translating.md, "Length"). It translates the validation split a few times.
    """
    from nmtcli.cli.shortlist import written_over
    from nmtcli.errors import NmtError
    from nmtcli.training.average import AT, average_checkpoints, checkpoints_to_average, default_last

    if at not in AT:
        raise NmtError(f"unknown --at {at!r}", "choose auto, best or last", exit_code=2)
    if calibrate:  # a device that is not there is said before anything is written
        from nmtcli.device import resolve_device

        on = resolve_device(device)

    paths = paths or [default_run_dir()]
    if len(paths) == 1 and (paths[0] / "checkpoints").is_dir():
        run_dir = paths[0]
        last = last or default_last(run_dir)
        checkpoints, where = checkpoints_to_average(run_dir, last, at)
        if len(checkpoints) < last:
            say(f"{run_dir} has only {len(checkpoints)} checkpoint(s) to average; averaging those")
        where = f", {where}"
    else:
        checkpoints, where = paths, ""
        run_dir = checkpoints[-1].resolve().parent.parent
    out = output or MODELS_ROOT / run_dir.name
    say(f"averaging {len(checkpoints)} checkpoint(s){where}: {', '.join(c.name for c in checkpoints)}")
    announce("model", out)
    values = average_checkpoints(checkpoints, out)
    written_over(out)  # before the calibration, which translates with the shortlist it keeps
    if calibrate:
        calibrate_length(out, values, on)
    say(f"done; next: nmt translate -m {out} < input.txt")


def calibrate_length(model_dir: Path, values: dict, device: torch.device) -> None:
    """The model dir's brevity penalty, calibrated on the validation split of the data it was trained on
    (training/brevity.py) and recorded in its config.json; said and skipped where there is none to use."""
    from nmtcli.data.prepare import read_manifest
    from nmtcli.errors import NmtError
    from nmtcli.training.average import record_search
    from nmtcli.training.brevity import TARGET_BP, calibrate

    training, languages = values["training"], values["languages"]
    data_dir = Path(training["data_dir"])
    skipped = "brevity penalty not calibrated (the model translates with the paper's search; --brevity-penalty W sets one)"
    if training.get("directions"):
        say(f"{skipped}: multilingual data's directions differ in length")
        return
    splits = [data_dir / f"valid.{languages[side]}" for side in ("source", "target")]
    if not (data_dir / "manifest.json").is_file() or not all(path.is_file() for path in splits):
        say(f"{skipped}: {data_dir}, the run's data, has no validation split here (average with it in place to calibrate)")
        return
    try:
        manifest = read_manifest(data_dir)
        if (manifest.get("source_lang"), manifest.get("target_lang")) != (languages["source"], languages["target"]):
            raise NmtError(f"{data_dir} now holds {manifest.get('source_lang')}-{manifest.get('target_lang')} data, the model translates "
                           f"{languages['source']}-{languages['target']}")
        with progress_bar() as progress:
            found = calibrate(model_dir, data_dir, manifest, str(device), progress)
    except NmtError as e:
        say(f"{skipped}: {e.message}")
        return
    except (OSError, UnicodeError) as e:  # the model is written: a data file that cannot be read only skips the calibration
        say(f"{skipped}: cannot read {data_dir}'s validation split: {e}")
        return
    record = record_search(model_dir, found.record())["search"]
    before, after = found.trial(0.0), found.trial(found.weight)
    if found.weight == 0:
        say(f"brevity penalty 0 (the paper's search): the validation translations are long enough (BP {before.bp:.3f})")
    else:
        short = "" if after.bp >= TARGET_BP else f", the most tried and still short of {TARGET_BP}"
        say(f"brevity penalty {found.weight:g} (length ratio {record['length_ratio']:.3f}{short}): validation BP {before.bp:.3f} -> {after.bp:.3f}, "
            f"BLEU {before.bleu:.1f} -> {after.bleu:.1f} ({found.lines} lines; --brevity-penalty 0 translates with the paper's search)")
