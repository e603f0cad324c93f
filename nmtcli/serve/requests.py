"""Request bodies into what to translate: read within a size limit, decoded (JSON, URL-encoded or
multipart forms), and checked field by field. Every mistake is an `ApiError`: a 4xx status and a
message for LibreTranslate's error shape {"error": "..."}, never an exception that reaches the client.

Messages that LibreTranslate also gives keep its wording ("Invalid request: missing q parameter"),
since its clients show them to users; the rest say what was wrong and what to send instead.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from nmtcli.documents.pipeline import Split
from nmtcli.documents.protect import Protection
from nmtcli.errors import NmtError
from nmtcli.inference.glossary import Glossary, glossary_of
from nmtcli.inference.alignment import UNITS
from nmtcli.inference.penalties import LENGTH_PENALTIES
from nmtcli.inference.sampling import DEFAULT_SEED, SAMPLING_FORMS, parse_sampling
from nmtcli.inference.settings import MAX_BREVITY_PENALTY, MAX_COVERAGE_PENALTY, SearchSettings


class ApiError(Exception):
    """An answer other than 200: `status` and the message of {"error": message}."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}


@dataclass(frozen=True)
class Limits:
    chars: int = 20_000  # characters of text per request
    lines: int = 1_000  # lines per request (q split at line breaks, or the items of `lines`)
    beam: int = 16  # the widest beam (and so the longest n-best list) a request may ask for
    glossary: int = 1_000  # entries of a request's glossary

    @property
    def body_bytes(self) -> int:
        """The largest body read: room for `chars` characters of 4 UTF-8 bytes, %-escaped in a form, plus the other fields."""
        return 12 * self.chars + 65_536


async def read_body(stream: AsyncIterator[bytes], content_length: str | None, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to be over `limit` bytes."""
    if content_length is not None and content_length.isdigit() and int(content_length) > limit:
        raise ApiError(413, f"Invalid request: the body ({int(content_length):,} bytes) exceeds the size limit ({limit:,} bytes)")
    body = bytearray()
    async for chunk in stream:
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"Invalid request: the body exceeds the size limit ({limit:,} bytes)")
    return bytes(body)


async def parse_fields(body: bytes, content_type: str, query: dict[str, str], limit: int) -> dict[str, Any]:
    """The fields of a JSON object or a form (URL-encoded or multipart); a form also takes the query string's."""
    media = content_type.split(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        text = _utf8(body)
        try:
            fields = json.loads(text) if text.strip() else None
        except ValueError as e:
            raise ApiError(400, f"Invalid request: malformed JSON ({e})") from None
        except RecursionError:  # arrays or objects nested thousands deep: Python's parser recurses once a level
            raise ApiError(400, "Invalid request: JSON nested too deep (send a flat object of fields)") from None
        if not isinstance(fields, dict):
            raise ApiError(400, "Invalid JSON format (send a JSON object, e.g. {\"q\": \"Hello\", \"source\": \"en\", \"target\": \"de\"})")
        return fields
    if media == "multipart/form-data":
        return {**query, **await _multipart(body, content_type, limit)}
    if media in ("application/x-www-form-urlencoded", ""):
        fields: dict[str, Any] = dict(query)
        try:
            pairs = urllib.parse.parse_qsl(_utf8(body), keep_blank_values=True, strict_parsing=False, errors="strict")
        except UnicodeDecodeError:
            raise ApiError(400, "Invalid request: the form holds text that is not valid UTF-8 (encode the text as UTF-8)") from None
        for name, value in pairs:
            _add(fields, name, value)
        return fields
    raise ApiError(415, f"Invalid request: unsupported Content-Type {media!r} "
                        "(send application/json, application/x-www-form-urlencoded or multipart/form-data)")


def _add(fields: dict[str, Any], name: str, value: str) -> None:
    """A form field; a repeated `q` (q=...&q=...) becomes a list, as a JSON list of texts."""
    if name == "q" and name in fields:
        fields[name] = [*fields[name], value] if isinstance(fields[name], list) else [fields[name], value]
    else:
        fields[name] = value


def _utf8(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"Invalid request: the body is not valid UTF-8 ({e.reason} at byte {e.start}) (encode the text as UTF-8)") from None


async def multipart_form(body: bytes, content_type: str, limit: int, max_files: int = 0):
    """Starlette's form of a multipart body read already (within `limit` bytes a part, `max_files` files); a
    malformed form, or text that is not UTF-8: 400."""
    from starlette.datastructures import Headers
    from starlette.formparsers import MultiPartException, MultiPartParser

    async def chunks() -> AsyncIterator[bytes]:
        yield body

    parser = MultiPartParser(Headers({"content-type": content_type}), chunks(), max_files=max_files, max_fields=100, max_part_size=limit)
    try:
        return await parser.parse()
    except MultiPartException as e:
        raise ApiError(400, f"Invalid request: malformed multipart form ({e.message})") from None
    except UnicodeDecodeError:
        raise ApiError(400, "Invalid request: the form holds text that is not valid UTF-8 (encode the text as UTF-8)") from None


async def _multipart(body: bytes, content_type: str, limit: int) -> dict[str, Any]:
    form = await multipart_form(body, content_type, limit)
    fields: dict[str, Any] = {}
    for name, value in form.multi_items():
        if not isinstance(value, str):
            raise ApiError(400, f"Invalid request: {name} is a file (send text fields only)")
        _add(fields, name, value)
    return fields


# --- what a request asks for ---------------------------------------------------------------------------


@dataclass
class TranslateRequest:
    """POST /translate (LibreTranslate's): `texts` as sent, each split into `lines` for the model."""

    texts: list[str]
    batch: bool  # q was a list: the answer is a list too
    source: str
    target: str
    alternatives: int
    format: str = "text"  # "html": each text is an HTML document or fragment (documents/markup.py)
    protect: bool = True  # the built-in protected spans (documents/protect.py) kept; false: translated as text
    glossary: Glossary | None = None  # the request's terms (inference/glossary.py), besides the server's for the pair

    @property
    def lines(self) -> list[str]:
        """The texts' lines: line breaks are LF, CRLF or CR."""
        return [line for text in self.texts for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]


def libretranslate_request(fields: dict[str, Any], limits: Limits) -> TranslateRequest:
    texts, batch = _q(fields)
    source, target = (_text_field(fields, name) for name in ("source", "target"))
    text_format = fields.get("format") or "text"
    if text_format not in FORMATS:
        raise ApiError(400, f"{text_format} format is not supported (send format text or html)")
    alternatives = _integer(fields.get("alternatives", 0), "alternatives", 0, limits.beam - 1)
    protect = _protect(fields.get("protect", True))
    glossary = glossary_field(fields.get("glossary"), limits)
    if text_format == "html":
        return html_request(TranslateRequest(texts, batch, source, target, alternatives, "html", protect, glossary), limits)
    request = TranslateRequest(texts, batch, source, target, alternatives, protect=protect, glossary=glossary)
    check_size(sum(len(text) for text in texts), len(request.lines), limits, texts)
    return request


def _q(fields: dict[str, Any]) -> tuple[list[str], bool]:
    """LibreTranslate's `q`: the texts, and whether q was a list (then the answer is one too)."""
    q = fields.get("q")
    if q is None or q == "" or q == []:
        raise ApiError(400, "Invalid request: missing q parameter")
    batch = isinstance(q, list)
    texts = q if batch else [q]
    if not all(isinstance(text, str) for text in texts):
        raise ApiError(400, "Invalid request: q must be a string or a list of strings")
    return texts, batch


def detect_request(fields: dict[str, Any], limits: Limits) -> list[str]:
    """POST /detect (LibreTranslate's): the texts of `q`, within the size limits."""
    texts, _ = _q(fields)
    check_size(sum(len(text) for text in texts), sum(len(text.splitlines()) or 1 for text in texts), limits, texts)
    return texts


@dataclass
class NmtRequest:
    """POST /nmt/translate: one line per item of `lines`, with the search options of `nmt translate`."""

    lines: list[str]
    source: str | None
    target: str | None
    settings: SearchSettings
    prefixes: list[str] | None = None  # target prefixes, one per line ("" for none)
    targets: list[str] | None = None  # given translations to score (forced decoding), one per line
    split_sentences: bool = False  # each line cut into sentences, translated one by one and joined (one record a line)
    format: str = "text"  # "html": each item of `lines` is an HTML fragment, translated a sentence at a time
    min_confidence: float | None = None  # a line whose translation's confidence is below it comes back as sent, flagged
    protect: bool = True  # the built-in protected spans kept (documents/protect.py)
    glossary: Glossary | None = None  # the request's terms, besides the server's for the pair


def nmt_request(fields: dict[str, Any], defaults: SearchSettings, limits: Limits) -> NmtRequest:
    lines = fields.get("lines")
    if not isinstance(lines, list) or not lines or not all(isinstance(line, str) for line in lines):
        raise ApiError(400, "Invalid request: lines must be a non-empty list of strings (one line each)")
    text_format = _format(fields, ("prefix", "targets", "split_sentences", "min_confidence"))
    for number, line in enumerate(lines, start=1):
        if ("\n" in line or "\r" in line) and text_format == "text":
            raise ApiError(400, f"Invalid request: line {number} holds a line break (send each line as its own item)")
    source, target = (_text_field(fields, name, required=False) for name in ("source", "target"))
    sampling = _sampling(fields)
    beam = _integer(fields.get("beam", defaults.beam), "beam", 1, limits.beam)
    nbest = _integer(fields.get("nbest", 1), "nbest", 1, limits.beam if sampling else beam)
    length_penalty = fields.get("length_penalty", defaults.length_penalty)
    if length_penalty not in LENGTH_PENALTIES:
        raise ApiError(400, f"Invalid request: length_penalty must be one of {', '.join(LENGTH_PENALTIES)}")
    brevity = fields.get("brevity_penalty", defaults.brevity_penalty)  # None: each model's own
    settings = SearchSettings(
        beam=beam, nbest=nbest, length_penalty=length_penalty,
        alpha=_number(fields.get("alpha", defaults.alpha), "alpha", 0.0, 10.0),
        max_len_a=_number(fields.get("max_len_a", defaults.max_len_a), "max_len_a", 0.0, 10.0),
        max_len_b=_integer(fields.get("max_len_b", defaults.max_len_b), "max_len_b", 0, 1000),
        batch_tokens=defaults.batch_tokens, window=defaults.window, cuda_graphs=defaults.cuda_graphs, shortlist=defaults.shortlist,
        sampling=sampling, temperature=_temperature(fields.get("temperature", 1.0)),
        seed=_integer(fields.get("seed", DEFAULT_SEED), "seed", 0, 2**63 - 1),
        alignment=_alignment(fields.get("alignment")),
        coverage_penalty=0.0 if sampling else _number(fields.get("coverage_penalty", defaults.coverage_penalty), "coverage_penalty", 0.0, MAX_COVERAGE_PENALTY),
        brevity_penalty=None if sampling or brevity is None else _number(brevity, "brevity_penalty", 0.0, MAX_BREVITY_PENALTY),
    )
    prefixes = _prefixes(fields.get("prefix"), len(lines))
    if prefixes is not None and any(prefixes) and sampling:
        raise ApiError(400, "Invalid request: prefix works with beam search, not with sampling (leave one of them out)")
    targets = _targets(fields.get("targets"), lines)
    if targets is not None and (prefixes is not None or sampling):
        raise ApiError(400, "Invalid request: targets (scoring given translations) does not go with prefix or sampling (leave them out)")
    if targets is not None and nbest > 1:
        raise ApiError(400, "Invalid request: nbest has no meaning with targets (each given translation gets one score)")
    split_sentences = _split_sentences(fields.get("split_sentences", False), prefixes, targets)
    min_confidence = None if fields.get("min_confidence") is None else _number(fields["min_confidence"], "min_confidence", 0.0, 1.0)
    if min_confidence is not None and targets is not None:
        raise ApiError(400, "Invalid request: min_confidence does not go with targets (a given translation is scored, not replaced)")
    texts = [*lines, *(prefixes or []), *(targets or [])]
    check_size(sum(len(text) for text in texts), len(lines), limits, texts)
    return NmtRequest(lines, source, target, settings, prefixes, targets, split_sentences=split_sentences, format=text_format,
                      min_confidence=min_confidence, protect=_protect(fields.get("protect", True)),
                      glossary=_searched_glossary(fields.get("glossary"), limits, sampling, targets))


def glossary_field(value: Any, limits: Limits) -> Glossary | None:
    """The "glossary" field: an object of source term -> target term (a string, `|` between alternatives, or a list
    of them); a form sends it as that object's JSON text. More than `limits.glossary` entries: 413."""
    if value is None:
        return None
    if isinstance(value, str):  # a form field
        try:
            value = json.loads(value)
        except ValueError:
            raise ApiError(400, "Invalid request: glossary must be a JSON object of source term -> target term") from None
    if not isinstance(value, dict):
        raise ApiError(400, "Invalid request: glossary must be an object of source term -> target term")
    if len(value) > limits.glossary:
        raise ApiError(413, f"Invalid request: the glossary ({len(value):,} entries) exceeds the glossary limit ({limits.glossary:,}) "
                            "(send fewer terms, or give the server the glossary with --glossary)")
    try:
        return glossary_of(value, limits.glossary)
    except NmtError as e:
        raise ApiError(400, f"Invalid request: {e}") from None


def _searched_glossary(value: Any, limits: Limits, sampling: str | None, targets: list[str] | None) -> Glossary | None:
    glossary = glossary_field(value, limits)
    if glossary is not None and (sampling or targets is not None):
        raise ApiError(400, f"Invalid request: glossary does not go with {'sampling' if sampling else 'targets'} (leave one of them out)")
    return glossary


def _protect(value: Any) -> bool:
    """The "protect" field: true (the default) keeps placeholders, URLs and e-mail addresses as they are (the server's
    --protect regexes apply either way). A form sends it as the text true or false."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ApiError(400, "Invalid request: protect must be true or false")
    return value


def _split_sentences(value: Any, prefixes: list[str] | None, targets: list[str] | None) -> bool:
    if not isinstance(value, bool):
        raise ApiError(400, "Invalid request: split_sentences must be true or false")
    if value and (prefixes is not None or targets is not None):
        raise ApiError(400, f"Invalid request: split_sentences does not go with {'prefix' if prefixes is not None else 'targets'} "
                            "(a prefix or a given translation belongs to a whole line: send split lines instead)")
    return value


def sentence_requests(groups: list[tuple[list[str], str]], limits: Limits, protection: Protection | None = None) -> list[Split]:
    """Each group's texts cut into sentences (documents/pipeline.py) in its language, the source language of the
    model that translates them, no sentence boundary inside a `protection` span. The line limit counts the sentences
    of all groups together (413): the cutting itself is bounded by the character limit (sentencex cuts 100,000
    characters in some 20 ms)."""
    splits = [Split.of(texts, language, protection) for texts, language in groups]
    check_sentences(sum(len(split.sentences) for split in splits), limits)
    return splits


FORMATS = ("text", "html")


def _format(fields: dict[str, Any], refused: Sequence[str]) -> str:
    """The "format" field of /nmt/translate: text (one line an item) or html (an HTML fragment an item, which
    takes none of the per-line `refused` fields)."""
    text_format = fields.get("format") or "text"
    if text_format not in FORMATS:
        raise ApiError(400, f"Invalid request: format must be text or html, not {text_format!r}")
    for name in refused:
        if text_format == "html" and fields.get(name) not in (None, False):
            why = "HTML is always cut into sentences" if name == "split_sentences" else "its items are documents, not lines"
            raise ApiError(400, f"Invalid request: {name} does not go with format html ({why})")
    return text_format


def html_request(request: TranslateRequest, limits: Limits) -> TranslateRequest:
    """format html: the texts as sent (line breaks are spaces in HTML), within the character limit, markup included.
    The line limit bounds their sentences, counted once they are parsed (`check_sentences`)."""
    check_size(sum(len(text) for text in request.texts), 0, limits, request.texts)
    return request


def check_sentences(sentences: int, limits: Limits, more: bool = False) -> None:
    """A request's sentences (of texts or HTML) against the line limit (413): each is one input of the model.
    `more`: the HTML parser stopped counting at `sentences`."""
    if sentences > limits.lines:
        count = f"over {limits.lines:,}" if more else f"{sentences:,}"
        raise ApiError(413, f"Invalid request: request ({count} sentences) exceeds line limit ({limits.lines:,}) "
                            "(each sentence is translated as a line: send fewer sentences at a time)")


def _prefixes(value: Any, lines: int) -> list[str] | None:
    """`prefix`: a list of target prefixes parallel to `lines` ("" for none), or one string for a single line."""
    if value is None:
        return None
    if isinstance(value, str) and lines == 1:
        value = [value]
    if not isinstance(value, list) or not all(isinstance(prefix, str) for prefix in value):
        raise ApiError(400, "Invalid request: prefix must be a list of strings, one per line (\"\" for none), or a string for a single line")
    if len(value) != lines:
        raise ApiError(400, f"Invalid request: prefix has {len(value)} item(s) but lines has {lines} (send one prefix per line, \"\" for none)")
    for number, prefix in enumerate(value, start=1):
        if "\n" in prefix or "\r" in prefix:
            raise ApiError(400, f"Invalid request: prefix {number} holds a line break (a prefix is part of one line)")
    return value


def _sampling(fields: dict[str, Any]) -> str | None:
    """The "sampling" field, checked with the fields that need it or do not go with it (as nmt translate's flags)."""
    sampling = fields.get("sampling")
    if sampling is None or sampling == "":
        for name in ("temperature", "seed"):
            if name in fields:
                raise ApiError(400, f"Invalid request: {name} applies to sampling only (send sampling too, or leave {name} out)")
        return None
    if not isinstance(sampling, str):
        raise ApiError(400, f"Invalid request: sampling must be a string: {SAMPLING_FORMS}")
    try:
        parse_sampling(sampling)
    except ValueError as e:
        raise ApiError(400, f"Invalid request: sampling {sampling!r}: {e} (send {SAMPLING_FORMS})") from None
    for name in ("beam", "alpha", "length_penalty", "coverage_penalty", "brevity_penalty"):
        if name in fields:
            raise ApiError(400, f"Invalid request: {name} does not go with sampling (leave it out; nbest N draws N samples)")
    return sampling


def _temperature(value: Any) -> float:
    temperature = _number(value, "temperature", 0.0, 100.0)
    if temperature == 0:
        raise ApiError(400, "Invalid request: temperature must be above 0 (1 samples from the model's own distribution)")
    return temperature


def _alignment(value: Any) -> str | None:
    if value is not None and value not in UNITS:
        raise ApiError(400, f"Invalid request: alignment must be one of {', '.join(UNITS)}")
    return value


def _targets(value: Any, lines: list[str]) -> list[str] | None:
    """`targets`: the translations to score, one string per line (a different count is a 400)."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise ApiError(400, "Invalid request: targets must be a list of strings (one translation to score per line)")
    if len(value) != len(lines):
        raise ApiError(400, f"Invalid request: {len(value)} targets for {len(lines)} lines (send one target per line)")
    for number, target in enumerate(value, start=1):
        if "\n" in target or "\r" in target:
            raise ApiError(400, f"Invalid request: target {number} holds a line break (send each line as its own item)")
    return value


def check_size(chars: int, lines: int, limits: Limits, texts: list[str] = ()) -> None:
    """The size limits (413), and text that UTF-8 cannot carry: a JSON "\\ud800" escape is a lone surrogate (400)."""
    if chars > limits.chars:
        raise ApiError(413, f"Invalid request: request ({chars:,} characters) exceeds text limit ({limits.chars:,}) (send less text at a time)")
    if lines > limits.lines:
        raise ApiError(413, f"Invalid request: request ({lines:,} lines) exceeds line limit ({limits.lines:,}) (send fewer lines at a time)")
    for text in texts:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ApiError(400, f"Invalid request: the text holds a lone surrogate ({text[e.start]!r}), which is not valid UTF-8 "
                                "(send whole characters)") from None


def _text_field(fields: dict[str, Any], name: str, required: bool = True) -> str | None:
    value = fields.get(name)
    if value is None or value == "":
        if required:
            raise ApiError(400, f"Invalid request: missing {name} parameter")
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"Invalid request: {name} must be a string (a language code such as \"en\")")
    return value


def _integer(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():  # form fields are strings
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ApiError(400, f"Invalid request: {name} must be an integer from {low} to {high}")
    if not low <= value <= high:
        raise ApiError(400, f"Invalid request: {name} {value} is out of range (from {low} to {high})")
    return value


def _number(value: Any, name: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ApiError(400, f"Invalid request: {name} must be a number from {low:g} to {high:g}")
    if not low <= value <= high:
        raise ApiError(400, f"Invalid request: {name} {value:g} is out of range (from {low:g} to {high:g})")
    return float(value)
