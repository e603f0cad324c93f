"""What a model dir, a run dir or a Hub model is: the facts `nmt info` shows, as plain JSON-ready dicts.

Nothing here prints; `cli/info.py` renders the result as a table or as JSON. Each report holds the
dir's own `config.json` as it is (so its keys stay those of the file) plus what is computed from the
files: "kind", "parameters", "files" (name -> bytes), "sha256" (name -> hex digest) and, per kind,
"scores", "checkpoints", "steps", "resume", "hub", ...

Checksums read each file once in 1 MiB pieces (memory for one piece, however large the weights) and
report progress through a callback. A Hub model is compared with the Hub's own listing: the sha256 of
the content for files stored with Git LFS (the weights), the git blob id for the others.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any

from nmtcli.checksums import Progress, file_digests
from nmtcli.data.text import SPM_FILE
from nmtcli.errors import NmtError
from nmtcli.files import read_json
from nmtcli.inference.language_codes import zero_shot
from nmtcli.model.checkpoint import CONFIG_FILE, SHORTLIST_FILE, WEIGHTS_FILE, check_weights, read_model_dir_config

EXPECTED = "pass a model dir, a run dir or a Hub id OWNER/NAME: what `nmt average`, `nmt train` and `nmt push` make"


def _files(directory: Path, progress: Progress | None, git_blob: bool = False) -> dict[str, dict[str, Any]]:
    """The regular files directly in `directory` (links followed): name -> {"size", "sha256"[, "blob_id"]}."""
    return {p.name: {"size": p.stat().st_size, **file_digests(p, progress, git_blob)}
            for p in sorted(directory.iterdir()) if p.is_file()}


def _file_keys(files: dict[str, dict[str, Any]]) -> dict[str, Any]:
    # "files" keeps its original shape (name -> size); the checksums come beside it.
    return {"files": {n: f["size"] for n, f in files.items()}, "sha256": {n: f["sha256"] for n, f in files.items()}}


def _pieces(path: Path) -> int:
    from nmtcli.data.text import load_sentencepiece

    return load_sentencepiece(path).get_piece_size()


def _parameters(model: dict[str, Any]) -> int:
    from nmtcli.model.config import ModelConfig
    from nmtcli.model.transformer import count_parameters

    return count_parameters(ModelConfig.from_dict(model))


def _written(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime).astimezone().isoformat(timespec="seconds")


# --- what a path is ------------------------------------------------------------------------------


def kind_of(path: Path) -> str:
    """"model_dir" or "run_dir"; anything else is an NmtError that says what was expected."""
    path = Path(path)
    if not path.exists():
        raise NmtError(f"{path} does not exist", EXPECTED)
    if not path.is_dir():
        raise NmtError(f"{path} is a file, not a model dir or a run dir", EXPECTED)
    if not (path / CONFIG_FILE).is_file():
        if (path / "manifest.json").is_file():
            raise NmtError(f"{path} is a prepared data dir (it has no {CONFIG_FILE}), not a model dir or a run dir", EXPECTED)
        raise NmtError(f"{path} has no {CONFIG_FILE}: it is not a model dir or a run dir", EXPECTED)
    values = read_json(path / CONFIG_FILE, ("", ""), "re-create the dir with the nmt command that wrote it")
    if isinstance(values, dict) and (values.get("format") == "nmt-run" or ("training" in values and (path / "checkpoints").is_dir())):
        return "run_dir"
    if isinstance(values, dict) and "model" in values:
        return "model_dir"
    raise NmtError(f"{path / CONFIG_FILE} is not nmt's: {path} is not a model dir or a run dir",
                   EXPECTED + "; for a transformers model run `nmt import marian`, `nmt import m2m100` or `nmt import nllb` first")


# --- model dirs ----------------------------------------------------------------------------------


def _model_dir(model_dir: Path, progress: Progress | None, git_blob: bool) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    values = read_model_dir_config(model_dir)
    report: dict[str, Any] = {"kind": "model_dir", "model_dir": str(model_dir), **values}
    scores = model_dir / "scores.json"
    if scores.is_file():
        report["scores"] = read_json(scores, ("", ""), "re-create it with `nmt score`, or delete it")
    files = _files(model_dir, progress, git_blob)
    report.update(_file_keys(files))
    if (model_dir / SPM_FILE).is_file():
        report["sentencepiece_pieces"] = _pieces(model_dir / SPM_FILE)
    report["parameters"] = _parameters(values["model"])
    if (model_dir / SHORTLIST_FILE).exists() or (model_dir / SHORTLIST_FILE).is_symlink():
        report["shortlist"] = _shortlist_info(model_dir, int(values["model"]["vocab_size"]))
    trained = (values.get("training") or {}).get("directions")
    if trained and (values.get("tokenizer") or {}).get("languages"):  # a multilingual model of nmt's: which directions it learned
        report["directions"] = {"trained": trained, "zero_shot": zero_shot(list(values["tokenizer"]["languages"]), trained)}
    return report, files


def _shortlist_info(model_dir: Path, vocab_size: int) -> dict[str, Any]:
    """How a model's lexical shortlist was learnt and what its check measured (the "info" it records), or {"problem": why
    `nmt translate` refuses it} for a file that is not one for this model (inference/shortlist.py's load, which judges)."""
    from nmtcli.inference.shortlist import load

    try:
        shortlist = load(model_dir, vocab_size)
    except NmtError as e:
        return {"problem": e.message.replace(str(Path(model_dir) / SHORTLIST_FILE), SHORTLIST_FILE)}
    return shortlist.info if shortlist is not None else {}


def describe_model_dir(model_dir: Path, progress: Progress | None = None) -> dict[str, Any]:
    """A model dir: its config.json, scores.json, parameter count, sentencepiece size, and every file's size and sha256."""
    read_model_dir_config(model_dir)
    check_weights(Path(model_dir) / WEIGHTS_FILE)  # a missing or truncated file is named, not described
    return _model_dir(Path(model_dir), progress, git_blob=False)[0]


def describe_preset(preset: str, vocab_size: int) -> dict[str, Any]:
    from nmtcli.model.config import PRESETS

    if preset not in PRESETS:
        raise NmtError(f"unknown preset {preset!r}", f"choose one of {', '.join(PRESETS)}", exit_code=2)
    from dataclasses import asdict

    from nmtcli.training.settings import TRAIN_PRESETS

    model = PRESETS[preset].replace(vocab_size=vocab_size).to_dict()
    return {"kind": "preset", "preset": preset, "model": model, "parameters": _parameters(model),
            "recipe": asdict(TRAIN_PRESETS[preset])}


# --- Hub models ----------------------------------------------------------------------------------


def describe_hub_model(repo_id: str, revision: str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """A Hub model as the Hub cache holds it, each file checked against what the Hub lists for that commit.

    report["hub"]["files"][name]: {"lfs", "expected", "actual", "match"}, with "sha256:<hex>" for LFS
    files and "git-sha1:<hex>" for the others. Offline (or with the Hub unreachable) the expected values
    are the ETags the cache recorded at download time; "source" says which ("hub" or "hub cache").
    """
    from nmtcli import hub

    snapshot = hub.resolve_model(repo_id, revision)
    report, files = _model_dir(snapshot, progress, git_blob=True)
    commit = snapshot.name  # the cache keeps each snapshot in snapshots/<commit>/
    report["kind"] = "hub_model"
    checked: dict[str, Any] = {"repo_id": repo_id, "revision": revision, "commit": commit}
    remote: dict[str, hub.RemoteFile] | None = None
    if hub.is_offline():
        checked["note"] = "HF_HUB_OFFLINE is set"
    else:
        try:
            remote = hub.remote_files(repo_id, commit)
        except NmtError as e:
            checked["note"] = str(e)
    checked["source"] = "hub" if remote is not None else "hub cache"
    results = {}
    for name, local in files.items():
        if remote is not None:
            results[name] = _against_listing(local, remote.get(name))
        else:
            results[name] = _against_etag(local, hub.cached_etag(snapshot / name))
        if results[name]["match"] is False:
            results[name]["blob"] = str((snapshot / name).resolve())
    checked["files"] = results
    verdicts = [r["match"] for r in results.values()]
    checked["match"] = False if False in verdicts else (True if all(v is True for v in verdicts) else None)
    report["hub"] = checked
    return report


def _against_listing(local: dict[str, Any], remote) -> dict[str, Any]:
    if remote is None:
        return {"lfs": None, "expected": None, "actual": f"sha256:{local['sha256']}", "match": False, "problem": "not on the Hub at this commit"}
    if remote.sha256:
        expected, actual = f"sha256:{remote.sha256}", f"sha256:{local['sha256']}"
    else:
        expected, actual = f"git-sha1:{remote.blob_id}", f"git-sha1:{local['blob_id']}"
    result = {"lfs": remote.sha256 is not None, "expected": expected, "actual": actual, "match": expected == actual}
    if remote.size != local["size"]:
        result.update(match=False, problem=f"{local['size']:,} bytes, the Hub lists {remote.size:,}")
    return result


def _against_etag(local: dict[str, Any], etag: str | None) -> dict[str, Any]:
    if etag is None:
        return {"lfs": None, "expected": None, "actual": f"sha256:{local['sha256']}", "match": None, "problem": "the cache recorded no ETag"}
    lfs = len(etag) == 64  # an LFS file's ETag is its sha256; any other file's its git blob id (sha1)
    expected = f"sha256:{etag}" if lfs else f"git-sha1:{etag}"
    actual = f"sha256:{local['sha256']}" if lfs else f"git-sha1:{local['blob_id']}"
    return {"lfs": lfs, "expected": expected, "actual": actual, "match": expected == actual}


# --- run dirs ------------------------------------------------------------------------------------


def describe_run_dir(run_dir: Path, average_last: int | None, progress: Progress | None = None) -> dict[str, Any]:
    """A run dir of `nmt train`: its config, steps, checkpoints, validations, resumability and what averaging takes.

    Checksums cover the files at the top of the run dir (config.json, sentencepiece.model, metrics.jsonl);
    checkpoints are listed with their size and time, not hashed (trainer.pt holds twice the weights).
    """
    from nmtcli.training.metrics import read_metrics
    from nmtcli.training.rundir import BEST, checkpoint_dirs, read_run_config

    run_dir = Path(run_dir)
    values = read_run_config(run_dir)
    report: dict[str, Any] = {"kind": "run_dir", "run_dir": str(run_dir), **values}
    training, data = values.get("training", {}), values.get("data", {})
    report["parameters"] = _parameters(values["model"])
    if "source_lang" in data:
        report["languages"] = {"source": data["source_lang"], "target": data["target_lang"]}
    if (run_dir / SPM_FILE).is_file():
        report["sentencepiece_pieces"] = _pieces(run_dir / SPM_FILE)

    found = checkpoint_dirs(run_dir)
    report["checkpoints"] = [
        {"step": int(c.name), "path": str(c), "written": _written(c / "trainer.pt"), "size": sum(f.stat().st_size for f in c.iterdir() if f.is_file())}
        for c in found
    ]
    best_dir = run_dir / "checkpoints" / BEST
    report["best"] = None
    if (best_dir / CONFIG_FILE).is_file() and (best_dir / WEIGHTS_FILE).is_file():
        best = read_json(best_dir / CONFIG_FILE, ("", ""), "it is rewritten at the next better validation").get("best") or {}
        report["best"] = {**best, "path": str(best_dir), "written": _written(best_dir / WEIGHTS_FILE)}

    log = read_metrics(run_dir)
    validations = [e for e in log if "valid_nll" in e]
    done = int(found[-1].name) if found else 0
    report["steps"] = {"done": done, "max": training.get("max_steps"), "logged": max((e["step"] for e in log), default=0)}
    report["validation"] = validations[-1] if validations else None
    report["status"] = _status(done, training, validations)
    report["resume"] = _resume(run_dir, values, done, report["status"])
    from nmtcli.training.average import checkpoints_to_average, default_last

    average_last = average_last or default_last(run_dir)
    report["average"] = {"last": average_last, "checkpoints": [], "which": None}
    if found:
        chosen, which = checkpoints_to_average(run_dir, average_last)
        report["average"].update(checkpoints=[int(c.name) for c in chosen], which=which)
    report.update(_file_keys(_files(run_dir, progress)))
    return report


def _status(done: int, training: dict[str, Any], validations: list[dict[str, Any]]) -> str:
    """"not_started", "finished", "early_stopped", or "unfinished" (interrupted, or still running)."""
    if done == 0:
        return "not_started"
    if training.get("max_steps") is not None and done >= training["max_steps"]:
        return "finished"
    # The trainer stops once `patience` validations in a row brought no progress (early_stopping.py), replayed here.
    patience = training.get("patience") or 0
    if patience and validations and validations[-1]["step"] == done:
        from nmtcli.training.early_stopping import validations_without_progress

        if validations_without_progress(validations, training.get("min_delta") or 0.0) >= patience:
            return "early_stopped"
    return "unfinished"


def _resume(run_dir: Path, values: dict[str, Any], done: int, status: str) -> dict[str, Any]:
    """Whether running `nmt train` on this dir again continues it, from which step, and the command that does."""
    from nmtcli.data.vocabulary import data_vocabulary
    from nmtcli.training.rundir import run_vocabulary

    data = values.get("data", {})
    if values.get("format_version", 1) < 2:
        return {"possible": False, "reason": "written by an older nmt whose checkpoints cannot be resumed"}
    if done == 0:
        return {"possible": False, "reason": "no complete checkpoint yet: training again starts from step 0"}
    data_dir = Path(data.get("dir", ""))
    manifest = data_dir / "manifest.json"
    if not manifest.is_file():
        return {"possible": False, "reason": f"its data dir {data_dir} is gone (resuming needs the same prepared data)"}
    try:
        now = data_vocabulary(json.loads(manifest.read_text(encoding="utf-8")))
    except (ValueError, KeyError, TypeError, AttributeError):
        now = None
    if now != run_vocabulary(data):
        return {"possible": False, "reason": f"its data dir {data_dir} now holds other data (another vocabulary)"}
    # The run's own config.json as --config gives back every setting that must not change on resume (and its --init).
    command = " ".join(["nmt", "train", "--config", shlex.quote(str(run_dir / CONFIG_FILE)), "--data", shlex.quote(str(data_dir)),
                        "-o", shlex.quote(str(run_dir))])
    resume = {"possible": True, "from_step": done, "command": command}
    if status == "finished":
        resume["note"] = f"max_steps ({values['training']['max_steps']}) is reached: add --max-steps N to train further"
    elif status == "early_stopped":
        resume["note"] = "it stopped early: resuming trains until the next validation without a better score"
    return resume
