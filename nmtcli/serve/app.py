"""The Starlette app of `nmt serve`: LibreTranslate's API, nmt's own endpoint, health, metrics, the page.

    POST /translate          LibreTranslate's: q (a text or a list), source (a code or "auto"), target, format, alternatives, api_key
    POST /detect             LibreTranslate's: q -> [{"confidence", "language"}], the likeliest languages first
    GET  /languages          LibreTranslate's: [{"code", "name", "targets"}], every language a model translates from or into
    GET  /frontend/settings  LibreTranslate's: the limits and whether a key is needed (its web clients ask)
    POST /translate_file     LibreTranslate's: a document (multipart: file, source, target) -> its download URL (files.py)
    GET  /download_file/NAME LibreTranslate's: the translated document, kept for a while (files.py)
    POST /nmt/translate      one line per item of `lines`, with the search options of `nmt translate`, and min_confidence
    GET  /nmt/models         the models served: name, language pair, scores.json
    GET  /health             {"status": "ok", ...} once the models are loaded
    GET  /metrics            Prometheus' text format (metrics.py)
    GET  /                   the page to try it (page.html)

Every answer other than 200 is LibreTranslate's error shape {"error": "..."} with a 4xx or 5xx status;
an unexpected exception answers 500 in that shape and leaves its traceback in the server's log only.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from nmtcli.documents.languages import Detector, Guess
from nmtcli.documents.markup import Document, TooManySentences, parse
from nmtcli.documents.pipeline import Pages
from nmtcli.documents.protect import Protection
from nmtcli.inference.glossary import Glossary
from nmtcli.errors import NmtError
from nmtcli.inference.alignment import COVERING
from nmtcli.inference.results import Translation, nbest_record
from nmtcli.inference.settings import SearchSettings
from nmtcli.serve.batching import Batcher, QueueFull
from nmtcli.serve.files import SUPPORTED, FileLimits, FileService
from nmtcli.serve.metrics import Metrics
from nmtcli.serve.models import ServedModel, ServedModels, language_name
from nmtcli.serve.requests import (
    ApiError,
    Limits,
    TranslateRequest,
    check_sentences,
    detect_request,
    libretranslate_request,
    nmt_request,
    parse_fields,
    read_body,
    sentence_requests,
)

# The page may run its own inline script and talk to this server, and nothing else: no external fetches.
PAGE_POLICY = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
               "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
CLIENT_GONE = 499  # nginx's status for a client that closed the connection before the answer: only ever in /metrics


@dataclass(frozen=True)
class ServeConfig:
    search: SearchSettings = SearchSettings()  # the defaults of every request; /nmt/translate may change them
    limits: Limits = Limits()
    api_keys: frozenset[str] = frozenset()  # empty: no key needed
    timeout: float = 60.0  # seconds a request may wait for its translation
    batching: bool = True
    max_delay: float = 0.005  # seconds the first request of a batch waits for others
    batch_lines: int = 256  # lines per translation call at most
    queue_lines: int = 4096  # lines waiting at most; more: 429
    cors_origins: tuple[str, ...] = ()  # origins whose pages may call the API from a browser ("*": any)
    protect: bool = True  # the built-in protected spans (documents/protect.py); a request's "protect": false turns them off
    protect_regex: tuple[str, ...] = ()  # `--protect REGEX`: more spans kept, in every request
    glossaries: tuple[tuple[str, str, Glossary], ...] = ()  # `--glossary SOURCE-TARGET=FILE`: (source, target, its terms)
    files: FileLimits = FileLimits()  # /translate_file: the size and text of a file at most, how long a download is kept


class ClientGone(Exception):
    """The client closed its connection before its translation was done."""


@dataclass
class Service:
    """The models, the batcher and the metrics behind the routes."""

    models: list[ServedModel]
    config: ServeConfig
    metrics: Metrics = field(init=False)
    batcher: Batcher = field(init=False)
    detector: Detector = field(init=False)

    def __post_init__(self) -> None:
        self.served = ServedModels(self.models)  # which model translates a pair
        self.detector = Detector(self.served.known())
        self.metrics = Metrics(lambda: self.batcher.queued_lines)
        c = self.config
        self.batcher = Batcher(c.max_delay, c.batch_lines, c.queue_lines, c.batching,
                               on_batch=lambda model, lines, requests, seconds: self.metrics.batch(lines, requests, seconds))

    # --- the routes ---------------------------------------------------------------------------------

    async def translate(self, request: Request) -> Response:
        """LibreTranslate's POST /translate. Each text is cut into sentences (and at line breaks), the sentences of
        all texts in one language translated in one call, and joined back with each text's own whitespace; the k-th
        alternative joins each sentence's k-th best. source "auto": each text's language is detected first, and
        the texts of each language go to that language's model (every model known before any is translated)."""
        fields = await self._fields(request)
        ask = libretranslate_request(fields, self.config.limits)
        protection = self._protection(ask.protect)
        first: list[Document] | None = None  # source auto, format html: the documents as detection parsed them (English rules)
        if ask.source == "auto":
            if ask.format == "html":
                [first] = await self._parse_html([(ask.texts, _DETECTION_RULES)], counted=False, protection=protection)
            groups, guesses = self._by_detected_language(ask, first)
        else:
            groups, guesses = [(self._model(ask.source, ask.target), list(range(len(ask.texts))))], None
        nbest = ask.alternatives + 1
        settings = dataclasses.replace(self.config.search, nbest=nbest, beam=max(self.config.search.beam, nbest))
        # Every group parsed (html) or cut into sentences (text), and the request's sentences counted, before any
        # is translated. A text not translated (no letters in it, or already in the target language) comes back as sent.
        texts, alternatives = list(ask.texts), [[text] * ask.alternatives for text in ask.texts]
        if ask.format == "html":
            parsed = await self._parse_html([([first[n] if first and model.source == _DETECTION_RULES else ask.texts[n] for n in numbers],
                                               model.source) for model, numbers in groups], protection=protection)
            for (model, numbers), documents in zip(groups, parsed):
                termed = self.with_glossary(settings, model, ask.glossary)
                for number, versions in zip(numbers, await self._translate_html(request, model, documents, termed)):
                    texts[number], alternatives[number] = versions[0], versions[1:]
        else:
            splits = sentence_requests([([ask.texts[n] for n in numbers], model.source) for model, numbers in groups], self.config.limits,
                                       protection)
            for (model, numbers), split in zip(groups, splits):
                results = await self._translate(request, model, split.sentences, self.with_glossary(settings, model, ask.glossary),
                                                protection=protection)
                for number, done in zip(numbers, split.joined(results)):
                    texts[number], alternatives[number] = done.kth(0), [done.kth(k) for k in range(1, nbest)]
        answer: dict[str, Any] = {"translatedText": texts if ask.batch else texts[0]}
        if ask.alternatives:
            answer["alternatives"] = alternatives if ask.batch else alternatives[0]
        if guesses is not None:
            found = [{"confidence": g.confidence, "language": g.language} if g else _NOTHING_DETECTED for g in guesses]
            answer["detectedLanguage"] = found if ask.batch else found[0]
        return JSONResponse(answer)

    async def nmt_translate(self, request: Request) -> Response:
        """nmt's POST /nmt/translate: the records of `nmt translate --output-format json`, one per line."""
        fields = await self._fields(request)
        ask = nmt_request(fields, self.config.search, self.config.limits)
        model = self._model(ask.source, ask.target)
        if ask.targets is None:
            ask.settings = self.with_glossary(ask.settings, model, ask.glossary)
        protection = None if ask.targets is not None else self._protection(ask.protect)
        if ask.format == "html":
            return JSONResponse(await self._html_records(request, model, ask, protection))
        split = sentence_requests([(ask.lines, model.source)], self.config.limits, protection)[0] if ask.split_sentences else None
        results = await self._translate(request, model, split.sentences if split else ask.lines, ask.settings, ask.prefixes, ask.targets,
                                        protection)
        s = ask.settings
        answer = {"model": model.name, "source": model.source, "target": model.target, "settings": _settings_record(s)}
        if ask.targets is not None:  # forced decoding: the records of `nmt translate --score-only --output-format json`
            return JSONResponse({**answer, "scores": [scored.record() for scored in results]})
        aligned = s.alignment is not None  # an empty line's record gets "alignment" too
        if split is not None:  # one record per line, its sentences' translations joined (documents/pipeline.py)
            records = [done.record() for done in split.joined(results, aligned)]
        else:
            records = [nbest_record(hyps, aligned) for hyps in results]
        if ask.min_confidence is not None:
            records = [_confident(record, line, ask.min_confidence) for record, line in zip(records, ask.lines)]
        return JSONResponse({**answer, "translations": records})

    async def detect(self, request: Request) -> Response:
        """LibreTranslate's POST /detect: the likeliest languages of q, best first; the texts of a list q as one
        (each language's confidence averaged over the texts, weighted by their length), as LibreTranslate does."""
        texts = detect_request(await self._fields(request), self.config.limits)
        weight: dict[str, float] = {}
        total = 0  # the characters of the texts in which a language was found
        for text in texts:
            guesses = self.detector.detect(text)
            total += len(text) if guesses else 0
            for guess in guesses:
                weight[guess.language] = weight.get(guess.language, 0.0) + guess.confidence * len(text)
        ranked = [(code, round(w / total, 1)) for code, w in sorted(weight.items(), key=lambda item: item[1], reverse=True)[:3]]
        found = [{"confidence": confidence, "language": code} for k, (code, confidence) in enumerate(ranked) if k == 0 or confidence > 0]
        return JSONResponse(found or [_NOTHING_DETECTED])

    async def languages(self, request: Request) -> Response:
        return JSONResponse(self.served.languages())

    async def frontend_settings(self, request: Request) -> Response:
        first = self.models[0]
        return JSONResponse({"charLimit": self.config.limits.chars, "frontendTimeout": 500, "apiKeys": bool(self.config.api_keys),
                             "keyRequired": bool(self.config.api_keys), "suggestions": False, "filesTranslation": True,
                             "supportedFilesFormat": SUPPORTED,
                             "language": {"source": {"code": first.source, "name": language_name(first.source)},
                                          "target": {"code": first.target, "name": language_name(first.target)}}})

    async def model_list(self, request: Request) -> Response:
        return JSONResponse([m.describe() for m in self.models])

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "models": [m.pair for m in self.models], "batching": self.config.batching,
                             "queued_lines": self.batcher.queued_lines,
                             "translating_lines": sum(len(job.lines) for job in self.batcher.running), "key_required": bool(self.config.api_keys)})

    async def metrics_text(self, request: Request) -> Response:
        return PlainTextResponse(self.metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def page(self, request: Request) -> Response:
        html = resources.files("nmtcli.serve").joinpath("page.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Content-Security-Policy": PAGE_POLICY})

    # --- what the routes share ----------------------------------------------------------------------

    async def _fields(self, request: Request) -> dict[str, Any]:
        """The request's fields, after the body size limit and the API key."""
        limit = self.config.limits.body_bytes
        body = await read_body(request.stream(), request.headers.get("content-length"), limit)
        fields = await parse_fields(body, request.headers.get("content-type", ""), dict(request.query_params), limit)
        if self.config.api_keys:
            key = fields.get("api_key")
            if not key:  # LibreTranslate's answer to a missing key
                raise ApiError(400, "Please contact the server operator to get an API key (send it as api_key)")
            if not isinstance(key, str) or not any(hmac.compare_digest(key.encode(), k.encode()) for k in self.config.api_keys):
                raise ApiError(403, "Invalid API key")
        return fields

    def _model(self, source: str | None, target: str | None) -> ServedModel:
        """The model for source -> target (either may be left out where only one model fits; a multilingual model
        fits many: both are needed)."""
        if source is not None and target is not None:
            found = self.served.find(source, target)
            if found is not None:
                return found
        else:
            fits = [m for m in self.models if not m.languages and (source is None or m.source == source) and (target is None or m.target == target)]
            if len(fits) == 1 and not self.served.multilingual:
                return fits[0]
            if fits or self.served.multilingual:
                raise ApiError(400, f"Invalid request: several models fit (this server translates {self._pairs()}: send source and target)")
        pairs = self._pairs()
        if source is not None and not self.served.is_source(source):
            raise ApiError(400, f"{source} is not supported (this server translates {pairs}; see GET /languages)")
        if source is None or not self.served.is_target(target):
            raise ApiError(400, f"{target} is not supported (this server translates {pairs}; see GET /languages)")
        raise ApiError(400, f"{language_name(target)} ({target}) is not available as a target language from "
                            f"{language_name(source)} ({source}) (this server translates {pairs}; see GET /languages)")

    def with_glossary(self, settings: SearchSettings, model: ServedModel, asked: Glossary | None) -> SearchSettings:
        """`settings` with the terms of the server's glossary for the model's pair (--glossary) and the request's
        (which wins for a source term in both); the server's own object where the request sends none, so that
        requests without one still share batches."""
        server = next((g for source, target, g in self.config.glossaries if (source, target) == (model.source, model.target)), None)
        if asked is None or server is None:
            glossary = asked or server
        else:
            own = {t.source for t in asked.terms}
            glossary = Glossary((*(t for t in server.terms if t.source not in own), *asked.terms), "glossary")
        return settings if glossary is None else dataclasses.replace(settings, glossary=glossary)

    def _protection(self, asked: bool) -> Protection | None:
        """The spans a request keeps: the built-in kinds where the server and the request both want them, and the
        server's --protect regexes (checked when it started)."""
        return Protection.of(self.config.protect and asked, self.config.protect_regex)

    def _pairs(self) -> str:
        """The language pairs this server translates, for error messages: "en->de, de->en"."""
        return self.served.summary()

    def _by_detected_language(self, ask: TranslateRequest, documents: list[Document] | None = None,
                              ) -> tuple[list[tuple[ServedModel, list[int]]], list[Guess | None]]:
        """source "auto": the model for each detected language with the numbers of its texts, and each text's guess
        (None for a text without letters). A text of up to SHORT_TEXT characters ("Help", "Save") says too little
        of its language: it takes the detection of all the request's texts together, as LibreTranslate does. Of a
        short text's two guesses (all texts', its own) the first that this server can take into the target counts; a
        text in the target language itself is not translated. A 400 where no guess of a text has a model into the target."""
        if not self.served.is_target(ask.target):
            self._model(None, ask.target)  # its 400: the target is not supported
        target = self.served.code(ask.target)  # as the detector names it: "deu_Latn" -> "de" where a multilingual model serves it
        readable = ask.texts if documents is None else [" ".join(document.sentences) for document in documents]  # html: what a reader sees
        pooled = self.detector.detect(" ".join(readable)) if any(len(text.strip()) <= SHORT_TEXT for text in readable) else []
        guesses: list[Guess | None] = []
        languages: dict[str, list[int]] = {}
        for number, text in enumerate(readable):
            candidates = self.detector.detect(text, candidates=1)
            if candidates and len(text.strip()) <= SHORT_TEXT:
                candidates = [*pooled[:1], *candidates]
            usable = [g for g in candidates if g.language == target or self.served.find(g.language, target)]
            if candidates and not usable:
                raise ApiError(400, self._undetectable(candidates[0].language, ask.target, candidates[0], number + 1 if ask.batch else None))
            guesses.append(usable[0] if usable else None)
            if usable and usable[0].language != target:
                languages.setdefault(usable[0].language, []).append(number)
        return [(self.served.find(language, target), numbers) for language, numbers in languages.items()], guesses

    def _undetectable(self, language: str, target: str, guess: Guess, number: int | None) -> str:
        """Why text detected as `language` cannot go into `target`: LibreTranslate's words, then what was detected where."""
        subject = f"text {number}" if number else "the text"
        pairs = self._pairs()
        if not self.served.is_source(language):
            return (f"{language} is not supported ({subject} was detected as {language_name(language)} at {guess.confidence:g}% "
                    f"confidence; this server translates {pairs}: if the text is in one of those languages, send that as source)")
        return (f"{language_name(target)} ({target}) is not available as a target language from {language_name(language)} ({language}) "
                f"({subject} was detected at {guess.confidence:g}% confidence; this server translates {pairs}; see GET /languages)")

    async def _translate(self, request: Request, model: ServedModel, lines: list[str], settings: SearchSettings,
                         prefixes: list[str] | None = None, targets: list[str] | None = None,
                         protection: Protection | None = None) -> list[list[Translation]]:
        """The lines' n-best lists (with `targets`: those translations' scores) through the batcher, `protection`'s spans
        kept; a timeout (503), a full queue (429) or the client going away (ClientGone) takes the request's lines out of the queue."""
        work = asyncio.ensure_future(self.batcher.translate(model, lines, settings, prefixes, targets, protection))
        gone = asyncio.ensure_future(_disconnected(request))
        done, _ = await asyncio.wait({work, gone}, timeout=self.config.timeout, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if work not in done:
            work.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await work
            if gone in done:
                raise ClientGone()
            raise ApiError(503, f"Timed out after {self.config.timeout:g} s waiting for the translation (the server is busy: "
                                "try again, or send less text)")
        try:
            results = work.result()
        except QueueFull as e:
            raise ApiError(429, f"Slowdown: {e.queued:,} lines are waiting to be translated, the limit is {e.limit:,} (try again shortly)",
                           headers={"Retry-After": "1"}) from None
        except NmtError as e:
            raise ApiError(500, f"Cannot translate text: {e}") from None
        self.metrics.translated(len(lines), sum(len(r.tokens) if targets is not None else len(r[0].tokens) for r in results if r))
        return results

    async def _parse_html(self, groups: list[tuple[list[str | Document], str]], counted: bool = True,
                          protection: Protection | None = None) -> list[list[Document]]:
        """format html: each group's documents parsed in its language (the source of the model that translates them),
        in a worker thread (a large page takes a while: the event loop goes on meanwhile), stopped as soon as the
        request (not `counted`: one of its documents) holds more sentences than the line limit (413). A Document
        among the texts is taken as parsed."""
        limits = self.config.limits
        try:
            parsed = await asyncio.get_running_loop().run_in_executor(None, _parse_all, groups, limits.lines, counted, protection)
        except TooManySentences:
            check_sentences(limits.lines + 1, limits, more=True)
        if counted:
            check_sentences(sum(len(document.sentences) for documents in parsed for document in documents), limits)
        return parsed

    async def _translate_html(self, request: Request, model: ServedModel, documents: list[Document], settings: SearchSettings,
                              sentences: list | None = None) -> list[list[str]]:
        """format html: each document translated (its n-best: the k-th of each of its sentences put back), all
        their sentences in one call of the batcher with word alignments on, every source word linked (COVERING:
        documents/markup.py places the tags by them); `sentences` (a list) gets each document's sentences and their n-best lists."""
        pages = Pages(documents)
        results = await self._translate(request, model, pages.sentences, dataclasses.replace(settings, alignment=COVERING))
        if sentences is not None:
            sentences.extend(list(zip(document.sentences, hyps)) for document, hyps in zip(documents, pages.by_document(results)))
        # in a worker thread, as the parse: the event loop goes on meanwhile
        return await asyncio.get_running_loop().run_in_executor(None, pages.rendered, results, max(settings.nbest, 1))

    async def _html_records(self, request: Request, model: ServedModel, ask, protection: Protection | None = None) -> dict[str, Any]:
        """/nmt/translate with format html: one record per item: its translation, its n-best, and each sentence's record."""
        sentences: list = []
        [parsed] = await self._parse_html([(ask.lines, model.source)], protection=protection)
        documents = await self._translate_html(request, model, parsed, ask.settings, sentences)
        s = ask.settings
        records = [{"translation": translated[0], "nbest": [{"translation": text} for text in translated],
                    "sentences": [{"source": source, **nbest_record(hyps, alignment=True)} for source, hyps in parts]}
                   for translated, parts in zip(documents, sentences)]
        return {"model": model.name, "source": model.source, "target": model.target, "format": "html",
                "settings": _settings_record(s), "translations": records}

    def counted(self, endpoint: str, handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        """`handler` with its errors in the API's shape and its status and time in the metrics."""

        async def run(request: Request) -> Response:
            started = time.perf_counter()
            try:
                response = await handler(request)
            except ApiError as e:
                response = JSONResponse({"error": e.message}, e.status, headers=e.headers)
            except ClientGone:
                response = Response(status_code=CLIENT_GONE)
            except Exception:
                self.metrics.request(endpoint, 500, time.perf_counter() - started)
                raise  # a bug: answered by `internal_error` below, its traceback logged by uvicorn
            self.metrics.request(endpoint, response.status_code, time.perf_counter() - started)
            return response

        return run


# A text of this many characters or fewer takes the language detected in all the texts of its request.
SHORT_TEXT = 40
# LibreTranslate's answer for text in which no language was found (no letters in it).
_NOTHING_DETECTED = {"confidence": 0.0, "language": "en"}


# The sentence rules by which source auto reads an HTML document's text for the language detector.
_DETECTION_RULES = "en"


def _parse_all(groups: list[tuple[list[str | Document], str]], limit: int, shared: bool = True,
               protection: Protection | None = None) -> list[list[Document]]:
    """Each group's HTML documents parsed in its language (a Document: parsed already), stopped (TooManySentences) as
    soon as they hold more than `limit` sentences together (not `shared`: as soon as one of them does)."""
    parsed, most = [], limit
    for texts, language in groups:
        parsed.append([])
        for text in texts:
            parsed[-1].append(parse(text, language, limit, protection) if isinstance(text, str) else text)
            limit -= len(parsed[-1][-1].sentences) if shared else 0
            if limit < 0:
                raise TooManySentences(most)
    return parsed


def _settings_record(s: SearchSettings) -> dict[str, Any]:
    """The search settings /nmt/translate answers with (sampling's and alignment's where asked for)."""
    return {"beam": s.beam, "alpha": s.alpha, "length_penalty": s.length_penalty, "max_len_a": s.max_len_a, "max_len_b": s.max_len_b,
            "nbest": s.nbest, **({"sampling": s.sampling, "temperature": s.temperature, "seed": s.seed} if s.sampling else {}),
            **({"alignment": s.alignment} if s.alignment else {}), **({"glossary_terms": len(s.glossary)} if s.glossary else {}),
            **({"coverage_penalty": s.coverage_penalty} if s.coverage_penalty else {}),
            **({"brevity_penalty": s.brevity_penalty} if s.brevity_penalty is not None else {})}


def _confident(record: dict[str, Any], line: str, least: float) -> dict[str, Any]:
    """/nmt/translate's `min_confidence`: a record whose confidence is below `least` becomes the line as it was sent,
    flagged "low_confidence" (its score, log_prob and confidence kept, the model's translations left out: its keys
    those of every other record, emptied); every other record is flagged false. (LibreTranslate #670: rather no
    translation than a bad one.)"""
    confidence = record.get("confidence")
    if confidence is None or confidence >= least:
        return {**record, "low_confidence": False}
    left_out = {key: "" if key == "alignment" else [] for key in ("tokens", "alignment", "nbest", "sentences") if key in record}
    return {**record, **left_out, "translation": line, "low_confidence": True}


async def _disconnected(request: Request) -> None:
    """Returns when the client has closed the connection (the body is read by then: what is left is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _http_error(request: Request, e: Exception) -> Response:
    assert isinstance(e, HTTPException)
    return JSONResponse({"error": e.detail}, e.status_code, headers=e.headers)


async def _internal_error(request: Request, e: Exception) -> Response:
    return JSONResponse({"error": "Cannot translate text: internal server error (the server's log has the details)"}, 500)


def create_app(models: list[ServedModel], config: ServeConfig = ServeConfig()) -> Starlette:
    """The ASGI app serving `models` (each for its own language pair)."""
    service = Service(models, config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        service.batcher.start()
        yield
        await service.batcher.stop()  # uvicorn has let the requests in flight finish by now

    api = [("/translate", "POST", service.translate), ("/detect", "POST", service.detect), ("/nmt/translate", "POST", service.nmt_translate),
           ("/languages", "GET", service.languages), ("/frontend/settings", "GET", service.frontend_settings),
           ("/nmt/models", "GET", service.model_list), ("/health", "GET", service.health),
           ("/metrics", "GET", service.metrics_text), ("/", "GET", service.page)]
    routes = [Route(path, service.counted(path, handler), methods=[method]) for path, method, handler in api]
    routes += FileService(service, config.files).routes(service.counted)
    middleware = [Middleware(CORSMiddleware, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                             allow_headers=["Content-Type", "Authorization"])] if config.cors_origins else []
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan,
                    exception_handlers={HTTPException: _http_error, Exception: _internal_error})
    app.state.service = service
    return app
