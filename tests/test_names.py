"""One name per idea: docs/architecture.md's Names table holds every flag of every command and every training
setting, once; retired names are gone from the commands and still work (issue 39)."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import fields
from pathlib import Path

import torch
import typer

from nmtcli.cli import app
from nmtcli.cli.renamed import RENAMED_FLAGS
from nmtcli.cli.train import RUN_KEYS, read_config_file
from nmtcli.training.settings import RENAMED, TrainSettings, current_names, flag_settings, train_settings_for
from nmtcli.training.trainer import Trainer

ROOT = Path(__file__).resolve().parent.parent
# A run dir's config.json as nmt wrote it at commit 2f24993, before the renames: `nmt train --preset tiny
# --max-steps 2 --max-tokens 300 --save-every 10m --max-time 5m --valid-every 1000 --log-every 1 --device cpu`.
OLD_RUN_CONFIG = Path(__file__).parent / "data" / "run-config-2f24993.json"


def _tables() -> tuple[list[list[str]], list[list[str]]]:
    """The Names table's rows and the retired names' rows, as cells."""
    section = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8").split("\n## Names\n", 1)[1].split("\n## ", 1)[0]
    tables: list[list[list[str]]] = []
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if cells[0] in ("name", "retired"):
            tables.append([])
        elif not set(cells[0]) <= set("-"):
            tables[-1].append(cells)
    names, retired = tables
    return names, retired


def _ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _flags_by_row() -> list[dict[str, set[str]]]:
    """Each row's flags, each with the commands the row names for it ("import" stands for its subcommands)."""
    rows = []
    for _, _, flags, _ in _tables()[0]:
        row: dict[str, set[str]] = {}
        for group, commands in re.findall(r"((?:`--[\w-]+`(?:, )?)+)\s*\(([^)]*)\)", flags):
            for flag in _ticked(group):
                row.setdefault(flag, set()).update(c.strip() for c in commands.split(","))
        rows.append(row)
    return rows


def _commands():
    """(command path, visible long flags) of every command of `nmt`, the root's options included."""

    def walk(command, path):
        subs = getattr(command, "commands", None)
        own = [o for p in command.params if not getattr(p, "hidden", False) for o in p.opts if o.startswith("--")]
        if subs:
            yield (path or "nmt"), own
            for name, sub in subs.items():
                yield from walk(sub, f"{path} {name}".strip())
        else:
            yield path, own

    return list(walk(typer.main.get_command(app), ""))


def test_every_flag_of_every_command_is_in_the_names_table_with_that_command():
    rows = _flags_by_row()
    listed = {flag: commands for row in rows for flag, commands in row.items()}
    for command, flags in _commands():
        for flag in flags:
            if flag == "--help":
                continue
            assert flag in listed, f"`nmt {command}` has {flag}, which docs/architecture.md's Names table does not list"
            assert command in listed[flag] or command.split()[0] in listed[flag], f"the Names table lists {flag} without `{command}`"


def test_every_training_setting_and_config_key_is_in_the_names_table():
    keys = {key for row in _tables()[0] for key in _ticked(row[3])}
    for name in [f.name for f in fields(TrainSettings)] + list(RUN_KEYS):
        assert name in keys, f"the training setting {name} (a --config key) is not in docs/architecture.md's Names table"


def test_no_name_or_flag_is_in_the_names_table_twice():
    names = [name for row in _tables()[0] for name in _ticked(row[0])]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})
    flags = [flag for row in _flags_by_row() for flag in row]
    assert len(flags) == len(set(flags)), sorted({f for f in flags if flags.count(f) > 1})
    # each flag is its row's name, spelled as a flag (--max-len-a: max_len_a; --prefix-file: prefix; --no-protect: protect)
    for row, flags_of_row in zip(_tables()[0], _flags_by_row()):
        stems = {name.replace("_", "-") for name in _ticked(row[0])}
        for flag in flags_of_row:
            assert any(stem in flag for stem in stems) or flag.removeprefix("--").split("-")[0] in stems, (flag, row[0])


def test_retired_names_are_no_flag_or_setting_and_each_maps_to_a_name_in_the_table():
    retired = " ".join(cells[0] for cells in _tables()[1])
    names = {name for row in _tables()[0] for name in _ticked(row[0])}
    visible = dict(_commands())
    for command, renamed in RENAMED_FLAGS.items():
        for old, new in renamed.items():
            assert old in retired, f"{old} ({command}) is retired in cli/renamed.py but not in the Names table's retired list"
            assert old not in visible[command] and new in visible[command], (command, old, new)
    settings = {f.name for f in fields(TrainSettings)}
    for old, new in RENAMED.items():
        assert f"`{old}`" in retired and old not in settings and new in settings and new in names
    # today's main had these ideas under two names each; each has one now
    flags = {flag for _, own in _commands() for flag in own}
    for old_flag in ("--dtype", "--score-only"):
        assert old_flag not in flags


def test_old_flag_names_still_work_with_a_one_line_notice(random_model, nmt_main, tmp_path):
    (tmp_path / "src.txt").write_text("a\n")
    dtype = nmt_main("translate", "-m", str(random_model), "--device", "cpu", "--dtype", "bf16", input="a\n", check=False)
    assert "--dtype is now --precision" in dtype.stderr
    assert dtype.returncode == 2 and dtype.stderr.strip().splitlines()[-1] == \
        "nmt: error: --precision bf16 needs a GPU (use --precision fp32 (exact) or int8 (faster) on the CPU)"
    old = nmt_main("translate", "-m", str(random_model), "--device", "cpu", "--dtype=fp32", "--score-only", "--target-file",
                   str(tmp_path / "src.txt"), "-i", str(tmp_path / "src.txt"))
    new = nmt_main("translate", "-m", str(random_model), "--device", "cpu", "--precision", "fp32", "--forced-decoding", "--target-file",
                   str(tmp_path / "src.txt"), "-i", str(tmp_path / "src.txt"))
    assert old.stdout == new.stdout and float(new.stdout) < 0
    assert "--score-only is now --forced-decoding" in old.stderr and "is now" not in new.stderr
    assert "--dtype is now --precision" in old.stderr
    # after a bare --, nothing is renamed: an argument that looks like an old flag is left alone
    from nmtcli.cli.renamed import current_args

    heard: list[str] = []
    assert current_args(["train", "--max-tokens=300", "--", "--max-tokens"], heard.append) == ["train", "--batch-tokens=300", "--", "--max-tokens"]
    assert heard == ["--max-tokens is now --batch-tokens (the old name still works, for now)"]
    assert current_args(["prepare", "--max-tokens", "80"], heard.append) == ["prepare", "--max-tokens", "80"]  # prepare's own


def test_settings_under_old_names_load_from_a_config_file_and_a_run_dir(tmp_path, nmt_main):
    old = json.loads(OLD_RUN_CONFIG.read_text())["training"]
    assert {"max_tokens", "max_minutes", "save_minutes"} <= set(old)
    # the run dir's config.json reruns its recipe, in today's names
    values = read_config_file(OLD_RUN_CONFIG)
    assert values["batch_tokens"] == 300 and values["max_time"] == 5.0 and values["save_every"] == "10m"
    _, settings = train_settings_for(values.pop("preset"), **values)
    assert settings.save_interval() == (None, 10.0) and settings.batch_tokens == 300 and settings.max_time == 5.0
    # a hand-written config file with an old key loads with a notice per old key
    (tmp_path / "old.json").write_text(json.dumps({"preset": "tiny", "max_tokens": 256, "save_minutes": 0, "save_every": 7,
                                                   "data": str(tmp_path / "none")}))
    result = nmt_main("train", "--config", str(tmp_path / "old.json"), check=False)
    assert "old.json: max_tokens is now batch_tokens" in result.stderr and "save_minutes is now save_every" in result.stderr
    assert result.returncode != 0 and "none" in result.stderr.strip().splitlines()[-1]  # got as far as the data dir
    assert current_names({"save_every": 7, "save_minutes": 0}) == {"save_every": 7}


def test_a_run_dir_written_before_the_renames_resumes(prepared, tmp_path, nmt_main):
    """A run started by today's code, its config.json and trainer state put back as 2f24993 wrote them, resumes."""
    config, settings = train_settings_for("tiny", max_steps=2, batch_tokens=300, save_every="10m", max_time=5.0, valid_every=1000,
                                          log_every=1, device="cpu")
    run = tmp_path / "run"
    Trainer(run, prepared, config, settings).run()
    written = json.loads((run / "config.json").read_text())
    old = json.loads(OLD_RUN_CONFIG.read_text())["training"]
    new_since = {"min_delta"}  # settings added after 2f24993
    assert {k: v for k, v in current_names(old).items() if k in written["training"]} == {
        k: v for k, v in written["training"].items() if k not in new_since}
    written["training"] = old
    (run / "config.json").write_text(json.dumps(written))
    state_path = run / "checkpoints" / "2" / "trainer.pt"
    state = torch.load(state_path, weights_only=False)
    state["batch_max_tokens"] = state.pop("batch_tokens")
    torch.save(state, state_path)
    shutil.rmtree(run / "checkpoints" / "best", ignore_errors=True)

    resumed = nmt_main("train", "--data", str(prepared), "-o", str(run), "--preset", "tiny", "--max-tokens", "300",
                       "--max-steps", "3", "--save-every", "10m", "--valid-every", "1000", "--log-every", "1", "--device", "cpu")
    assert "resuming from" in resumed.stderr and "--max-tokens is now --batch-tokens" in resumed.stderr
    assert (run / "checkpoints" / "3").is_dir()
    assert torch.load(run / "checkpoints" / "3" / "trainer.pt", weights_only=False)["batch_tokens"] == 300


def test_nmt_train_has_one_flag_per_training_setting_made_from_its_field():
    command = typer.main.get_command(app).commands["train"]
    options = {p.name: p for p in command.params}
    for f in flag_settings():
        option = options[f.name]
        assert option.opts == ["--" + f.name.replace("_", "-")] and option.help == f.metadata["help"], f.name
        assert option.default is None  # unset: the preset's value
    assert {p.name for p in command.params} - {f.name for f in flag_settings()} == {"data", "init", "preset", "output", "norm", "config",
                                                                                     "gpus", "restart"}
    assert options["compile"].secondary_opts == ["--no-compile"]


def test_translator_load_still_takes_dtype_with_a_deprecation_warning(random_model):
    import pytest

    from nmtcli import Translator

    lines = ["a b c", "d e"]
    with pytest.warns(DeprecationWarning, match="precision"):
        old = Translator.load(random_model, device="cpu", dtype="int8")
    new = Translator.load(random_model, device="cpu", precision="int8")
    assert [t.text for t in old.translate(lines)] == [t.text for t in new.translate(lines)]
    assert old._engine.precision == new._engine.precision == "int8"
