"""`nmt export ctranslate2`: write a model dir as a CTranslate2 model for fast CPU/GPU inference."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli.common import command_group, announce

NAME = "export"

app = command_group(NAME, "Convert an nmt model dir for another inference engine.")


@app.command("ctranslate2")
def ctranslate2(
    model_dir: Annotated[str, typer.Argument(help="Model dir, or a Hub id OWNER/NAME.", show_default=False)],
    out_dir: Annotated[Path, typer.Argument(help="Dir to write the CTranslate2 model to (must not exist, or use --force).", show_default=False)],
    quantization: Annotated[Optional[str], typer.Option(help="Weight type: int8, int8_float32, int8_float16, int8_bfloat16, int16, float16, bfloat16, float32. Default: float32, as trained.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace OUT_DIR if it exists.")] = False,
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit when MODEL_DIR is a Hub id.")] = None,
) -> None:
    """Export a model to CTranslate2 (its post- or pre-norm Transformer spec) for `nmt translate --engine ctranslate2`.

    Needs the ctranslate2 extra (`pip install "nmtcli[ctranslate2]"`). OUT_DIR gets model.bin,
    the vocabularies, config.json, and nmt.json with the tokenizer files, so it translates raw text.
    """
    from nmtcli.cli.common import resolve_model
    from nmtcli.interop.ctranslate2 import export_ctranslate2

    source = resolve_model(model_dir, revision)
    announce("the CTranslate2 model", out_dir)
    export_ctranslate2(source, out_dir, quantization=quantization, force=force)
    _warn_brevity(source)
    _warn_shortlist(source)
    print(out_dir)


def _warn_brevity(model_dir: Path) -> None:
    """A model whose `nmt average` calibrated a brevity penalty: CTranslate2's search has none."""
    from nmtcli.cli.common import warn
    from nmtcli.model.checkpoint import read_model_dir_config

    search = read_model_dir_config(model_dir).get("search") or {}
    if search.get("brevity_penalty"):
        warn(f"{model_dir} translates with brevity penalty {search['brevity_penalty']:g}, which CTranslate2 does not have: "
             "the export translates as the paper's search (shorter; `nmt translate -m MODEL_DIR` keeps it)")


def _warn_shortlist(model_dir: Path) -> None:
    """A model with a lexical shortlist (`nmt shortlist`): the export leaves it out (CTranslate2's vocabulary map restricts
    a whole batch to one union of lists, not each sentence to its own), so CTranslate2 searches the whole vocabulary."""
    from nmtcli.cli.common import warn
    from nmtcli.model.checkpoint import SHORTLIST_FILE

    if (Path(model_dir) / SHORTLIST_FILE).exists():
        warn(f"{model_dir} has a lexical shortlist, which the export leaves out: CTranslate2 searches the whole vocabulary "
             "(slower on a CPU; `nmt translate -m MODEL_DIR` searches with the shortlist)")
