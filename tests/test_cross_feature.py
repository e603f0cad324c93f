"""The cross-feature check (issue 51): each user-visible feature's quality, measured under the current defaults of
every other feature, on the tests' one trained model.

Each feature was measured when it landed, under the defaults of that day; a later default (the brevity penalty
`nmt average` calibrates, beam 4, a coverage penalty, int8, ...) can change what an earlier feature does without
any of that feature's tests noticing. So every check here takes the session's `trained_model` as a user gets it
(`nmt prepare`, `nmt train --preset tiny`, `nmt average`: whatever the model records is in force), calls its feature
through a public surface (`nmt` in-process, `nmtcli.Translator`, `nmt serve`'s ASGI app) with that feature's own
settings only, and asserts a measure a user would judge the output by, against the rule task's truth: tests/corpus.py
translates word by word through a lexicon and reorders (adjectives after their noun, the verb last), so every test
line's true translation and true word alignment are known (`rule`). Thresholds are today's values with a margin; the
comment beside each says what was measured. A failure names the feature and the defaults to look at.

Adding a feature: translate through its public surface with nothing but its own setting changed, measure what a user
would look at against `rule` (or the plain translation), set the bar from what today's model gives with a margin,
and write both in a comment (docs/architecture.md, "The cross-feature check").
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from conftest import nmt_in_process
from corpus import ADJECTIVES, DETERMINERS, NOUNS, VERBS

LEXICON = {**DETERMINERS, **ADJECTIVES, **NOUNS, **VERBS}
NBEST = 4  # the default beam's width: the longest n-best list it can give


def rule(source: str) -> tuple[str, set[tuple[int, int]]]:
    """The rule task's true translation of `source` and its true word alignment (Pharaoh links source-target): each
    noun phrase "det adj* noun" becomes "det noun adj*", the verb moves to the end, every word through the lexicon."""
    words = source.split()
    verb = next(i for i, word in enumerate(words) if word in VERBS)

    def phrase(start: int, end: int) -> list[int]:
        return [start, end - 1, *range(start + 1, end - 1)]

    order = [*phrase(0, verb), *phrase(verb + 1, len(words)), verb]  # the source word of each target word
    return " ".join(LEXICON[words[i]] for i in order), {(i, j) for j, i in enumerate(order)}


@dataclass(frozen=True)
class Lines:
    sources: list[str]
    references: list[str]
    links: list[set[tuple[int, int]]]

    @property
    def text(self) -> str:
        return "".join(line + "\n" for line in self.sources)


def bleu(hypotheses: list[str], references: list[str]) -> float:
    return sacrebleu.corpus_bleu(hypotheses, [references]).score


def chrf(hypotheses: list[str], references: list[str]) -> float:
    return sacrebleu.corpus_chrf(hypotheses, [references]).score


def length_ratio(hypotheses: list[str], references: list[str]) -> float:
    """Output words over reference words (the corpus' words are whole words: a word count is the length a reader sees)."""
    return sum(len(h.split()) for h in hypotheses) / sum(len(r.split()) for r in references)


def spearman(x: list[float], y: list[float]) -> float:
    """Spearman's rank correlation, ties given their mean rank."""
    def ranks(values: list[float]) -> np.ndarray:
        a = np.asarray(values, dtype=float)
        r = np.empty(len(a))
        r[a.argsort(kind="stable")] = np.arange(len(a))
        for value in np.unique(a):
            r[a == value] = r[a == value].mean()
        return r
    return float(np.corrcoef(ranks(x), ranks(y))[0, 1])


def precision_recall(alignments: list[str], links: list[set[tuple[int, int]]]) -> tuple[float, float]:
    """Links found that are true over links found, and over true links, summed over the lines."""
    right = found = true = 0
    for alignment, gold in zip(alignments, links):
        pairs = {tuple(map(int, link.split("-"))) for link in alignment.split()}
        right, found, true = right + len(pairs & gold), found + len(pairs), true + len(gold)
    return right / found, right / true


def records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines()]


# --- what the checks share: the test lines, translated once each way --------------------------------------------


@pytest.fixture(scope="module")
def lines(corpus) -> Lines:
    sources = corpus["test"].with_suffix(".en").read_text(encoding="utf-8").splitlines()
    references = corpus["test"].with_suffix(".de").read_text(encoding="utf-8").splitlines()
    truth = [rule(s) for s in sources]
    assert [t for t, _ in truth] == references  # `rule` is the corpus' rule
    return Lines(sources, references, [links for _, links in truth])


@pytest.fixture(scope="module")
def plain(trained_model, lines) -> list[str]:
    """`nmt translate -m MODEL` of the test lines: every default."""
    out = nmt_in_process("translate", "-m", str(trained_model), input=lines.text).stdout.splitlines()
    assert len(out) == len(lines.sources)
    return out


@pytest.fixture(scope="module")
def json_records(trained_model, lines) -> list[dict]:
    """`nmt translate --output-format json --alignment words --nbest 4`: the records alignment and n-best are read from."""
    return records(nmt_in_process("translate", "-m", str(trained_model), "--output-format", "json", "--alignment", "words",
                                  "--nbest", str(NBEST), input=lines.text).stdout)


@pytest.fixture(scope="module")
def translator(trained_model):
    from nmtcli import Translator

    with Translator.load(trained_model) as translator:
        yield translator


@pytest.fixture(scope="module")
def api_plain(translator, lines):
    """`Translator.translate` of the test lines: every default."""
    return translator.translate(lines.sources)


# --- plain translation, the API, serve -------------------------------------------------------------------------


def test_plain_translation_reaches_the_rule_tasks_references(plain, lines):
    # Measured: BLEU 98.1, chrF2 99.0, 191 of 200 lines exactly the reference.
    score, characters = bleu(plain, lines.references), chrf(plain, lines.references)
    assert score >= 95 and characters >= 97, (
        f"plain translation: BLEU {score:.1f} (bar 95), chrF2 {characters:.1f} (bar 97) under the defaults; look at the "
        "search defaults (beam, alpha, max_len) and what `nmt average` records in the model (config.json \"search\")")


def test_the_api_translates_and_scores_as_the_command_line(api_plain, plain, json_records):
    texts = [t.text for t in api_plain]
    assert texts == plain, "API: Translator.translate's defaults differ from `nmt translate`'s (api.py against cli/translate.py)"
    api_confidence = [t.confidence for t in api_plain]
    cli_confidence = [r["confidence"] for r in json_records]
    assert api_confidence == pytest.approx(cli_confidence, abs=1e-6), (
        "API: Translation.confidence differs from the JSON record's (--alignment and --nbest must not change a line's confidence)")


def _serve_app(model: Path):
    """`nmt serve -m MODEL`'s app with every default of the command: its flags' defaults, read from cli/serve.py,
    made into the settings and config as the command makes them."""
    from nmtcli.cli.serve import command
    from nmtcli.device import resolve_device
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.serve.app import ServeConfig, create_app
    from nmtcli.serve.models import load_models

    flag = {name: p.default for name, p in inspect.signature(command).parameters.items()}
    settings = SearchSettings(beam=flag["beam"], alpha=flag["alpha"], coverage_penalty=flag["coverage_penalty"],
                              brevity_penalty=flag["brevity_penalty"], max_len_a=flag["max_len_a"], max_len_b=flag["max_len_b"],
                              length_penalty=flag["length_penalty"], batch_tokens=flag["batch_tokens"])
    served = load_models([(str(model), model)], resolve_device(flag["device"]), settings, precision=flag["precision"])
    return create_app(served, ServeConfig(search=settings, protect=not flag["no_protect"]))


def test_serve_answers_what_the_command_line_prints(trained_model, lines, plain, json_records):
    pytest.importorskip("starlette")
    from test_prefix import _post_all

    # An app a call: the app's batcher lives in the event loop of its _post_all.
    [(status, answer)] = _post_all(_serve_app(trained_model), "/translate", [{"q": lines.sources, "source": "en", "target": "de"}])
    [(nmt_status, nmt_answer)] = _post_all(_serve_app(trained_model), "/nmt/translate", [
        {"lines": lines.sources, "source": "en", "target": "de", "alignment": "words", "nbest": NBEST}])
    assert status == 200 and answer["translatedText"] == plain, (
        "serve: POST /translate differs from `nmt translate` for the same lines; look at `nmt serve`'s flag defaults "
        "(cli/serve.py) against `nmt translate`'s")
    assert nmt_status == 200 and nmt_answer["translations"] == json_records, (
        "serve: POST /nmt/translate's records (alignment, n-best, scores, confidence) differ from `nmt translate --output-format json`'s")


# --- confidence, alignment, n-best -------------------------------------------------------------------------------


def test_confidence_ranks_translations_by_their_quality(translator, api_plain, lines):
    """Spearman of Translation.confidence with sentence chrF (issue 51's measure), on lines of a spread of quality: the
    test lines (191 of 200 translated exactly) and the same lines run together in pairs, which the model, trained on
    single sentences, translates in part (chrF2 ~52). Under the model's own brevity weight (0: `nmt average` found its
    validation translations long enough), and under 2.5, the weight it calibrated for issue 51's model, whose
    confidence then stopped ranking (0.16). And on the test lines alone: the wrong ones ranked below the right ones
    (the area under the ROC curve)."""
    pairs = [f"{a} {b}" for a, b in zip(lines.sources[::2], lines.sources[1::2])]
    references = [*lines.references, *(f"{a} {b}" for a, b in zip(lines.references[::2], lines.references[1::2]))]
    for weight in (None, 2.5):
        translations = [*api_plain, *translator.translate(pairs)] if weight is None else translator.translate(
            [*lines.sources, *pairs], brevity_penalty=weight)
        quality = [sacrebleu.sentence_chrf(t.text, [r]).score for t, r in zip(translations, references)]
        rho = spearman([t.confidence for t in translations], quality)
        # Measured: 0.74 under the model's weight, 0.73 under 2.5 (chrF2 of the test lines 99.2 on average, of the pairs 51.7).
        under = "the model's own brevity weight" if weight is None else f"brevity_penalty={weight}"
        assert rho >= 0.5, (f"confidence: Spearman {rho:.2f} with sentence chrF (bar 0.5) under {under}; look at the brevity "
                            "penalty and the search's length defaults, then inference/confidence.py")

    right = [t.confidence for t, r in zip(api_plain, lines.references) if t.text == r]
    wrong = [t.confidence for t, r in zip(api_plain, lines.references) if t.text != r]
    if not wrong:
        return  # nothing to rank below the rest
    auc = np.mean([(a > b) + 0.5 * (a == b) for a in right for b in wrong])
    # Measured: 0.974 (9 wrong lines).
    assert auc >= 0.85, (f"confidence: the test lines' wrong translations are ranked below the right ones with AUC {auc:.3f} "
                         "(bar 0.85); look at the default brevity penalty and inference/confidence.py")


def test_word_alignments_find_the_true_links(json_records, translator, lines):
    """`--alignment words` of the search's translations (the lines translated as the reference: the truth is known for
    those) and of the references themselves (forced decoding, the API's `score(..., alignment="words")`)."""
    exact = [(r["alignment"], gold) for r, ref, gold in zip(json_records, lines.references, lines.links) if r["translation"] == ref]
    precision, recall = precision_recall(*zip(*exact))
    # Measured: 1.000 and 1.000 over the 191 exact lines.
    assert len(exact) >= 0.9 * len(lines.sources) and precision >= 0.95 and recall >= 0.95, (
        f"alignment: --alignment words precision {precision:.3f}, recall {recall:.3f} (bars 0.95) over {len(exact)} lines; "
        "look at the reading of the attention (inference/alignment.py) and at what the glossary or protected spans changed in it")

    scored = translator.score(lines.sources, lines.references, alignment="words")
    precision, recall = precision_recall([s.alignment for s in scored], lines.links)
    # Measured: 0.999 and 1.000.
    assert precision >= 0.95 and recall >= 0.95, (
        f"alignment: the API's forced alignment of the references: precision {precision:.3f}, recall {recall:.3f} (bars 0.95); "
        "look at inference/alignment.py and the default brevity penalty (score() scores with it)")
    api = translator.translate(lines.sources[:20], alignment="words")
    assert [t.alignment for t in api] == [r["alignment"] for r in json_records[:20]], (
        "alignment: Translator.translate(alignment='words') differs from `nmt translate --alignment words`")


def test_nbest_lists_are_distinct_sorted_and_start_with_the_plain_translation(json_records, plain, lines):
    for n, (record, best) in enumerate(zip(json_records, plain)):
        texts = [e["translation"] for e in record["nbest"]]
        scores = [e["score"] for e in record["nbest"]]
        assert len(texts) == NBEST and len(set(texts)) == NBEST, f"n-best: line {n + 1}'s list is {texts} (4 distinct wanted)"
        assert scores == sorted(scores, reverse=True), f"n-best: line {n + 1}'s list is not sorted by score: {scores}"
        assert texts[0] == record["translation"] == best, (
            f"n-best: line {n + 1}'s first entry {texts[0]!r} is not the plain translation {best!r}; look at what --nbest "
            "or --alignment change in the search (coverage or brevity penalty reranking)")
    oracle = np.mean([any(e["translation"] == ref for e in r["nbest"]) for r, ref in zip(json_records, lines.references)])
    # Measured: 1.0 (the reference is in every line's 4-best list).
    assert oracle >= 0.97, f"n-best: the reference is in {oracle:.1%} of the 4-best lists (bar 97%)"


# --- the features a user turns on, each alone --------------------------------------------------------------------


GLOSSARY = {"house": "Hausboot", "river": "Strom", "city": "Kommune", "tree": "Baumstamm"}


def test_a_glossary_puts_its_terms_in_place_and_keeps_the_sentence_around_them(trained_model, lines, tmp_path):
    chosen = [n for n, s in enumerate(lines.sources) if set(s.split()) & set(GLOSSARY)]
    sources = [lines.sources[n] for n in chosen]
    term_of = {NOUNS[source]: target for source, target in GLOSSARY.items()}
    references = [" ".join(term_of.get(w, w) for w in lines.references[n].split()) for n in chosen]  # the terms in place
    (tmp_path / "terms.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in GLOSSARY.items()), encoding="utf-8")
    out = nmt_in_process("translate", "-m", str(trained_model), "--glossary", str(tmp_path / "terms.tsv"),
                         input="".join(s + "\n" for s in sources)).stdout.splitlines()

    present = np.mean([o.split().count(target) == s.split().count(source)
                       for s, o in zip(sources, out) for source, target in GLOSSARY.items() if source in s.split()])
    placed = np.mean([o == r for h, ref in zip(out, references) for o, r in zip(h.split(), ref.split()) if r in GLOSSARY.values()])
    score = bleu(out, references)
    # Measured: 62 lines, 64 occurrences; every term present as a whole word as often as its source term, 100% at its
    # true place, BLEU 98.6 against the references with the terms in place (plain: 98.1 against the plain references).
    assert present == 1.0, (f"glossary: {present:.1%} of the lines' terms are there as whole words as often as their source "
                            "terms (100% wanted); look at inference/terms.py")
    assert placed >= 0.9 and score >= 93, (
        f"glossary: {placed:.1%} of the terms at their true word (bar 90%), BLEU {score:.1f} of the sentences with the terms "
        "(bar 93); look at the glossary's alignment reading (inference/terms.py) under the default beam and brevity penalty")


SPANS = ["{name}", "%s", "https://example.com/a?b=1", "x@example.org", "{{ user.name }}"]


def test_protected_spans_come_out_once_after_the_word_they_followed(translator, lines):
    """A placeholder, URL or e-mail address after the subject: once, byte for byte, after the subject noun's translation
    (the rule puts the noun second), the rest of the sentence translated as without it."""
    sources, expected, spans = [], [], []
    for n, (source, reference) in enumerate(zip(lines.sources[:100], lines.references)):
        words, span = source.split(), SPANS[n % len(SPANS)]
        verb = next(i for i, w in enumerate(words) if w in VERBS)
        sources.append(" ".join([*words[:verb], span, *words[verb:]]))
        target = reference.split()
        expected.append(" ".join([*target[:2], span, *target[2:]]))
        spans.append(span)
    out = [t.text for t in translator.translate(sources)]
    once = np.mean([o.count(span) == 1 for o, span in zip(out, spans)])
    placed = np.mean([o == e for o, e in zip(out, expected)])
    rest = bleu([" ".join(o.replace(span, " ").split()) for o, span in zip(out, spans)], lines.references[:100])
    # Measured: 100% once, 94% exactly the expected line, BLEU 97.6 of the rest.
    assert once == 1.0, f"protected spans: {once:.0%} of the lines have their span exactly once (100% wanted)"
    assert placed >= 0.85 and rest >= 93, (
        f"protected spans: {placed:.0%} of the lines exactly right (bar 85%), BLEU {rest:.1f} of the rest (bar 93); look at "
        "the placement's alignment (documents/protect.py, COVERING) under the default search")


def test_a_target_prefix_is_kept_and_the_translation_goes_on_from_it(trained_model, lines, tmp_path):
    """Each line's prefix: a determiner other than the reference's (one the model would not choose); the rest of the
    translation should be the reference's rest."""
    determiners = list(DETERMINERS.values())
    prefixes = [determiners[(determiners.index(r.split()[0]) + 1) % len(determiners)] for r in lines.references]
    (tmp_path / "prefixes.txt").write_text("".join(p + "\n" for p in prefixes), encoding="utf-8")
    out = nmt_in_process("translate", "-m", str(trained_model), "--prefix-file", str(tmp_path / "prefixes.txt"),
                         input=lines.text).stdout.splitlines()
    kept = np.mean([o.split()[:1] == [p] for o, p in zip(out, prefixes)])
    rest = np.mean([o.split()[1:] == r.split()[1:] for o, r in zip(out, lines.references)])
    # Measured: 100% kept, 96% of the lines go on as the reference does.
    assert kept == 1.0 and rest >= 0.9, (
        f"prefixes: {kept:.0%} of the outputs start with their prefix (100% wanted), {rest:.0%} go on as the reference "
        "(bar 90%); look at the forced prefix under the default beam and brevity penalty (inference/beam.py)")


def test_sampling_is_reproducible_varied_and_still_translates(translator, lines):
    first, again, other = ([t.text for t in translator.sample(lines.sources, **seed)] for seed in ({}, {}, {"seed": 2}))
    differ = np.mean([a != b for a, b in zip(first, other)])
    score = bleu(first, lines.references)
    # Measured: the same seed the same samples; seed 2 differs on 45% of the lines; BLEU 87.8 (seed 1), 85.8 (seed 2).
    assert first == again, "sampling: the same seed gave other samples (inference/sampling.py)"
    assert differ >= 0.2, f"sampling: another seed changed {differ:.0%} of the lines (bar 20%): the draws ignore the seed?"
    assert score >= 75, f"sampling: BLEU {score:.1f} of the samples (bar 75): the default temperature or sampling method changed?"


def test_coverage_and_brevity_penalties_keep_translations_as_long_as_the_references(trained_model, translator, plain, lines):
    """The defaults (coverage off, the model's own brevity weight) and each penalty turned on at a typical weight: the
    output as long as the references, BLEU no worse than the plain search's by more than a point."""
    base = bleu(plain, lines.references)
    ratio = length_ratio(plain, lines.references)
    # Measured: 0.995 (the model's calibrated brevity weight is 0 here: the validation translations were long enough).
    assert 0.95 <= ratio <= 1.05, f"length: the default search writes {ratio:.3f} of the references' words (0.95-1.05 wanted)"
    covered = nmt_in_process("translate", "-m", str(trained_model), "--coverage-penalty", "0.4", input=lines.text).stdout.splitlines()
    brief = [t.text for t in translator.translate(lines.sources, brevity_penalty=2.5)]
    for name, out in (("--coverage-penalty 0.4", covered), ("brevity_penalty=2.5", brief)):
        ratio, score = length_ratio(out, lines.references), bleu(out, lines.references)
        # Measured: coverage 0.4: ratio 0.997, BLEU 98.5; brevity 2.5: ratio 0.997, BLEU 98.5 (plain 98.1).
        assert 0.95 <= ratio <= 1.05 and score >= base - 1, (
            f"{name}: {ratio:.3f} of the references' words (0.95-1.05 wanted), BLEU {score:.1f} against the plain {base:.1f}; "
            "look at how the penalty combines with the default length penalty and the model's brevity weight")


def test_a_line_of_two_sentences_translates_as_the_two_apart(translator, lines):
    pairs = [(lines.sources[n], lines.sources[n + 1]) for n in range(0, 100, 2)]
    split = [t.text for t in translator.translate([f"{a}. {b}." for a, b in pairs], split_sentences=True)]
    alone = [t.text for t in translator.translate([f"{s}." for pair in pairs for s in pair])]
    joined = [f"{a} {b}" for a, b in zip(alone[::2], alone[1::2])]
    assert split == joined, "sentence splitting: a line of two sentences is not the two translated apart, joined with its space"
    references = [f"{lines.references[n]} {lines.references[n + 1]}" for n in range(0, 100, 2)]
    words = [" ".join(s.replace(".", " ").split()) for s in split]  # the model, trained without punctuation, drops or keeps the period
    score = bleu(words, references)
    # Measured: BLEU 90.5 (the same lines unsplit: 32.1; a period the model never saw costs a few lines).
    assert score >= 85, f"sentence splitting: BLEU {score:.1f} of the split lines (bar 85); look at the sentence splitter and the search defaults"


def _tagged(words: list[str], k: int, open_: str, close: str) -> str:
    return " ".join(f"{open_}{w}{close}" if i == k else w for i, w in enumerate(words))


def test_html_keeps_every_tag_and_wraps_the_translation_of_its_words(translator, lines):
    """One document of 60 paragraphs, each with <b> around one word (each position in turn): the <b> should wrap that
    word's true translation, and the text be the translation."""
    chosen = range(60)
    marked = [n % len(lines.sources[n].split()) for n in chosen]
    document = "<html><body>\n" + "\n".join(f"<p>{_tagged(lines.sources[n].split(), k, '<b>', '</b>')}</p>" for n, k in zip(chosen, marked)) + "\n</body></html>\n"
    out = translator.translate_html(document)
    paragraphs = re.findall(r"<p>(.*?)</p>", out)
    assert out.startswith("<html><body>\n") and out.endswith("\n</body></html>\n") and len(paragraphs) == len(chosen)
    assert all(p.count("<b>") == p.count("</b>") == 1 for p in paragraphs), "HTML: a <b> was lost or repeated"
    wrapped = [re.search(r"<b>(.*?)</b>", p).group(1) for p in paragraphs]
    truth = [LEXICON[lines.sources[n].split()[k]] for n, k in zip(chosen, marked)]
    placed = np.mean([w == t for w, t in zip(wrapped, truth)])
    score = bleu([" ".join(re.sub(r"</?b>", " ", p).split()) for p in paragraphs], [lines.references[n] for n in chosen])
    # Measured: 100% of the tags around exactly the true word, BLEU 97.9 of the text.
    assert placed >= 0.9 and score >= 93, (
        f"HTML: {placed:.0%} of the <b> wrap exactly their word's translation (bar 90%), BLEU {score:.1f} of the text (bar 93); "
        "look at COVERING (inference/alignment.py) and the search defaults HTML translates with")


def test_a_markdown_document_through_the_command_line(trained_model, lines, tmp_path):
    """`nmt translate -i doc.md -o out.md`: emphasis on the true word, code and link targets byte for byte, text translated."""
    chosen = range(100, 130)
    marked = [n % len(lines.sources[n].split()) for n in chosen]
    blocks = [_tagged(lines.sources[n].split(), k, "**", "**") for n, k in zip(chosen, marked)]
    code = "```\nthe dog sees a cat\n```"
    link = "[the old man](https://example.com/the-old-man) sees a red ball"
    (tmp_path / "doc.md").write_text("\n\n".join([*(f"- {b}" if i % 2 else b for i, b in enumerate(blocks)), code, link]) + "\n", encoding="utf-8")
    nmt_in_process("translate", "-m", str(trained_model), "-i", str(tmp_path / "doc.md"), "-o", str(tmp_path / "out.md"))
    out = (tmp_path / "out.md").read_text(encoding="utf-8").split("\n\n")
    assert len(out) == len(blocks) + 2 and out[-2] == code, "documents: Markdown's blocks or its code block not kept"
    assert out[-1].startswith("[der mann alt](https://example.com/the-old-man) "), f"documents: the link came out as {out[-1]!r}"
    texts = [b.removeprefix("- ") for b in out[:-2]]
    assert all(t.count("**") == 2 for t in texts), "documents: Markdown emphasis lost or repeated"
    placed = np.mean([re.search(r"\*\*(.*?)\*\*", t).group(1) == LEXICON[lines.sources[n].split()[k]] for t, n, k in zip(texts, chosen, marked)])
    score = bleu([" ".join(t.replace("**", " ").split()) for t in texts], [lines.references[n] for n in chosen])
    # Measured: 100% of the emphasis on the true word, BLEU 100 of the text.
    assert placed >= 0.9 and score >= 93, (
        f"documents: {placed:.0%} of the emphasis on its word's translation (bar 90%), BLEU {score:.1f} (bar 93); "
        "look at the documents' path (documents/pipeline.py) under the default search")


# --- other engines and precisions ---------------------------------------------------------------------------------


def test_int8_translates_within_a_point_of_fp32(trained_model, lines, plain):
    from nmtcli import Translator

    with Translator.load(trained_model, device="cpu", precision="int8") as int8:
        out = [t.text for t in int8.translate(lines.sources)]
    score, base = bleu(out, lines.references), bleu(plain, lines.references)
    same = np.mean([a == b for a, b in zip(out, plain)])
    # Measured: BLEU 97.9 against fp32's 98.1, 199 of 200 lines the same.
    assert score >= base - 1 and same >= 0.9, (
        f"int8: BLEU {score:.1f} against fp32's {base:.1f} (at most 1 lower), {same:.0%} of the lines as fp32's (bar 90%); "
        "look at inference/precision.py")


def test_the_ctranslate2_engine_translates_as_well_as_the_native_one(trained_model, lines, plain, tmp_path):
    pytest.importorskip("ctranslate2")
    nmt_in_process("export", "ctranslate2", str(trained_model), str(tmp_path / "ct2"))
    # CTranslate2 has the power length penalty only: the one setting this engine needs.
    out = nmt_in_process("translate", "--engine", "ctranslate2", "-m", str(tmp_path / "ct2"), "--length-penalty", "power",
                         input=lines.text).stdout.splitlines()
    score, base = bleu(out, lines.references), bleu(plain, lines.references)
    # Measured: BLEU 98.1, as the native engine's (its 200 lines the same).
    assert score >= base - 1, (f"ctranslate2: BLEU {score:.1f} against the native engine's {base:.1f} (at most 1 lower); "
                               "look at `nmt export ctranslate2` and the brevity weight it cannot carry")


def test_a_multilingual_models_target_tag_chooses_the_output_language(m2m100_dirs, lines, tmp_path):
    """The cheapest multilingual model of the suite: the m2m100_dirs fixture's NLLB-layout model, trained a few steps on
    en->de of the rule task only, imported with `nmt import nllb`. Asked for German, it should write more of the
    reference's German than asked for French (a tag it never saw); no tag should show in the text, and a line's
    confidence should not depend on --split-sentences."""
    from nmtcli import Translator

    nmt_in_process("import", "nllb", str(m2m100_dirs["nllb"]), "-o", str(tmp_path / "nllb"))
    sources, references = lines.sources[:30], lines.references[:30]
    scores = {}
    for target in ("deu_Latn", "fra_Latn"):
        with Translator.load(tmp_path / "nllb", source_lang="eng_Latn", target_lang=target) as translator:
            out = translator.translate(sources)
            if target == "deu_Latn":
                split = translator.translate(sources[:5], split_sentences=True)
                assert [t.confidence for t in split] == pytest.approx([t.confidence for t in out[:5]], abs=1e-9), (
                    "multilingual: a line's confidence differs with --split-sentences (the language tag counted in one only)")
        assert not any(code in t.text for t in out for code in ("eng_Latn", "deu_Latn", "fra_Latn")), "multilingual: a tag in the text"
        scores[target] = chrf([t.text for t in out], references)
    # Measured: chrF2 19.1 into German, 9.8 into French.
    assert scores["deu_Latn"] >= scores["fra_Latn"] + 4, (
        f"multilingual: chrF2 {scores['deu_Latn']:.1f} into German against {scores['fra_Latn']:.1f} into French (4 more wanted); "
        "look at how the target tag is forced (inference/tokenizer.py) under the default search")
