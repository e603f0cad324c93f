"""Target prefixes (`nmt translate --prefix-file`, "prefix" in /nmt/translate): the output starts with the
prefix's tokens and the search continues from there, checked against searches forced by hand."""

from __future__ import annotations

import asyncio
import itertools
import json
import re

import pytest
import torch

from nmtcli.inference.beam import beam_search
from nmtcli.inference.penalties import lp
from nmtcli.inference.greedy import greedy_search
from conftest import torch_threads
from nmtcli.model.config import EOS_ID, ModelConfig
from nmtcli.model.transformer import Transformer
from test_beam import WORDS, _as_lists, _batch, greedy, sequence_log_prob, tiny_model


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models: one thread is fastest, and on a loaded machine many times faster than two."""
    with torch_threads(1):
        yield


SENTENCES = [[5, 6, 7, 8], [20, 21], [9, 10, 11, 12, 13, 14], [15]]
PREFIXES = [[11, 12, 13], [], [4], [25, 26]]


def test_greedy_search_forces_the_prefix_then_continues_as_uncached_decoding_from_it():
    model = tiny_model(1, vocab_size=30)
    hyps = greedy_search(model, _batch(SENTENCES), max_len_a=0.0, max_len_b=8, prefixes=PREFIXES)
    for s, prefix, (hyp,) in zip(SENTENCES, PREFIXES, hyps):
        src = torch.tensor([[*s, EOS_ID]])
        assert hyp.tokens == greedy(model, src, 8, tuple(prefix))
        assert hyp.tokens[: len(prefix)] == prefix
        # The prefix counts with the model's log-probabilities of its tokens.
        assert hyp.log_prob == pytest.approx(sequence_log_prob(model, src, tuple(hyp.tokens)), abs=1e-4)
    assert any(len(h[0].tokens) > len(p) for h, p in zip(hyps, PREFIXES) if p), "nothing continued past a prefix"


def exhaustive_best_with_prefix(model, src, prefix: tuple[int, ...], max_len: int, alpha: float):
    """Every output that starts with `prefix` and has at most max_len tokens, scored as the search ranks them."""
    best = None
    for extra in range(max_len - len(prefix) + 1):
        for rest in itertools.product(WORDS, repeat=extra):
            tokens = (*prefix, *rest)
            score = sequence_log_prob(model, src, tokens) / lp(len(tokens) + 1, alpha)
            if best is None or score > best[1]:
                best = (list(tokens), score)
    return best


def test_wide_beam_with_a_prefix_finds_the_exhaustive_best_continuation():
    src = torch.tensor([[4, 5, 4, EOS_ID]])
    prefix = [5, 4]
    differs = False
    for seed in range(4):
        model = tiny_model(seed)
        tokens, score = exhaustive_best_with_prefix(model, src, tuple(prefix), 5, 0.6)
        hyp = beam_search(model, src, beam=27, alpha=0.6, max_len_a=0.0, max_len_b=5, prefixes=[prefix])[0][0]
        assert hyp.tokens == tokens and hyp.score == pytest.approx(score, abs=1e-4), seed
        differs |= beam_search(model, src, beam=27, alpha=0.6, max_len_a=0.0, max_len_b=5)[0][0].tokens[:2] != prefix
    assert differs, "every unforced search starts with the prefix anyway: the test proves nothing"


def textbook_beam(model, src: torch.Tensor, prefix: list[int], beam: int, max_len: int, alpha: float) -> list[int]:
    """Beam search written plainly for one sentence, no cache, started from the prefix as its one hypothesis:
    every live hypothesis extended by every token (only EOS at the limit), the 2K best kept, those ending in
    EOS finished, the K best others live, until no live hypothesis can beat the best finished one."""
    cfg = model.config
    live = [(list(prefix), sequence_log_prob(model, src, tuple(prefix)) - _eos_log_prob(model, src, prefix))]
    best: tuple[list[int], float] | None = None
    max_penalty = lp(max_len + 1, alpha)
    while live:
        candidates = []
        for tokens, log_prob in live:
            with torch.no_grad():
                log_probs = torch.log_softmax(model(src, torch.tensor([[cfg.bos_id, *tokens]]))[0, -1].float(), dim=-1)
            choices = [cfg.eos_id] if len(tokens) >= max_len else [t for t in range(cfg.vocab_size) if t not in (cfg.pad_id, cfg.bos_id)]
            candidates += [(tokens + [t], log_prob + log_probs[t].item()) for t in choices]
        candidates = sorted(candidates, key=lambda c: c[1], reverse=True)[: 2 * beam]
        for tokens, log_prob in candidates:
            if tokens[-1] == cfg.eos_id:
                score = log_prob / lp(len(tokens), alpha)
                if best is None or score > best[1]:
                    best = (tokens[:-1], score)
        live = [c for c in candidates if c[0][-1] != cfg.eos_id][:beam]
        if best is not None and live and best[1] >= max(log_prob for _, log_prob in live) / max_penalty:
            break
    return best[0]


def _eos_log_prob(model, src: torch.Tensor, tokens: list[int]) -> float:
    """log p(EOS | tokens): sequence_log_prob counts the final EOS, a live hypothesis has none yet."""
    with torch.no_grad():
        log_probs = torch.log_softmax(model(src, torch.tensor([[model.config.bos_id, *tokens]]))[0, -1].float(), dim=-1)
    return log_probs[EOS_ID].item()


@pytest.mark.parametrize("beam", [1, 4, 8])
def test_prefix_is_honoured_token_exactly_and_the_search_equals_one_forced_by_hand(beam):
    model = tiny_model(2, vocab_size=30)
    src = _batch(SENTENCES)
    hyps = beam_search(model, src, beam=beam, alpha=0.6, max_len_a=0.0, max_len_b=8, nbest=min(beam, 3), prefixes=PREFIXES)
    for i, (s, prefix) in enumerate(zip(SENTENCES, PREFIXES)):
        alone = torch.tensor([[*s, EOS_ID]])
        assert all(h.tokens[: len(prefix)] == prefix for h in hyps[i])
        for h in hyps[i]:  # the reported scores are the model's, prefix included
            assert h.log_prob == pytest.approx(sequence_log_prob(model, alone, tuple(h.tokens)), abs=1e-4)
            assert h.score == pytest.approx(h.log_prob / lp(len(h.tokens) + 1, 0.6), abs=1e-5)
        forced = greedy(model, alone, 8, tuple(prefix))
        greedy_score = sequence_log_prob(model, alone, tuple(forced)) / lp(len(forced) + 1, 0.6)
        assert hyps[i][0].score >= greedy_score - 1e-5
        if beam > 1:  # the whole search, forced the same way by hand
            assert hyps[i][0].tokens == textbook_beam(model, alone, prefix, beam, 8, 0.6)
        # The same sentence alone gets the same result as in the mixed batch.
        assert [h.tokens for h in beam_search(model, alone, beam=beam, alpha=0.6, max_len_a=0.0, max_len_b=8,
                                               nbest=min(beam, 3), prefixes=[prefix])[0]] == [h.tokens for h in hyps[i]]


@pytest.mark.parametrize("beam", [5, 8])
def test_a_wide_beam_diverges_after_the_prefix_instead_of_stopping_there(beam):
    """CTranslate2 issue 277: with beam >= 5 the search stopped at the end of the prefix (K copies of one hypothesis)."""
    model = tiny_model(3, vocab_size=30)
    prefix = [11, 12, 13, 14, 15]
    hyps = beam_search(model, _batch([[5, 6, 7, 8]]), beam=beam, max_len_a=0.0, max_len_b=10, nbest=beam, prefixes=[prefix])[0]
    assert len(hyps) == beam
    assert len({tuple(h.tokens) for h in hyps}) == beam  # distinct: they differ after the prefix
    assert all(h.tokens[:5] == prefix and len(h.tokens) > 5 for h in hyps)


def test_rows_leaving_and_fixed_span_steps_keep_their_prefixes():
    # Decided sentences leave the batch (their prefix rows with them) while others are still inside
    # theirs; the fixed-span steps that CUDA graphs replay (StepGraphs(capture=False) runs them on a CPU)
    # read the prefixes as the eager step does.
    from nmtcli.inference.beam import BeamSearch
    from nmtcli.inference.graphs import StepGraphs

    model = tiny_model(7, vocab_size=30)
    src = _batch(SENTENCES)
    prefixes = [[11], [], [4, 5, 6, 7, 8, 9], [25, 26]]
    settings = dict(alpha=0.6, max_len_a=1.0, max_len_b=3, nbest=2, length_penalty="gnmt", min_len=0, prefixes=prefixes)
    with torch.inference_mode():
        every_step = BeamSearch(model, src, 4, **settings).run(1, leave_fraction=0.0)
        assert len({len(h[0].tokens) for h in every_step}) > 1, "all sentences end together: the test proves nothing"
        for sync_every, leave_fraction in ((3, 0.0), (1, 0.5), (4, 0.25)):
            search = BeamSearch(model, src, 4, **settings)
            assert _as_lists(search.run(sync_every, leave_fraction=leave_fraction)) == _as_lists(every_step)
    fixed = beam_search(model, src, beam=4, alpha=0.6, max_len_a=1.0, max_len_b=3, nbest=2, sync_every=2,
                        graphs=StepGraphs(bucket=4, capture=False), prefixes=prefixes)
    assert _as_lists(fixed) == _as_lists(every_step)
    assert all(h.tokens[: len(p)] == p for hyps, p in zip(every_step, prefixes) for h in hyps)


def test_eos_is_not_allowed_before_the_prefix_ends():
    torch.manual_seed(4)
    model = Transformer(ModelConfig(vocab_size=30, d_model=16, d_ff=32, heads=2, layers=2, dropout=0.0, final_logits_bias=True)).eval()
    with torch.no_grad():
        model.final_logits_bias[EOS_ID] = 20.0  # a model that wants to stop at once
    src = _batch([[5, 6, 7, 8]])
    assert beam_search(model, src, beam=4)[0][0].tokens == []
    assert greedy_search(model, src)[0][0].tokens == []
    prefix = [11, 12, 13]
    assert beam_search(model, src, beam=4, prefixes=[prefix])[0][0].tokens[:3] == prefix
    assert greedy_search(model, src, prefixes=[prefix])[0][0].tokens[:3] == prefix


def test_a_prefix_over_the_length_limit_is_output_whole_and_an_empty_source_outputs_its_prefix():
    model = tiny_model(5, vocab_size=30)
    with torch.no_grad():
        model.embedding.tokens.weight[EOS_ID].fill_(-5)  # a model that never wants to stop
    prefix = [11, 12, 13, 14]
    for src in (_batch([[5, 6]]), _batch([[]])):  # limit 0 * 2 + 2 < 4; an empty source (EOS alone)
        for search in (lambda: beam_search(model, src, beam=3, max_len_a=0.0, max_len_b=2, prefixes=[prefix]),
                       lambda: greedy_search(model, src, max_len_a=0.0, max_len_b=2, prefixes=[prefix])):
            (hyp,) = search()[0]
            assert hyp.tokens == prefix
            assert hyp.log_prob == pytest.approx(sequence_log_prob(model, src, tuple(prefix)), abs=1e-4)
    # Below the limit the search goes on past the prefix (this model never stops before the limit).
    assert len(beam_search(model, _batch([[5, 6]]), beam=3, max_len_a=0.0, max_len_b=6, prefixes=[prefix])[0][0].tokens) == 6


# --- text in, text out ---------------------------------------------------------------------------

LINES = ["the small house is red", "", "a new book", "the cat sleeps"]


def _mid_word_prefix(translator) -> str:
    """Target text whose last piece does not end a word: a word's first pieces where the vocabulary splits it."""
    sp = translator.tokenizer.sp
    for word in ("Hausaufgaben", "Katzenfutter", "Bücherregal", "Sonnenblumen", "unglaublich"):
        pieces = sp.encode(word, out_type=str)
        if len(pieces) > 1:
            return "Das " + sp.decode(pieces[:-1])
    raise AssertionError("every test word is one piece: no mid-word prefix")


def test_translations_start_with_the_prefix_text_also_when_it_ends_mid_word(random_model):
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator

    translator = Translator(random_model, settings=SearchSettings(beam=4, max_len_a=0.0, max_len_b=12, nbest=2))
    mid_word = _mid_word_prefix(translator)
    prefixes = [mid_word, "Eine leere Zeile", "", "Die"]
    results = list(translator.translate_nbest(LINES, prefixes))
    for hyps, prefix in zip(results, prefixes):
        pieces = [translator.pieces[i] for i in translator.tokenizer.encode_target([prefix])[0]]
        assert all(h.tokens[: len(pieces)] == pieces and h.text.startswith(prefix) for h in hyps)
    assert results[1][0].text == "Eine leere Zeile"  # an empty line with a prefix: the prefix alone
    assert len(results[0][0].tokens) > len(translator.tokenizer.encode_target([mid_word])[0])
    assert [h.text for h in results[2]] == [h.text for h in translator.translate_nbest(LINES[2:3]).__next__()]


def test_prefix_file_through_the_cli_in_text_and_json(random_model, nmt_main, tmp_path):
    from nmtcli.inference.tokenizer import load_tokenizer

    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("Das kleine\nNur das\n\nDie Katze\n", encoding="utf-8")
    source = tmp_path / "in.txt"
    source.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    common = ("translate", "-m", str(random_model), "--max-len-a", "0", "--max-len-b", "8", "--prefix-file", str(prefixes))
    greedy = nmt_main(*common, "--beam", "1", "-i", str(source)).stdout.splitlines()
    records = [json.loads(line) for line in nmt_main(*common, "--output-format", "json", input=source.read_text()).stdout.splitlines()]
    tokenizer = load_tokenizer(random_model, json.loads((random_model / "config.json").read_text()))
    for text, record, prefix in zip(greedy, records, ["Das kleine", "Nur das", "", "Die Katze"]):
        assert text.startswith(prefix) and record["translation"].startswith(prefix)
        assert record["tokens"][: len(tokenizer.encode_target([prefix])[0])] == [tokenizer.pieces()[i] for i in tokenizer.encode_target([prefix])[0]]
    assert len(greedy) == len(records) == 4 and greedy[1] == records[1]["translation"] == "Nur das"


def test_a_prefix_file_of_another_length_is_one_clear_error(random_model, nmt_main, tmp_path):
    from test_finetune import one_error_line

    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("Das\nDie\n", encoding="utf-8")
    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\nthree\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    common = ("translate", "-m", str(random_model), "--max-len-b", "4", "--prefix-file", str(prefixes))
    counted = nmt_main(*common, "-i", str(source), "-o", str(out), check=False)
    assert counted.returncode == 2 and not out.exists()
    one_error_line(counted, "prefix-file-line-count")
    assert counted.stderr.strip().splitlines() == [f"nmt: error: --prefix-file {prefixes} has 2 line(s) but --input {source} has 3 "
                                                   "(give one prefix per input line, an empty line for none)"]
    # Streamed from stdin: found when one of the two ends, before the window holding that line is translated.
    longer = nmt_main(*common, "--window", "2", input="one\ntwo\nthree\n", check=False)
    assert longer.returncode == 2 and longer.stdout.count("\n") == 2
    one_error_line(longer, "prefix-file-runs-out")
    assert longer.stderr.strip().splitlines()[-1].startswith("nmt: error: the prefixes end after line 2 but the input goes on (")
    shorter = nmt_main(*common, "-o", str(out), input="one\n", check=False)
    assert shorter.returncode == 2 and not out.exists() and "the input ends after line 1 but the prefixes go on" in shorter.stderr
    missing = nmt_main("translate", "-m", str(random_model), "--prefix-file", str(tmp_path / "nope.txt"), input="one\n", check=False)
    assert missing.returncode != 0 and missing.stderr.strip().splitlines() == [
        f"nmt: error: {tmp_path / 'nope.txt'} does not exist (check the path given to --prefix-file)"]


def test_ctranslate2_engine_honours_prefixes_like_the_native_one(random_model, nmt_main, tmp_path):
    pytest.importorskip("ctranslate2")
    nmt_main("export", "ctranslate2", str(random_model), str(tmp_path / "ct2"))
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("Das kleine\nNur das\n\nDie Katze\n", encoding="utf-8")
    flags = ("--beam", "1", "--max-len-a", "0", "--max-len-b", "8", "--prefix-file", str(prefixes))
    text = "\n".join(LINES) + "\n"
    native = nmt_main("translate", "-m", str(random_model), *flags, input=text).stdout
    ct2 = nmt_main("translate", "--engine", "ctranslate2", "-m", str(tmp_path / "ct2"), *flags, input=text).stdout
    assert ct2 == native and native.splitlines()[3].startswith("Die Katze")
    wide = nmt_main("translate", "--engine", "ctranslate2", "-m", str(tmp_path / "ct2"), *flags, "--beam", "5", "--length-penalty", "power",
                    input=text).stdout.splitlines()  # CTranslate2 issue 277, fixed there since: beam >= 5 goes on past the prefix
    assert wide[0].startswith("Das kleine") and wide[3].startswith("Die Katze") and len(wide[3]) > len("Die Katze")


# --- POST /nmt/translate ---------------------------------------------------------------------------


def test_nmt_request_reads_prefix_as_a_list_or_one_string_and_refuses_a_wrong_one():
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.serve.requests import ApiError, Limits, nmt_request

    def ask(**fields):
        return nmt_request(fields, SearchSettings(), Limits())

    assert ask(lines=["a", "b"], prefix=["Das", ""]).prefixes == ["Das", ""]
    assert ask(lines=["a"], prefix="Das").prefixes == ["Das"]
    assert ask(lines=["a"]).prefixes is None
    for fields, message in ((dict(lines=["a", "b"], prefix=["Das"]), "prefix has 1 item(s) but lines has 2"),
                            (dict(lines=["a", "b"], prefix="Das"), "prefix must be a list of strings"),
                            (dict(lines=["a"], prefix=[3]), "prefix must be a list of strings"),
                            (dict(lines=["a"], prefix=["Das\nDie"]), "prefix 1 holds a line break")):
        with pytest.raises(ApiError, match=re.escape(message)) as e:
            ask(**fields)
        assert e.value.status == 400
    with pytest.raises(ApiError) as e:
        nmt_request(dict(lines=["a"], prefix=["x" * 30]), SearchSettings(), Limits(chars=20))
    assert e.value.status == 413  # prefixes count toward the request's text limit


def _post_all(app, path: str, bodies: list[dict]) -> list[tuple[int, dict]]:
    """Each body POSTed in turn through the ASGI app in this process, inside its lifespan (the batcher runs)."""

    async def post(body: dict) -> tuple[int, dict]:
        data = json.dumps(body).encode()
        answer: dict = {"status": None, "body": b""}
        done = asyncio.Event()
        read = []

        async def receive():
            if not read:
                read.append(True)
                return {"type": "http.request", "body": data, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body":
                answer["body"] += message.get("body", b"")
                if not message.get("more_body"):
                    done.set()

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "path": path,
                 "raw_path": path.encode(), "query_string": b"", "root_path": "", "scheme": "http",
                 "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80)}
        await app(scope, receive, send)
        return answer["status"], json.loads(answer["body"])

    async def run() -> list[tuple[int, dict]]:
        events: asyncio.Queue = asyncio.Queue()
        started = asyncio.Event()

        async def lifespan_send(message):
            if message["type"] == "lifespan.startup.complete":
                started.set()

        await events.put({"type": "lifespan.startup"})
        lifespan = asyncio.ensure_future(app({"type": "lifespan", "asgi": {"version": "3.0"}}, events.get, lifespan_send))
        await started.wait()
        answers = [await post(body) for body in bodies]
        await events.put({"type": "lifespan.shutdown"})
        await lifespan
        return answers

    return asyncio.run(run())


def test_nmt_translate_answers_with_translations_that_start_with_their_prefixes(random_model):
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator
    from nmtcli.serve.app import ServeConfig, create_app
    from nmtcli.serve.models import ServedModel

    settings = SearchSettings(max_len_a=0.0, max_len_b=8)
    app = create_app([ServedModel("tiny", "en", "de", Translator(random_model, settings=settings))], ServeConfig(search=settings))
    (status, answer), (_, plain), (bad, error) = _post_all(app, "/nmt/translate", [
        {"lines": ["the cat sleeps", "a new book"], "prefix": ["Die Katze", ""], "beam": 5},
        {"lines": ["a new book"], "beam": 5},
        {"lines": ["a", "b"], "prefix": ["Die"]}])
    assert status == 200
    first, second = answer["translations"]
    assert first["translation"].startswith("Die Katze") and len(first["tokens"]) > 2
    assert plain["translations"][0]["translation"] == second["translation"]  # no prefix: as without the field
    assert bad == 400 and error["error"].startswith("Invalid request: prefix has 1 item(s) but lines has 2")


def test_an_imported_marian_model_reads_prefixes_with_its_target_vocabulary(marian_dir, nmt_main, tmp_path):
    from nmtcli.inference.settings import SearchSettings
    from nmtcli.inference.translator import Translator

    nmt_main("import", "marian", str(marian_dir), "-o", str(tmp_path / "model"))
    warnings: list[str] = []
    translator = Translator(tmp_path / "model", settings=SearchSettings(beam=4, max_len_a=0.0, max_len_b=8), warn=warnings.append)
    target = translator.tokenizer.target
    prefix = "".join(target.id_to_piece(i) for i in range(3, target.get_piece_size())
                     if target.id_to_piece(i).startswith("\u2581") and target.id_to_piece(i)[1:].isalpha())[:12].replace("\u2581", " ").strip()
    (hyps,) = translator.translate_nbest(["The house."], [prefix])
    ids = translator.tokenizer.encode_target([prefix])[0]
    assert hyps[0].tokens[: len(ids)] == [translator.pieces[i] for i in ids] and hyps[0].text.startswith(prefix)
    assert not warnings
    list(translator.translate_nbest(["The house."], ["\u2603 Schnee"]))  # a snowman: not in the tiny vocabulary
    assert warnings == ["line 1: the prefix holds text the model's vocabulary lacks: the translation holds <unk> there "
                        "(its text does not start with the prefix's)"]
