"""`nmt push`, `nmt pull`, `-m OWNER/NAME` and `nmt import marian OWNER/NAME` against a Hub on 127.0.0.1.

The real huggingface_hub client talks to tests/hub_server.py through $HF_ENDPOINT; each test has its
own $HF_HOME, so the Hub cache and the stored login start empty. Commands that talk to the Hub run in a
process of their own (`nmt_forked`: huggingface_hub reads $HF_* when it is imported); the local ones they
are compared with run in-process.
"""

from __future__ import annotations

import json
import socket

import pytest
from conftest import nmt_forked, nmt_in_process
from hub_server import FakeHub

TOKEN = "hf_test_alice"
FILES = ["config.json", "model.safetensors", "sentencepiece.model", "scores.json"]
SHORT = ["--max-len-b", "10"]  # a random model writes to the length limit: source length + 10 keeps it short


@pytest.fixture
def hub():
    with FakeHub({TOKEN: "alice"}) as server:
        yield server


@pytest.fixture
def env(hub, tmp_path):
    return {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path / "hf-home"), "HF_TOKEN": TOKEN,
            "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _error_line(result) -> str:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_push_then_pull_round_trips_a_model_byte_for_byte(random_model, hub, env, tmp_path):
    pushed = nmt_forked("push", str(random_model), "alice/tiny-en-de", "--message", "first model", env=env)
    assert pushed.stdout.strip().startswith(f"{hub.endpoint}/alice/tiny-en-de/commit/")
    pulled = tmp_path / "pulled"
    nmt_forked("pull", "alice/tiny-en-de", "-o", str(pulled), env=env)
    for name in FILES:
        assert (pulled / name).read_bytes() == (random_model / name).read_bytes(), name
        assert not (pulled / name).is_symlink()
    card = (pulled / "README.md").read_text()
    header = card.split("---\n")[1]
    for line in ('- "en"', '- "de"', 'license: "apache-2.0"', "- translation", "type: \"bleu\"", "value: 12.3",
                 'signature: "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"'):
        assert line in header, line
    assert "nmt translate -m alice/tiny-en-de" in card and "| en-de/test | BLEU | 12.3 |" in card
    # The client uploaded through preupload + commit, never LFS or Xet, and downloaded over plain HTTP.
    paths = [r.path for r in hub.requests]
    assert any(p.endswith("/preupload/main") for p in paths) and any(p.endswith("/commit/main") for p in paths)
    assert not [p for p in paths if "xet" in p.lower() or "lfs" in p.lower()]
    # The pulled dir is a model dir nmt can use, and translates like the original.
    lines = "the small dog sees a red ball\n\na king helps the old woman\n"
    assert nmt_in_process("translate", "-m", str(pulled), "--beam", "2", *SHORT, input=lines).stdout == \
        nmt_in_process("translate", "-m", str(random_model), "--beam", "2", *SHORT, input=lines).stdout


def test_pull_of_a_revision_pins_it(random_model, hub, env, tmp_path):
    import shutil

    nmt_forked("push", str(random_model), "alice/tiny-en-de", env=env)
    first = hub.repos["alice/tiny-en-de"].branches["main"]
    changed = tmp_path / "changed"
    shutil.copytree(random_model, changed)
    (changed / "scores.json").write_text(json.dumps({"en-de/test": {"BLEU": {"score": 30.0, "signature": "nrefs:1"}}}))
    nmt_forked("push", str(changed), "alice/tiny-en-de", "--revision", "v2", env=env)
    nmt_forked("push", str(changed), "alice/tiny-en-de", env=env)  # main moves on too
    assert hub.repos["alice/tiny-en-de"].branches["main"] != first

    for revision, expected in ((first, random_model), ("v2", changed), ("main", changed)):
        out = tmp_path / f"pull-{revision[:8]}"
        nmt_forked("pull", "alice/tiny-en-de", "--revision", revision, "-o", str(out), env=env)
        assert (out / "scores.json").read_bytes() == (expected / "scores.json").read_bytes(), revision
    result = nmt_forked("pull", "alice/tiny-en-de", "--revision", "no-such-branch", env=env, check=False)
    assert _error_line(result) == "nmt: error: alice/tiny-en-de has no revision 'no-such-branch' (pass an existing branch, tag or commit to --revision)"


def test_translate_resolves_a_hub_id_and_works_offline_from_the_cache(random_model, hub, env):
    nmt_forked("push", str(random_model), "alice/tiny-en-de", env=env)
    lines = "the small dog sees a red ball\na king helps the old woman\n"
    local = nmt_in_process("translate", "-m", str(random_model), "--beam", "1", *SHORT, input=lines).stdout
    online = nmt_forked("translate", "-m", "alice/tiny-en-de", "--beam", "1", *SHORT, input=lines, env=env)
    assert online.stdout == local and "from the Hub cache" in online.stderr
    info = json.loads(nmt_forked("info", "alice/tiny-en-de", "--json", env=env).stdout)
    assert info["scores"]["en-de/test"]["BLEU"]["score"] == 12.3

    hub.__exit__(None, None, None)  # the Hub is gone; the cache is all there is
    offline = {**env, "HF_HUB_OFFLINE": "1"}
    assert nmt_forked("translate", "-m", "alice/tiny-en-de", "--beam", "1", *SHORT, input=lines, env=offline).stdout == local
    result = nmt_forked("translate", "-m", "alice/never-pulled", input=lines, env=offline, check=False)
    assert _error_line(result) == ("nmt: error: alice/never-pulled is not in the Hub cache and HF_HUB_OFFLINE is set "
                                   "(unset HF_HUB_OFFLINE, or `nmt pull` it while online)")
    assert result.stdout == ""


def test_network_error_gives_a_clear_message(env, tmp_path):
    down = {**env, "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}"}
    result = nmt_forked("pull", "alice/tiny-en-de", env=down, check=False)
    assert _error_line(result).startswith("nmt: error: cannot reach http://127.0.0.1:")
    assert "check the network connection or $HF_ENDPOINT" in result.stderr
    result = nmt_forked("push", str(tmp_path), "alice/x", env=down, check=False)  # not a model dir: says so first
    assert "has no config.json" in _error_line(result)


def test_push_needs_a_valid_token(random_model, hub, env):
    no_token = {k: v for k, v in env.items() if k != "HF_TOKEN"}
    result = nmt_forked("push", str(random_model), "alice/tiny-en-de", env=no_token, check=False)
    assert _error_line(result) == "nmt: error: no Hugging Face token found (log in with `hf auth login` or set $HF_TOKEN)"
    result = nmt_forked("push", str(random_model), "alice/tiny-en-de", env={**env, "HF_TOKEN": "hf_wrong"}, check=False)
    assert _error_line(result).startswith("nmt: error: the Hub refused the token for alice/tiny-en-de (HTTP 401)")
    result = nmt_forked("push", str(random_model), "bob/tiny-en-de", env=env, check=False)  # alice cannot write to bob
    assert "(HTTP 403)" in _error_line(result)
    assert "alice/tiny-en-de" not in hub.repos and "bob/tiny-en-de" not in hub.repos


def test_private_repo_is_invisible_without_its_token(random_model, hub, env):
    nmt_forked("push", str(random_model), "alice/secret", "--private", env=env)
    assert hub.repos["alice/secret"].private
    anonymous = {k: v for k, v in env.items() if k != "HF_TOKEN"}
    result = nmt_forked("pull", "alice/secret", env=anonymous, check=False)
    assert _error_line(result).startswith("nmt: error: alice/secret was not found on http://127.0.0.1:")
    assert nmt_forked("pull", "alice/secret", env=env).stdout.strip()


def test_pull_refuses_a_repo_that_is_not_an_nmt_model(hub, env, tmp_path):
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token=TOKEN)
    api.create_repo("alice/bert")
    api.upload_file(path_or_fileobj=b'{"model_type": "bert"}', path_in_repo="config.json", repo_id="alice/bert")
    api.upload_file(path_or_fileobj=b"pickle", path_in_repo="pytorch_model.bin", repo_id="alice/bert")
    api.upload_file(path_or_fileobj=b"not really safetensors", path_in_repo="model.safetensors", repo_id="alice/bert")
    result = nmt_forked("pull", "alice/bert", env=env, check=False)
    assert _error_line(result) == ("nmt: error: alice/bert is not an nmt model repo (its config.json is not nmt's) "
                                   "(for a transformers model run `nmt import marian alice/bert` (OPUS-MT), `nmt import m2m100 alice/bert` "
                                   "or `nmt import nllb alice/bert` first)")
    # Nothing but the listed model files is ever downloaded: no pickle reaches the cache.
    assert not list((tmp_path / "hf-home").rglob("pytorch_model.bin"))


def test_import_nllb_from_a_hub_id_keeps_its_licence(m2m100_dirs, hub, env, tmp_path):
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint, token="hf_facebook")
    hub.tokens["hf_facebook"] = "facebook"
    api.create_repo("facebook/nllb-200-distilled-600M")
    api.upload_folder(folder_path=str(m2m100_dirs["nllb"]), repo_id="facebook/nllb-200-distilled-600M")
    result = nmt_forked("import", "nllb", "facebook/nllb-200-distilled-600M", "-o", str(tmp_path / "hub"), env=env)
    assert str(tmp_path / "hub") in result.stdout and "license cc-by-nc-4.0" in result.stderr
    nmt_in_process("import", "nllb", str(m2m100_dirs["nllb"]), "-o", str(tmp_path / "local"))
    assert (tmp_path / "hub" / "model.safetensors").read_bytes() == (tmp_path / "local" / "model.safetensors").read_bytes()
    values = json.loads((tmp_path / "hub" / "config.json").read_text())
    assert values["imported_from"] == {"kind": "nllb", "source": "facebook/nllb-200-distilled-600M",
                                       "revision": hub.repos["facebook/nllb-200-distilled-600M"].branches["main"]}
    assert values["license"] == "cc-by-nc-4.0"


def test_import_marian_from_a_hub_id(marian_dir, hub, env, tmp_path):
    from huggingface_hub import HfApi

    pytest.importorskip("transformers")
    api = HfApi(endpoint=hub.endpoint, token="hf_helsinki")
    hub.tokens["hf_helsinki"] = "Helsinki-NLP"
    api.create_repo("Helsinki-NLP/opus-mt-en-de")
    api.upload_folder(folder_path=str(marian_dir), repo_id="Helsinki-NLP/opus-mt-en-de")
    nmt_in_process("import", "marian", str(marian_dir), "-o", str(tmp_path / "local"))
    result = nmt_forked("import", "marian", "Helsinki-NLP/opus-mt-en-de", "-o", str(tmp_path / "hub"), env=env)
    assert str(tmp_path / "hub") in result.stdout
    from safetensors.torch import load_file

    hub_state, local_state = (load_file(str(tmp_path / d / "model.safetensors")) for d in ("hub", "local"))
    assert hub_state.keys() == local_state.keys() and all(hub_state[k].equal(local_state[k]) for k in hub_state)
    values = json.loads((tmp_path / "hub" / "config.json").read_text())
    assert values["imported_from"]["source"] == "Helsinki-NLP/opus-mt-en-de"
    assert values["imported_from"]["revision"] == hub.repos["Helsinki-NLP/opus-mt-en-de"].branches["main"]
    lines = "the small dog sees a red ball\n"
    assert nmt_in_process("translate", "-m", str(tmp_path / "hub"), input=lines).stdout == \
        nmt_in_process("translate", "-m", str(tmp_path / "local"), input=lines).stdout


def test_a_model_s_shortlist_is_pushed_and_pulled_with_it(random_model, prepared, hub, env, tmp_path):
    """A student's lexical shortlist is its speed on a CPU: the Hub copy has it, and `-m OWNER/NAME` searches with it."""
    import shutil

    from nmtcli.data.shards import Shard
    from nmtcli.data.vocabulary import read_vocabulary
    from nmtcli.inference.shortlist import learn
    from nmtcli.model.checkpoint import SHORTLIST_FILE

    model = tmp_path / "student"
    shutil.copytree(random_model, model)
    source, target = Shard(prepared / "train.en", 1000), Shard(prepared / "train.de", 1000)
    shortlist = learn(((source[i], target[i]) for i in range(len(source))), 1000, per_piece=6, frequent=20)
    shortlist.info["vocabulary"] = read_vocabulary(model).files
    shortlist.save(model)
    nmt_forked("push", str(model), "alice/student", env=env)
    pulled = tmp_path / "pulled"
    nmt_forked("pull", "alice/student", "-o", str(pulled), env=env)
    assert (pulled / SHORTLIST_FILE).read_bytes() == (model / SHORTLIST_FILE).read_bytes()
    info = json.loads(nmt_forked("info", "alice/student", "--json", env=env).stdout)
    assert info["shortlist"]["per_piece"] == 6
