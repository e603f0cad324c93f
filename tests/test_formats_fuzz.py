"""Damaged documents of every format nmt reads, made by Hypothesis from valid ones, through the real readers
(nmtcli/documents/formats/: `read`, then `written` untranslated): nothing but an NmtError escapes, each read stays
within a time and a memory bound, and a document that reads is written back as it was (its bytes; a package's
entries). No model is loaded: reading needs none.

The mutations: bytes flipped, inserted (random, or fragments each format gives meaning to: `<`, `&#0;`, `]]>`, a
timing line, a `msgid`), deleted, cut off, a stretch repeated (deeper nesting, longer runs); for a zip package also
one entry mutated so and the package zipped again, so that the XML parsers inside get the damage and not only zip's
CRC check. The suite runs 20 examples a format, derandomized (the same ones every run: ~6 s in all);
`NMT_FUZZ_EXAMPLES=N pytest -m slow tests/test_formats_fuzz.py` runs N random ones a format (the slow test, skipped
without it: 2,500 a format took 9 minutes on 2 cores; such a run found a cue's stray CR written back as LF).
"""

from __future__ import annotations

import io
import os
import time
import tracemalloc
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_formats import MD, PO, SRT, VTT, XLIFF_12, XLIFF_20
from test_formats_office import docx_package, epub_package, odf_package, pptx_package

from nmtcli.documents.formats import read, written
from nmtcli.documents.formats.limits import ReadLimits
from nmtcli.errors import NmtError

HTML = """<!DOCTYPE html>
<html><head><title>The old tree</title><style>p { margin: 0 }</style></head>
<body><h1>The old tree</h1><p>the <b>small dog</b> sees a <a href="x.html">red ball</a>.<br>every child likes &amp; the old tree.</p>
<ul><li>this young woman<li>finds <code>the_code()</code> the green book</ul><!-- a comment --></body></html>
"""
TXT = "the small dog sees a red ball.\n\n  every child likes the old tree.  \r\nthis young woman finds the green book\n"
SEEDS = {"txt": TXT.encode(), "srt": SRT.encode(), "vtt": VTT.encode(), "po": PO.encode(), "xliff": XLIFF_12.encode(),
         "xliff-2": XLIFF_20.encode(), "md": MD.encode(), "html": HTML.encode(), "docx": docx_package(), "pptx": pptx_package(),
         "odt": odf_package("odt"), "odp": odf_package("odp"), "epub": epub_package()}
PACKAGES = {"docx", "pptx", "odt", "odp", "epub"}
# Small limits, so that a mutation that multiplies what is read meets one in a few milliseconds.
LIMITS = ReadLimits(unpacked=20_000_000, part_bytes=5_000_000, chars=200_000, elements=50_000, depth=64)
SECONDS, MEGABYTES = 5.0, 64  # what one read and write may take (a document here is a few KB)
FRAGMENTS = [b"<", b">", b"/>", b"</", b"&", b"&amp;", b"&#0;", b"&#x110000;", b"&lol;", b"<![CDATA[", b"]]>", b"<!--", b"-->",
             b"<?x ?>", b"<!DOCTYPE x [<!ENTITY a 'b'>]>", b"\x00", b"\xff", b"\xc3", b"\xef\xbb\xbf", b"\r", b"\n\n", b"\t",
             b"<w:p>", b"</w:p>", b"<w:r><w:t>", b"</w:t></w:r>", b"<w:hyperlink>", b"<a:r><a:t>", b"<text:p>", b"<text:span>",
             b'<g id="1">', b"</g>", b"<x/>", b'translate="no"', b"<target>", b"<source>", b"</source>", b"<segment>",
             b'msgid "', b'msgstr ""', b'msgid_plural "a"', b"#, fuzzy", b'"\\', b"\\x", b"\\xD800", b"\\xFFFFFFFF", b"\\777",
             b"00:00:01,000 --> 00:00:02,000", b"WEBVTT",
             b"NOTE", b"<i>", b"</i>", b"{\\an8}", b"`", b"**", b"_", b"[", b"](", b"![", b"---", b"> ", b"<b>", b"<br>", b"<script>",
             b"<pre>", b"\xe2\x80\xa8", b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06"]


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """`data` with one to four mutations."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        kind = draw(st.sampled_from(["flip", "insert", "fragment", "delete", "cut", "repeat"]))
        if kind == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "fragment":
            data[at:at] = draw(st.sampled_from(FRAGMENTS)) * draw(st.integers(1, 3))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 64))]
        elif kind == "cut":
            del data[at:]
        elif kind == "repeat":  # a stretch many times over: deeper nesting, longer runs, more entries
            stretch = bytes(data[at:at + draw(st.integers(1, 200))])
            data[at:at] = stretch * draw(st.integers(1, 300))
    return bytes(data)


@st.composite
def repacked(draw, package: bytes) -> bytes:
    """The package with one entry mutated, zipped again as it was (each entry's name and compression)."""
    source = zipfile.ZipFile(io.BytesIO(package))
    chosen = draw(st.sampled_from(source.infolist()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for info in source.infolist():
            data = source.read(info)
            z.writestr(info, draw(mutated(data)) if info is chosen else data, compress_type=info.compress_type)
    return out.getvalue()


def damaged(name: str):
    seed = SEEDS[name]
    return st.one_of(mutated(seed), repacked(seed)) if name in PACKAGES else mutated(seed)


def check(data: bytes, format: str) -> None:
    """Read and written back untranslated within SECONDS and MEGABYTES: an NmtError, or the document as it was."""
    tracemalloc.reset_peak()
    held, started = tracemalloc.get_traced_memory()[0], time.perf_counter()  # what Hypothesis and the tests before hold
    try:
        document = read(data, format, LIMITS)
    except NmtError:
        document = None
    if document is not None:
        out = written(document)
        if format in ("docx", "pptx", "odt", "odp", "epub"):
            before, after = zipfile.ZipFile(io.BytesIO(data)), zipfile.ZipFile(io.BytesIO(out))
            assert after.namelist() == before.namelist()
            assert all(after.read(n) == before.read(n) for n in before.namelist())
        else:
            assert out == data
    assert time.perf_counter() - started < SECONDS
    assert tracemalloc.get_traced_memory()[1] - held < MEGABYTES * 2**20


@pytest.fixture(scope="module", autouse=True)
def traced():
    tracemalloc.start()
    yield
    tracemalloc.stop()


def test_every_seed_reads_and_is_written_back_as_it_was():
    for name, data in SEEDS.items():
        check(data, name.split("-")[0])
        assert read(data, name.split("-")[0]).blocks, name


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_a_damaged_document_is_one_nmt_error_or_read_and_written_as_it_was(name):
    @settings(max_examples=20, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(damaged(name))
    def run(data):
        check(data, name.split("-")[0])

    run()


@pytest.mark.slow
@pytest.mark.skipif("NMT_FUZZ_EXAMPLES" not in os.environ, reason="a long fuzz run: NMT_FUZZ_EXAMPLES=N runs N examples a format")
@pytest.mark.parametrize("name", sorted(SEEDS))
def test_many_random_damaged_documents(name):
    @settings(max_examples=int(os.environ.get("NMT_FUZZ_EXAMPLES", "0")), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(damaged(name))
    def run(data):
        check(data, name.split("-")[0])

    run()
