"""`nmt serve`'s files (nmtcli/serve/files.py): LibreTranslate's POST /translate_file and GET /download_file/NAME, spoken
to over HTTP with httpx's multipart uploads, as LibreTranslate's API docs send them, by the real server on a loopback port."""

from __future__ import annotations

import time

import pytest
from test_formats import PO, SRT, XLIFF_12, translated
from test_formats_office import docx_package
from test_serve import Server

pytest.importorskip("starlette")
httpx = pytest.importorskip("httpx")

KEEP = 1.0  # seconds a download is kept: the test of its deletion waits that long


@pytest.fixture(scope="module")
def file_server(trained_model, tmp_path_factory):
    s = Server(["-m", str(trained_model), "--threads", "1", "--max-file-bytes", "4000", "--max-file-chars", "1500",
                "--file-keep", str(KEEP)], tmp_path_factory.mktemp("serve-files"))
    yield s
    s.stop()


def upload(server: Server, name: str, data: bytes, **fields) -> httpx.Response:
    return httpx.post(f"http://127.0.0.1:{server.port}/translate_file", files={"file": (name, data)},
                      data={"source": "en", "target": "de", **fields}, timeout=60)


def test_a_file_is_translated_and_downloaded_in_libretranslates_shapes(file_server, trained_model):
    from nmtcli import Translator
    from nmtcli.documents.formats import translate_file

    polib = pytest.importorskip("polib")
    settings = httpx.get(f"http://127.0.0.1:{file_server.port}/frontend/settings").json()
    assert settings["filesTranslation"] is True and {".po", ".srt", ".xliff", ".md", ".txt", ".html", ".docx"} <= set(settings["supportedFilesFormat"])
    answer = upload(file_server, "my ui.po", PO.encode("utf-8"))
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert url.startswith(f"http://127.0.0.1:{file_server.port}/download_file/") and url.endswith(".my_ui.po")
    download = httpx.get(url)
    assert download.status_code == 200 and 'filename="my_ui.po"' in download.headers["content-disposition"]
    expected, _ = translate_file(Translator.load(trained_model, device="cpu"), PO.encode("utf-8"), "po",
                                 dict(beam=4, alpha=0.6, max_len_b=50))
    assert download.content == expected  # what `nmt translate -i my_ui.po` writes
    catalog = polib.pofile(download.text)
    assert all(translated(e.msgid, e.msgstr) for e in catalog if "fuzzy" in e.flags and not e.msgid_plural)
    srt = upload(file_server, "talk.srt", SRT.encode("utf-8"))
    assert srt.status_code == 200 and httpx.get(srt.json()["translatedFileUrl"]).text.count("-->") == 3
    word = upload(file_server, "report.docx", docx_package())
    assert word.status_code == 200 and httpx.get(word.json()["translatedFileUrl"]).content[:2] == b"PK"
    time.sleep(KEEP + 0.3)
    gone = httpx.get(url)
    assert gone.status_code == 404 and "was deleted" in gone.json()["error"]


@pytest.mark.parametrize("name, data, fields, status, message", [
    ("big.srt", SRT.encode() * 20, {}, 413, "Invalid request: the file (5,180 bytes) exceeds the size limit (4,000 bytes)"),
    ("long.txt", b"the small dog sees a red ball\n" * 60, {}, 413, "Invalid request: the file holds 1,740 characters of text, the limit is 1,500"),
    ("book.xlsx", b"PK\x03\x04", {}, 400, "Invalid request: file format not supported (.xlsx; this server translates .docx, .epub, .htm,"),
    ("broken.xlf", XLIFF_12[:200].encode(), {}, 400, "Invalid request: broken.xlf: the file is not well-formed XML"),
    ("talk.srt", SRT.encode(), {"target": "fr"}, 400, "fr is not supported (this server translates en->de; see GET /languages)"),
    ("", b"", {}, 400, "Invalid request: "),
])
def test_bad_files_are_refused_in_libretranslates_error_shape(file_server, name, data, fields, status, message):
    answer = upload(file_server, name, data, **fields)
    assert answer.status_code == status and answer.json()["error"].startswith(message), answer.text


@pytest.mark.parametrize("path", ["..%2F..%2Fetc%2Fpasswd", "%2e%2e", "0123456789abcdef0123456789abcdef.x.po", "a%00b.po",
                                  "notes.po"])
def test_a_download_name_cannot_reach_outside_the_download_dir(file_server, path):
    answer = httpx.get(f"http://127.0.0.1:{file_server.port}/download_file/{path}")
    assert answer.status_code in (400, 404) and "error" in answer.json()
    assert "root:" not in answer.text
