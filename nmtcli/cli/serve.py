"""`nmt serve`: translation over HTTP, for LibreTranslate's clients, nmt's own API and a page to try it."""

from __future__ import annotations

import errno
import signal
import socket
from pathlib import Path
from typing import Annotated, Optional

import typer

from nmtcli.cli import options
from nmtcli.inference.glossary import MAX_GLOSSARY
from nmtcli.cli.common import resolve_model, say, warn

NAME = "serve"
INSTALL = 'pip install "nmtcli[serve]"'


def command(
    model: Annotated[Optional[list[str]], typer.Option("--model", "-m", metavar="MODEL", help="Model dir or Hub id OWNER/NAME; repeat for more language pairs (one model per pair, known by the pair in its config.json; a multilingual model, M2M-100 or NLLB-200, serves every pair of its languages but those another model has). Default: $NMT_MODEL, else the newest under models/.")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on. The default answers this machine only; 0.0.0.0 answers every network (put a reverse proxy with TLS in front: docs/serving.md).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (LibreTranslate's is 5000 too).", min=0, max=65535)] = 5000,
    api_key: Annotated[Optional[list[str]], typer.Option("--api-key", metavar="KEY", help="Answer only requests that send this key (LibreTranslate's api_key field); repeat for several.")] = None,
    api_keys_file: Annotated[Optional[Path], typer.Option(help="A file of API keys, one a line (blank lines and # comments skipped); with --api-key, either is accepted.")] = None,
    beam: Annotated[int, options.beam(" /nmt/translate may ask for another.")] = 4,
    alpha: Annotated[float, options.alpha()] = 0.6,
    length_penalty: Annotated[str, options.length_penalty()] = "gnmt",
    coverage_penalty: Annotated[float, options.coverage_penalty("; /nmt/translate may ask for another")] = 0.0,
    brevity_penalty: Annotated[Optional[float], options.brevity_penalty(", for every model served; /nmt/translate may ask for another")] = None,
    shortlist: Annotated[bool, options.shortlist()] = True,
    max_len_a: Annotated[float, options.max_len_a()] = 1.0,
    max_len_b: Annotated[int, options.max_len_b()] = 50,
    batching: Annotated[bool, typer.Option("--batching/--no-batching", help="Translate the lines of concurrent requests together (dynamic batching); off: one request at a time.")] = True,
    max_delay: Annotated[float, typer.Option(help="Milliseconds a request waits for others to share its batch (only while the model is idle; a busy model takes what has queued at once).", min=0.0)] = 5.0,
    batch_lines: Annotated[int, typer.Option(help="Lines per batch at most.", min=1)] = 256,
    batch_tokens: Annotated[Optional[int], options.batch_tokens("search batch")] = None,
    max_chars: Annotated[int, typer.Option(help="Characters per request at most (more: 413).", min=1)] = 20_000,
    max_lines: Annotated[int, typer.Option(help="Lines per request at most (more: 413).", min=1)] = 1_000,
    queue_lines: Annotated[int, typer.Option(help="Lines waiting for the model at most; a request that would queue more is refused with 429.", min=1)] = 4_096,
    max_beam: Annotated[int, typer.Option(help="The widest beam (and longest n-best list) a request may ask for.", min=1)] = 16,
    max_file_bytes: Annotated[int, typer.Option(help="POST /translate_file: the size of an uploaded file at most, in bytes (more: 413).", min=1, rich_help_panel="Files")] = 10_000_000,
    max_file_chars: Annotated[int, typer.Option(help="POST /translate_file: characters of text in a file at most (more: 413).", min=1, rich_help_panel="Files")] = 500_000,
    file_keep: Annotated[float, typer.Option(help="Seconds a translated file may be downloaded from GET /download_file/... before it is deleted.", min=0.001, rich_help_panel="Files")] = 600.0,
    timeout: Annotated[float, typer.Option(help="Seconds a request may wait for its translation (then 503; its lines leave the queue).", min=0.001)] = 60.0,
    cors_origin: Annotated[Optional[list[str]], typer.Option(metavar="ORIGIN", help="Let pages from this origin (e.g. https://example.org, or * for any) call the API from a browser; repeat for several. Default: none.")] = None,
    device: Annotated[str, options.device()] = "auto",
    precision: Annotated[str, options.precision()] = "fp32",
    threads: Annotated[Optional[int], options.threads("PyTorch's", serving=True)] = None,
    access_log: Annotated[bool, typer.Option("--access-log/--no-access-log", help="Log every request on stderr.")] = False,
    protect: Annotated[Optional[list[str]], typer.Option("--protect", metavar="REGEX", help="Also keep the spans this regular expression matches byte for byte in every request; repeatable. Built in (unless --no-protect, or a request's \"protect\": false): placeholders, URLs, e-mail addresses (docs/translating.md).", rich_help_panel="Protected spans")] = None,
    no_protect: Annotated[bool, typer.Option("--no-protect", help="Translate placeholders, URLs and e-mail addresses like any text (the built-in protected kinds off; --protect still applies).", rich_help_panel="Protected spans")] = False,
    glossary: Annotated[Optional[list[str]], typer.Option("--glossary", metavar="SOURCE-TARGET=FILE", help="Terms every translation of that pair must hold (e.g. en-de=terms.tsv; the file as `nmt translate --glossary` reads it); repeatable, one per pair. A request's own \"glossary\" adds to it (its terms win).", rich_help_panel="Glossary")] = None,
    max_glossary: Annotated[int, typer.Option(help="The most entries a --glossary file may have.", min=1, rich_help_panel="Glossary")] = MAX_GLOSSARY,
    max_request_glossary: Annotated[int, typer.Option(help="The most entries a request's glossary may have (more: 413).", min=1, rich_help_panel="Glossary")] = 1_000,
) -> None:
    """Serve translation over HTTP: LibreTranslate's API, nmt's own, and a page to try it at /.

    Loads each model once and listens on 127.0.0.1:5000 unless told otherwise. Lines of concurrent
    requests are translated together. Ctrl-C or SIGTERM stops taking requests, answers those in
    flight and exits. Needs the serve extra (pip install "nmtcli\\[serve]"); docs/serving.md has the API.
    """
    from nmtcli.errors import NmtError, check_readable

    _check_extra()
    options.check_length_penalty(length_penalty)
    if max_lines > queue_lines:
        raise NmtError(f"--max-lines {max_lines} exceeds --queue-lines {queue_lines}", "a request must fit in the queue: raise --queue-lines", exit_code=2)
    if beam > max_beam:
        raise NmtError(f"--beam {beam} exceeds --max-beam {max_beam}", "raise --max-beam", exit_code=2)
    from nmtcli.api import protection

    protection(not no_protect, protect or [], "--protect")  # an invalid regex: one error line before anything loads
    glossaries = _glossaries(glossary or [], max_glossary)
    keys = set(api_key or [])
    if api_keys_file is not None:
        check_readable(api_keys_file, "check the path given to --api-keys-file")
        from_file = [line.strip() for line in api_keys_file.read_text(encoding="utf-8").splitlines()]
        from_file = [key for key in from_file if key and not key.startswith("#")]
        if not from_file:
            raise NmtError(f"{api_keys_file} holds no API key", "write one key a line, or leave out --api-keys-file")
        keys.update(from_file)
    listener = _listen(host, port)  # before the models load: a port in use is found out at once

    import torch

    from nmtcli.device import resolve_device
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.serve.app import ServeConfig, create_app
    from nmtcli.serve.files import FileLimits
    from nmtcli.serve.models import load_models
    from nmtcli.serve.requests import Limits

    if threads is not None:
        torch.set_num_threads(threads)
    settings = SearchSettings(beam=beam, alpha=alpha, coverage_penalty=coverage_penalty, brevity_penalty=brevity_penalty, max_len_a=max_len_a, max_len_b=max_len_b,
                              length_penalty=length_penalty, batch_tokens=batch_tokens, shortlist=shortlist)
    if model:
        dirs = [(spec, resolve_model(spec)) for spec in model]
    else:
        path = resolve_model(None)
        dirs = [(str(path), path)]
    served = load_models(dirs, resolve_device(device), settings, precision=precision, warn=warn)
    glossaries = _glossary_pairs(glossaries, served)
    config = ServeConfig(search=settings, limits=Limits(chars=max_chars, lines=max_lines, beam=max_beam, glossary=max_request_glossary),
                         api_keys=frozenset(keys), glossaries=tuple(glossaries),
                         timeout=timeout, batching=batching, max_delay=max_delay / 1000, batch_lines=batch_lines,
                         queue_lines=queue_lines, cors_origins=tuple(cors_origin or ()), protect=not no_protect,
                         protect_regex=tuple(protect or ()), files=FileLimits(max_file_bytes, max_file_chars, file_keep))
    _serve(create_app(served, config), listener, access_log, timeout)
    say("stopped: the requests in flight were answered")


def _glossaries(specs: list[str], max_terms: int) -> list:
    """--glossary SOURCE-TARGET=FILE, each read (one error line for a bad one, before any model loads)."""
    from nmtcli.errors import NmtError
    from nmtcli.inference.glossary import read_glossary

    read, seen = [], set()
    for spec in specs:
        pair, _, path = spec.partition("=")
        # every place the pair may be cut at a hyphen (`zh-Hant-en`: zh | Hant-en, or zh-Hant | en): the served models decide
        splits = [(pair[:i], pair[i + 1:]) for i, c in enumerate(pair) if c == "-" and 0 < i < len(pair) - 1]
        if not (splits and path):
            raise NmtError(f"--glossary {spec!r} is not SOURCE-TARGET=FILE", "e.g. --glossary en-de=terms.tsv", exit_code=2)
        if pair in seen:
            raise NmtError(f"--glossary {pair} is given twice", "give one file per pair (merge the terms into it)", exit_code=2)
        seen.add(pair)
        read.append((splits, read_glossary(path, max_terms)))
    return read


def _glossary_pairs(glossaries: list, served: list) -> list:
    """Each --glossary's pair as the server knows it (a multilingual model's codes: deu_Latn -> de); one error line for a
    pair no model served translates."""
    from nmtcli.errors import NmtError
    from nmtcli.serve.models import ServedModels

    models = ServedModels(served)
    named = []
    for splits, glossary in glossaries:
        found = [model for model in (models.find(source, target) for source, target in splits) if model is not None]
        if not found:
            pair = f"{splits[0][0]}-{splits[0][1]}"
            pairs = ", ".join(m.pair for m in served)
            raise NmtError(f"--glossary {pair}: no model served translates {' or '.join(f'{s} -> {t}' for s, t in splits)}",
                           f"name a pair of the models served ({pairs})", exit_code=2)
        named.append((found[0].source, found[0].target, glossary))
    return named


def _check_extra() -> None:
    from nmtcli.errors import NmtError

    needed = (("starlette", ["starlette"]), ("uvicorn", ["uvicorn"]), ("python-multipart", ["python_multipart", "multipart"]))
    missing = [name for name, modules in needed if not any(_importable(m) for m in modules)]
    if missing:
        raise NmtError(f"nmt serve needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not installed",
                       f"install the serve extra: {INSTALL}")


def _importable(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or one error line that says why not."""
    from nmtcli.errors import NmtError

    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except socket.gaierror as e:
        raise NmtError(f"cannot listen on {host}: {e.strerror}", "pass an address of this machine to --host, e.g. 127.0.0.1", exit_code=2) from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait for the old connections' TIME_WAIT
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise NmtError(f"port {port} on {host} is already in use", "stop what listens there, or pass another --port") from None
        if e.errno in (errno.EACCES, errno.EPERM):
            raise NmtError(f"no permission to listen on port {port}", "ports below 1024 need root: pass a --port above 1023") from None
        raise NmtError(f"cannot listen on {host}:{port}: {e.strerror}", "pass another --host or --port") from None
    return sock


def _serve(app, listener: socket.socket, access_log: bool, timeout: float) -> None:
    """Run `app` on uvicorn until Ctrl-C or SIGTERM, then let the requests in flight finish (up to `timeout`)."""
    import uvicorn

    host, port = listener.getsockname()[:2]
    say(f"serving on http://{host if ':' not in host else f'[{host}]'}:{port}/ (Ctrl-C or SIGTERM to stop)")
    config = uvicorn.Config(app, log_level="info" if access_log else "warning", access_log=access_log, lifespan="on",
                            timeout_graceful_shutdown=int(timeout) + 5, server_header=False)
    # uvicorn drains the server on either signal and raises it again afterwards; then it only ends the command.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda number, frame: None)
    uvicorn.Server(config).run(sockets=[listener])
