"""The lines of `nmt translate`: each input line's translation (or forced-decoding score) and its confidence, as
output lines. The whole input at once (cli/translate.py) or a chunk at a time (cli/chunked.py) goes through them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from nmtcli.cli.common import warn

if TYPE_CHECKING:
    from nmtcli.inference.settings import SearchSettings


def read_text_lines(stream: BinaryIO, name: str) -> Iterator[str]:
    """Lines split on LF only (CRLF accepted); invalid UTF-8 is replaced, reported, and still translated."""
    from nmtcli.bulk import decode_line

    for number, raw in enumerate(stream, start=1):
        yield decode_line(raw, number, name, warn)


def scores(translator, settings: SearchSettings, lines: Iterator[str], target_file: Path, output_format: str,
           alignment: str | None) -> Iterator[str]:
    """--forced-decoding: each pair's score (text) or record (json), a line each."""
    with open(target_file, "rb") as f:
        yield from scored(translator, settings, lines, read_text_lines(f, str(target_file)), output_format, alignment)


def scored(translator, settings: SearchSettings, lines: Iterator[str], targets: Iterator[str], output_format: str,
           alignment: str | None) -> Iterator[str]:
    """--forced-decoding of `targets`: each pair's score (text) or record (json)."""
    for result in translator._score_with(settings, lines, targets, alignment):
        yield f"{result.score:.6f}" if output_format == "text" else json.dumps(result.record(), ensure_ascii=False)


def translations(translator, settings: SearchSettings, lines: Iterator[str], prefixes: Iterator[str] | None, output_format: str,
                 protection=None, split_sentences: bool = False, numbers: dict[int, tuple[int, int]] | None = None,
                 references: Iterator[str] | None = None, first: int = 1) -> Iterator[tuple[str | dict, float | None]]:
    """Each line's translation (text) or JSON record (json: nbest_record; --split-sentences: the joined record of
    documents/pipeline.Translated, with each sentence's), with its confidence. --split-sentences: each line cut into
    sentences in the model's source language, the sentences of all lines streamed through the engine (windows of
    --window sentences) and joined back into one output line; `numbers` maps the sentences in flight to their lines.
    `references` (--closest-to): one a line, the n-best translation of the best sentence chrF against it is the text.
    `first`: the first line's number in the file (a chunk's), which keys a sampled line's draws."""
    from nmtcli.scoring import closest

    pair = getattr(translator.engine, "languages", None)  # a multilingual model's: each record says which direction
    for done in _translated(translator, settings, lines, prefixes, split_sentences, protection, numbers, first):
        t = done.translation
        if references is not None:
            hyps = t.nbest or [t]
            reference = next(references, None)
            if reference is None:
                from nmtcli.errors import NmtError

                raise NmtError("--closest-to has fewer lines than the input", "give one reference per input line", exit_code=2)
            yield hyps[closest([h.text for h in hyps], reference)].text, t.confidence
            continue
        if output_format == "text":
            yield t.text, t.confidence
            continue
        record = done.record()
        if pair:
            record = {**record, "source_lang": pair[0], "target_lang": pair[1]}
        yield record, record["confidence"] if split_sentences else t.confidence
    if references is not None and next(references, None) is not None:
        from nmtcli.errors import NmtError

        raise NmtError("--closest-to has more lines than the input", "give one reference per input line", exit_code=2)


def _translated(translator, settings: SearchSettings, lines: Iterator[str], prefixes: Iterator[str] | None, split_sentences: bool,
                protection, numbers: dict[int, tuple[int, int]] | None, first: int):
    """The API's _translate_with; a chunk of sampled lines (whole) through _translate_lines, each keyed by its number in
    the file, so that its draws are those of the same line translated in one piece."""
    if settings.sampling is None or split_sentences or first == 1:
        return translator._translate_with(settings, lines, prefixes, split_sentences, protection, numbers if split_sentences else None)
    from nmtcli.documents.pipeline import Translated

    lines = list(lines)
    prefixes = None if prefixes is None else list(prefixes)
    numbers_in_file = list(range(first, first + len(lines)))
    return (Translated(line, t) for line, t in zip(lines, translator._translate_lines(settings, lines, prefixes, numbers_in_file, protection)))


def flagged(rated: Iterator[tuple[str | dict, float | None]], min_confidence: float | None, below: list[int]) -> Iterator[str]:
    """Each output line; with --min-confidence, the lines whose confidence is below it counted in below[0] (of below[1]
    translated) and their JSON records marked "low_confidence" (true or false)."""
    for out, confidence in rated:
        low = min_confidence is not None and confidence is not None and confidence < min_confidence
        below[0] += low
        below[1] += confidence is not None
        if isinstance(out, dict):
            out = json.dumps({**out, "low_confidence": low} if min_confidence is not None else out, ensure_ascii=False)
        yield out


def sentence_warn(numbers: dict[int, tuple[int, int]]):
    """The CLI's warn for --split-sentences: the translator numbers the sentences it reads, and a "line N: ..."
    warning (a sentence truncated to the model's length) names the input line and the sentence in it instead."""
    import re

    def sentence_warn(message: str) -> None:
        found = re.match(r"line (\d+): ", message)
        if found and int(found[1]) in numbers:
            line, place = numbers[int(found[1])]
            message = f"line {line}, sentence {place}: {message[found.end():]}"
        warn(message)

    return sentence_warn
