"""`nmt info`: what a model dir (or a preset) is: architecture, parameters, vocabulary, how it was made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

NAME = "info"


def command(
    model_dir: Annotated[Optional[str], typer.Argument(metavar="[MODEL_DIR]", help="Model dir to describe, or a Hub id OWNER/NAME.", show_default=False)] = None,
    revision: Annotated[Optional[str], typer.Option(help="Branch, tag or commit when MODEL_DIR is a Hub id.")] = None,
    preset: Annotated[Optional[str], typer.Option(help="Describe a preset instead: tiny, base or big.")] = None,
    vocab_size: Annotated[int, typer.Option(help="Vocabulary size assumed with --preset (sec. 5.1: 37,000).", min=1)] = 37000,
    json_output: Annotated[bool, typer.Option("--json", help="Print JSON (key `parameters` holds the count).")] = False,
) -> None:
    """Show a model's architecture, parameter count, vocabulary and training metadata."""
    from nmtcli.errors import NmtError
    from nmtcli.model.checkpoint import SPM_FILE, WEIGHTS_FILE, check_weights, read_model_dir_config
    from nmtcli.model.config import PRESETS, ModelConfig
    from nmtcli.model.transformer import count_parameters

    if (model_dir is None) == (preset is None):
        raise NmtError("pass either MODEL_DIR or --preset", "e.g. `nmt info models/base` or `nmt info --preset big`", exit_code=2)
    report: dict[str, Any]
    if preset is not None:
        if preset not in PRESETS:
            raise NmtError(f"unknown preset {preset!r}", f"choose one of {', '.join(PRESETS)}", exit_code=2)
        config = PRESETS[preset].replace(vocab_size=vocab_size)
        report = {"preset": preset, "model": config.to_dict()}
    else:
        from nmtcli.cli.common import resolve_model

        model_dir = resolve_model(model_dir, revision)
        values = read_model_dir_config(model_dir)
        check_weights(Path(model_dir) / WEIGHTS_FILE)  # a missing or truncated file is named, not described
        config = ModelConfig.from_dict(values["model"])
        report = {"model_dir": str(model_dir), **values}
        scores = model_dir / "scores.json"
        if scores.is_file():
            report["scores"] = json.loads(scores.read_text())
        report["files"] = {p.name: p.stat().st_size for p in sorted(model_dir.iterdir()) if p.is_file()}
        if (model_dir / SPM_FILE).is_file():
            report["sentencepiece_pieces"] = _pieces(model_dir / SPM_FILE)
    report["parameters"] = count_parameters(config)
    if json_output:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return
    _print_table(report, config)


def _pieces(path: Path) -> int:
    from nmtcli.data.text import load_sentencepiece

    return load_sentencepiece(path).get_piece_size()


def _print_table(report: dict[str, Any], config) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    title = report.get("model_dir") or f"preset {report['preset']}"
    table.add_row("parameters", f"{report['parameters']:,}")
    table.add_row("architecture", f"{config.layers}+{config.layers} layers, d_model {config.d_model}, d_ff {config.d_ff}, "
                  f"{config.heads} heads, {config.norm}-norm, {config.activation}, dropout {config.dropout}")
    table.add_row("vocabulary", f"{config.vocab_size:,} (shared source/target/output)")
    origin = report.get("imported_from")
    if origin:
        table.add_row("imported from", f"{origin.get('kind')} model {origin.get('source')}" + (f" at {origin['revision']}" if origin.get("revision") else ""))
    variants = [f"{config.positions} positions"] if config.positions != "interleaved" else []
    variants += ["final logits bias"] if config.final_logits_bias else []
    variants += ["unscaled embeddings"] if not config.scale_embedding else []
    if variants:
        table.add_row("variants", ", ".join(variants))
    if "languages" in report:
        table.add_row("languages", f"{report['languages']['source']} -> {report['languages']['target']}")
    training = report.get("training")
    if training:
        table.add_row("training", f"{training['preset']} on {training['data']} ({training['train_pairs']:,} pairs), "
                      f"{training['steps']} steps, averaged {len(training['averaged_checkpoints'])} checkpoint(s)")
    for label, metrics in report.get("scores", {}).items():
        table.add_row(f"score {label}", ", ".join(f"{name} {v['score']:.2f}" for name, v in metrics.items()))
    for name, size in report.get("files", {}).items():
        table.add_row("file", f"{name} ({size:,} bytes)")
    console = Console()
    console.print(f"[bold]{title}[/bold]")
    console.print(table)
