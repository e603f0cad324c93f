"""The Hugging Face Hub: push a model dir, pull one, and resolve `-m OWNER/NAME` through the Hub cache.

Everything goes through `huggingface_hub` (token from `hf auth login` or $HF_TOKEN, endpoint from
$HF_ENDPOINT, cache and offline mode from $HF_HOME / $HF_HUB_OFFLINE). Only the files a model dir
consists of are downloaded, and weights are only ever safetensors: nothing pulled is executed or
unpickled.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmtcli.card import hub_card
from nmtcli.errors import NmtError
from nmtcli.files import atomic_copy, staged_dir
from nmtcli.model.checkpoint import CARD_FILE, CONFIG_FILE, SHORTLIST_FILE, WEIGHTS_FILE, check_weights, read_model_dir_config

# What a model dir consists of (nmt's own: sentencepiece.model; imported Marian: source/target.spm, vocab.json), and its lexical
# shortlist where it has one (a student's speed on a CPU: pushed and pulled with it; a safetensors file, loaded as data).
MODEL_DIR_PATTERNS = [CONFIG_FILE, WEIGHTS_FILE, "*.model", "*.spm", "vocab.json", CARD_FILE, "scores.json", SHORTLIST_FILE]
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def looks_like_repo_id(spec: str) -> bool:
    """OWNER/NAME that is not a path on this machine (a local dir always wins)."""
    return bool(_REPO_ID.match(spec)) and not Path(spec).exists() and ".." not in spec


def _network_errors() -> tuple[type[BaseException], ...]:
    # huggingface_hub's HTTP client changed between releases (requests, httpx, httpx2); catch whichever is here.
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module, name in (("httpx2", "TransportError"), ("httpx", "TransportError"), ("requests", "ConnectionError")):
        with contextlib.suppress(ImportError, AttributeError):
            errors.append(getattr(importlib.import_module(module), name))
    return tuple(errors)


@contextlib.contextmanager
def hub_errors(repo_id: str, revision: str | None = None) -> Iterator[None]:
    """Turn the Hub client's exceptions into one-line NmtErrors that say what to do."""
    from huggingface_hub import constants
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    where = f"{repo_id}@{revision}" if revision else repo_id
    try:
        yield
    except GatedRepoError:
        raise NmtError(f"{repo_id} is gated", "accept its conditions on the Hub, then log in with `hf auth login`") from None
    except RepositoryNotFoundError:
        raise NmtError(f"{repo_id} was not found on {constants.ENDPOINT}", "check the name; a private repo needs `hf auth login` or $HF_TOKEN") from None
    except RevisionNotFoundError:
        raise NmtError(f"{repo_id} has no revision {revision!r}", "pass an existing branch, tag or commit to --revision") from None
    except LocalEntryNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise NmtError(f"{where} is not in the Hub cache and HF_HUB_OFFLINE is set", "unset HF_HUB_OFFLINE, or `nmt pull` it while online") from None
        raise NmtError(f"cannot reach {constants.ENDPOINT} to get {where}, and it is not in the Hub cache", "check the network connection or $HF_ENDPOINT") from None
    except HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else None
        if status in (401, 403):
            raise NmtError(f"the Hub refused the token for {repo_id} (HTTP {status})", "log in with `hf auth login` or set $HF_TOKEN to a token with write access") from None
        raise NmtError(f"the Hub answered HTTP {status} for {where}: {str(e).splitlines()[0]}", "try again later, or check $HF_ENDPOINT") from None
    except _network_errors() as e:
        raise NmtError(f"cannot reach {constants.ENDPOINT}: {e}", "check the network connection or $HF_ENDPOINT") from None
    except ValueError as e:
        # huggingface_hub refuses a repo file name that would land outside its folder ("../x", "/x").
        if "Invalid filename" not in str(e) and "Invalid pointer path" not in str(e):
            raise
        name = re.search(r"filename[=\s]*'([^']*)'", str(e))
        raise NmtError(f"{where} has a file named {name.group(1) if name else '(unknown)'!r}, which points outside the download folder",
                       "nothing was written outside the Hub cache; do not use this repo, and tell its owner") from None


def download(repo_id: str, revision: str | None = None, patterns: list[str] | None = None) -> Path:
    """The files of `repo_id` matching `patterns`, through the Hub cache (offline from it with HF_HUB_OFFLINE=1)."""
    from huggingface_hub import snapshot_download

    with hub_errors(repo_id, revision):
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=patterns or MODEL_DIR_PATTERNS))


def resolve_model(spec: str | Path, revision: str | None = None) -> Path:
    """A model dir for `-m`: a local dir as is, or a Hub id (OWNER/NAME) downloaded into the Hub cache."""
    text = str(spec)
    if Path(text).is_dir() or not looks_like_repo_id(text):
        return Path(text)
    snapshot = download(text, revision)
    hint = f"for a transformers model run `nmt import marian {text}` (OPUS-MT), `nmt import m2m100 {text}` or `nmt import nllb {text}` first"
    if not (snapshot / CONFIG_FILE).is_file() or not (snapshot / WEIGHTS_FILE).is_file():
        raise NmtError(f"{text} is not an nmt model repo (no {CONFIG_FILE} and {WEIGHTS_FILE})", hint)
    try:
        foreign = "model" not in json.loads((snapshot / CONFIG_FILE).read_text(encoding="utf-8"))
    except ValueError:
        foreign = True
    if foreign:  # e.g. a transformers config.json, which sits beside model.safetensors too
        raise NmtError(f"{text} is not an nmt model repo (its {CONFIG_FILE} is not nmt's)", hint)
    read_model_dir_config(snapshot)
    return snapshot


def locate_model(spec: str | Path, revision: str | None = None) -> tuple[Path, dict[str, Any]]:
    """`resolve_model`, and what names it for the record (`--init`, `--vocab-from`): {"model": the Hub id,
    "revision": the commit the Hub cache holds} or {"model": the local dir's absolute path, "revision": None}."""
    path = resolve_model(spec, revision)
    if Path(str(spec)).is_dir() or not looks_like_repo_id(str(spec)):
        return path, {"model": str(path.resolve()), "revision": None}
    return path, {"model": str(spec), "revision": path.name}  # the cache keeps each snapshot in snapshots/<commit>/


@dataclass(frozen=True)
class RemoteFile:
    """A file as the Hub lists it: size and git blob id, and for files stored with Git LFS the sha256 of the content."""

    size: int
    blob_id: str
    sha256: str | None = None


def remote_files(repo_id: str, revision: str) -> dict[str, RemoteFile]:
    """The Hub's own listing of `repo_id` at `revision` (pass a commit to describe exactly one snapshot)."""
    from huggingface_hub import HfApi, RepoFile

    with hub_errors(repo_id, revision):
        entries = list(HfApi().list_repo_tree(repo_id, revision=revision, recursive=True))
    return {e.path: RemoteFile(e.size, e.blob_id, e.lfs.sha256 if e.lfs else None) for e in entries if isinstance(e, RepoFile)}


def cached_etag(path: Path) -> str | None:
    """The ETag the Hub served for a file of a snapshot in the Hub cache, which names the blob the snapshot links to.

    For an LFS file the ETag is the sha256 of its content, for any other file its git blob id. None where
    the cache holds plain copies (file systems without symlinks), which carry no ETag.
    """
    if not Path(path).is_symlink():
        return None
    name = Path(os.path.realpath(path)).name
    return name if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", name) else None


def is_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def pull(repo_id: str, revision: str | None = None, out_dir: Path | None = None) -> Path:
    """Download a model repo; with `out_dir`, copy it there (each file atomically). Returns the model dir."""
    snapshot = resolve_model(repo_id, revision) if looks_like_repo_id(repo_id) else None
    if snapshot is None:
        raise NmtError(f"{repo_id!r} is not a Hub repo id", "pass OWNER/NAME, e.g. Helsinki-NLP/opus-mt-en-de")
    if out_dir is None:
        return snapshot
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise NmtError(f"{out_dir} exists and is not a directory", "pass another -o")
    # Only the snapshot's top-level files, by their own names: nothing lands outside out_dir. All are
    # copied before out_dir changes, config.json last (see staged_dir): a failed pull leaves it as it was.
    with staged_dir(out_dir, last=CONFIG_FILE) as stage:
        for path in sorted(p for p in snapshot.iterdir() if p.is_file()):
            atomic_copy(path, stage / path.name)  # follows the cache's symlinks: real files in out_dir
    return out_dir


def push(
    model_dir: Path,
    repo_id: str,
    private: bool = False,
    revision: str | None = None,
    message: str | None = None,
    license: str | None = None,
) -> str:
    """Create `repo_id` if needed and upload the model dir with a generated model card. Returns the commit URL."""
    from huggingface_hub import CommitOperationAdd, HfApi, get_token

    model_dir = Path(model_dir)
    values = read_model_dir_config(model_dir)
    check_weights(model_dir / WEIGHTS_FILE, "re-create the model dir with `nmt average` or `nmt import` before pushing it")
    if not _REPO_ID.match(repo_id):
        raise NmtError(f"{repo_id!r} is not a Hub repo id", "pass OWNER/NAME, e.g. alice/transformer-base-en-de")
    if get_token() is None:
        raise NmtError("no Hugging Face token found", "log in with `hf auth login` or set $HF_TOKEN")
    files = sorted(
        p for p in model_dir.iterdir()
        if p.is_file() and p.name != CARD_FILE and any(Path(p.name).match(pattern) for pattern in MODEL_DIR_PATTERNS)
    )
    scores = _read_scores(model_dir)
    card = hub_card(values, repo_id, scores, license)
    operations = [CommitOperationAdd(path_in_repo=p.name, path_or_fileobj=str(p)) for p in files]
    operations.append(CommitOperationAdd(path_in_repo=CARD_FILE, path_or_fileobj=card.encode("utf-8")))
    api = HfApi()
    with hub_errors(repo_id, revision):
        api.create_repo(repo_id, private=private, exist_ok=True)
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, exist_ok=True)
        info = api.create_commit(
            repo_id, operations, commit_message=message or f"Upload {model_dir.name} with nmt", revision=revision
        )
    return str(info.commit_url)


def _read_scores(model_dir: Path) -> dict[str, Any]:
    path = model_dir / "scores.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise NmtError(f"{path} is not valid JSON: {e}", "re-create it with `nmt score`, or delete it") from None

