"""Each pair of a corpus scored by a model's forced decoding, in resumable chunks: the score filter's numbers.

`nmt prepare --score-model/--reverse-model` (data/score_filter.py ranks and splits the pairs; the data layer cannot
load a model, so the scores are computed here and handed down). A pair's score is the model's per-token
log-probability of the target given the source, -H = log P(y|x) / |y| with |y| counting EOS: what `nmt translate
--forced-decoding --length-penalty power --alpha 1 --brevity-penalty 0` writes, to the same six decimals, so that
`nmt distill`'s scores (made by that command) and these are one measure. A reverse model scores the same pair the
other way: the target as its source, the source as its target.

The corpus is read a chunk at a time (nmtcli/bulk.py: each chunk's scores written whole, a killed run resumed from the
chunks done, a run with another model or input refusing to mix into them), each chunk a window at a time through the
engine on the CPU or a GPU: memory does not grow with the corpus.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nmtcli.errors import NmtError

# The forced score as a per-token log-probability: log P / |Y|^1, no brevity term (Junczys-Dowmunt 2018's H, negated).
PER_TOKEN = {"length_penalty": "power", "alpha": 1.0, "brevity_penalty": 0.0}

Progress = Callable[[str, int, "int | None"], None]


# What an import that could not tell a model's languages writes for them (nmtcli/interop/marian.py): none named.
UNNAMED = (None, "", "src", "tgt")


def model_languages(model: Path, flag: str | None = None) -> tuple[str | None, str | None, list[str] | None]:
    """(source, target) a one-direction model says it translates (None where it does not say), and a multilingual
    model's language codes (None for a one-direction model). `flag` names the model in an error."""
    from nmtcli.files import read_json

    name = f"{flag} {model}" if flag else str(model)
    config = read_json(Path(model) / "config.json", (f"{name} is not a model dir (no config.json)", "give an nmt model dir or Hub id"),
                       f"{name}'s config.json is damaged: write the model dir again (nmt average, import or pull)")
    tokenizer = config.get("tokenizer") or {}
    if tokenizer.get("kind") == "multilingual":
        return None, None, list(tokenizer.get("languages") or [])
    own = config.get("languages") if isinstance(config.get("languages"), dict) else {}
    source, target = own.get("source"), own.get("target")
    return None if source in UNNAMED else source, None if target in UNNAMED else target, None


def check_direction(model: Path, source: str, target: str, flag: str, *, purpose: str | None = None, fix: str | None = None,
                    warn: Callable[[str], None] | None = None) -> bool:
    """`model` (given as `flag`) translates `source` -> `target`, else the one-line error (exit 2): "FLAG MODEL translates
    X->Y, not SOURCE->TARGET", or where `purpose` says what needs that direction ("back-translation for en->de data")
    "..., but PURPOSE needs a SOURCE->TARGET model"; `fix` what to do (default: give a model that translates
    SOURCE->TARGET). A multilingual model must have both languages. One whose config.json names no languages cannot be
    checked: it is taken for a SOURCE->TARGET model, and `warn` hears so in one line. Returns whether the model is
    multilingual (`nmt translate` then needs -s and -t for the direction). The score filter's models, `nmt distill`'s
    reverse model and back-translation's are checked here."""
    from nmtcli.inference.language_codes import resolve

    own_source, own_target, codes = model_languages(model, flag)
    fix = fix or f"give a model that translates {source}->{target}"
    if codes is not None:
        missing = [code for code in (source, target) if resolve(code, codes) is None]
        if missing:
            raise NmtError(f"{flag} {model} has no language {missing[0]!r}", fix, exit_code=2)
        return True
    named = [(code, own) for code, own in ((source, own_source), (target, own_target)) if own is not None]
    if any(resolve(code, [own]) is None for code, own in named):
        says = f"{flag} {model} translates {own_source or '?'}->{own_target or '?'}"
        raise NmtError(f"{says}, but {purpose} needs a {source}->{target} model" if purpose else f"{says}, not {source}->{target}",
                       fix, exit_code=2)
    if len(named) < 2 and warn is not None:
        what = "languages" if not named else f"{'source' if own_source is None else 'target'} language"
        warn(f"cannot check that {flag} {model} translates {source}->{target}: its config.json names no {what} (it is used as "
             f"one: make sure it is, or add \"languages\": {{\"source\": \"{source}\", \"target\": \"{target}\"}} to its "
             "config.json to have it checked)")
    return False


def locate(spec: str, source: str, target: str, flag: str, warn: Callable[[str], None] | None = None) -> tuple[Path, dict[str, Any]]:
    """The model dir of a path or Hub id, checked to translate `source` -> `target` (`flag` names it in the error; `warn`
    hears a model that names no languages), and what identifies it in a manifest: the model (a local dir's absolute
    path, or the Hub id and the commit the cache holds) and its weights' sha256."""
    from nmtcli import hub
    from nmtcli.checksums import file_sha256

    path, origin = hub.locate_model(spec)
    check_direction(path, source, target, flag, warn=warn)
    weights = sorted(Path(path).glob("*.safetensors"))
    if not weights:
        raise NmtError(f"{flag} {spec} has no weights (*.safetensors)", "give an nmt model dir or Hub id", exit_code=2)
    return path, {**origin, "sha256": {p.name: file_sha256(p) for p in weights}}


def score_file(model: Path, sources: Path, targets: Path, output: Path, languages: tuple[str, str], identity: dict[str, Any],
               device: str = "auto", precision: str = "fp32", chunk_lines: int | None = None, progress: Progress | None = None,
               task: str = "scoring", warn: Callable[[str], None] | None = None) -> Path:
    """`output`: `model`'s per-token log-probability of each (source, target) pair, one a line, six decimals. Done
    already (the file there: the chunks are joined into it by one rename), it is kept; cut short, it resumes."""
    from nmtcli.api import open_engine
    from nmtcli.bulk import CHUNK_LINES, Job, decoded
    from nmtcli.inference.translator import SearchSettings

    if output.is_file():
        return output
    source, target, codes = model_languages(model)
    engine = open_engine(model, device=device, precision=precision, settings=SearchSettings(**PER_TOKEN), warn=warn,
                         languages=languages if codes is not None else (None, None))
    settings = SearchSettings(**PER_TOKEN)
    what = {"model": identity, "languages": list(languages), "scores": PER_TOKEN, "precision": precision}
    job = Job([sources, targets], output, what, chunk_lines or CHUNK_LINES)

    def scores(chunk, columns: list[list[bytes]]):
        lines = decoded(columns[0], str(sources), chunk.first, warn)
        given = decoded(columns[1], str(targets), chunk.first, warn)
        for result in engine.score(lines, given, None, settings):
            yield f"{result.score:.6f}"

    try:
        job.run(scores, None if progress is None else lambda done, total: progress(task, done, total))
    finally:
        engine.close()
    return output


def _truncations(warn: Callable[[str], None] | None, task: str):
    """(a warn that keeps the pairs cut to the model's length to itself, and what says them in one line after): the
    engine's one line a pair named lines of the cleaned text, hundreds of them for a short-context model."""
    cut: list[str] = []

    def hear(message: str) -> None:
        if " truncated to the model's " in message:
            cut.append(message)
        elif warn is not None:
            warn(message)

    def summary() -> None:
        if cut and warn is not None:
            warn(f"{task}: {len(cut):,} pairs longer than the model reads were scored on their beginning alone, a guess at "
                 f"their cost (the first: {cut[0]}, a line of the cleaned training text)")

    return hear, summary


def scorer(forward: tuple[Path, dict] | None, reverse: tuple[Path, dict] | None, languages: tuple[str, str], device: str,
           warn: Callable[[str], None] | None = None):
    """The score filter's `score(sources, targets, work, progress, resumed)` (data/score_filter.py): the forward model's
    scores of the pairs, the reverse model's of the pairs turned round; `resumed` gets, by model ("forward",
    "reverse"), the chunks of its scores an interrupted run left done (bulk.chunks_done), which this one takes up."""
    from nmtcli.bulk import chunks_done

    src, tgt = languages

    def score(sources: Path, targets: Path, work: Path, progress: Progress,
              resumed: dict[str, int] | None = None) -> tuple[Path | None, Path | None]:
        work.mkdir(parents=True, exist_ok=True)
        out: list[Path | None] = [None, None]
        for k, (model, a, b, name, pair) in enumerate(((forward, sources, targets, "forward", (src, tgt)),
                                                       (reverse, targets, sources, "reverse", (tgt, src)))):
            if model is not None:
                hear, summary = _truncations(warn, f"scoring {pair[0]}->{pair[1]}")
                if resumed is not None:
                    resumed[name] = chunks_done(work / f"{name}.txt")
                out[k] = score_file(model[0], a, b, work / f"{name}.txt", pair, model[1], device, progress=progress,
                                    task=f"scoring {pair[0]}->{pair[1]}", warn=hear)
                summary()
        return out[0], out[1]

    return score

