"""Documents in, documents out (nmtcli/documents/formats/, `nmt translate -i FILE`): each format's document, built
here with its elements, translated by the session's trained model; the result read again by the format's own parser,
its non-text parts byte for byte, every text translated, every inline element once and well nested."""

from __future__ import annotations

import re

import pytest
from corpus import ADJECTIVES, DETERMINERS, NOUNS, VERBS

from nmtcli.documents.formats import core
from nmtcli.documents.formats.core import Tag

GERMAN = set(NOUNS.values()) | set(ADJECTIVES.values()) | set(VERBS.values()) | set(DETERMINERS.values())
ENGLISH = (set(NOUNS) | set(ADJECTIVES) | set(VERBS)) - GERMAN


def translated(source: str, target: str) -> bool:
    """The target is the model's German for the source: not empty, German words, none of the English content words."""
    words = set(re.findall(r"[a-z]+", target.lower()))
    return bool(words & GERMAN) and not (words & ENGLISH) and target != source


def well_nested(tags: list[str]) -> bool:
    """HTML-like tags (`<i>`, `</i>`, `<font ...>`) open and close in order."""
    stack = []
    for tag in tags:
        name = re.match(r"</?([\w.]+)", tag)[1].split(".")[0]
        if tag.startswith("</"):
            if not stack or stack.pop() != name:
                return False
        else:
            stack.append(name)
    return not stack


@pytest.fixture(scope="module")
def translator(trained_model):
    from nmtcli import Translator

    return Translator.load(trained_model, device="cpu")


def translate(translator, data: str, format: str) -> str:
    from nmtcli.documents.formats import translate_file

    out, _ = translate_file(translator, data.encode("utf-8"), format)
    return out.decode("utf-8")


# --- the core ----------------------------------------------------------------------------------------


def test_a_translation_is_shared_over_places_by_length_in_whole_words_with_elements_reopened():
    b, i = Tag("open", "<b>", 0), Tag("close", "</b>", 0)
    tokens = ["one two ", b, "three four five", i, " six"]
    places = core.split_by_length(tokens, [2, 1])
    assert [core.text_of(p) for p in places] == ["one two three four", "five six"]
    assert places == [["one", " ", "two", " ", b, "three", " ", "four", i], [b, "five", i, " ", "six"]]
    assert core.split_by_length(["a"], [1, 1, 1]) == [["a"], [], []]
    assert [core.text_of(p) for p in core.split_by_length(["a b c"], [1, 1, 1])] == ["a", "b", "c"]


def test_inline_elements_go_through_translate_html_and_come_back_with_their_own_markup(translator):
    tokens = ["the ", Tag("open", '<g id="1">', 0), "small dog", Tag("close", "</g>", 0), " sees ", Tag("void", "<x/>", 1),
              "a red ball"]
    document = core.Document([core.Block(tokens), "\n", core.Block(["every child likes the old tree"])])
    core.translate_document(translator, document)
    first, second = document.blocks
    assert [t for t in first.translation if isinstance(t, Tag)] in (
        [tokens[1], tokens[3], tokens[5]], [tokens[5], tokens[1], tokens[3]])
    assert translated("the small dog sees a red ball", core.text_of(first.translation))
    assert "hund" in core.text_of(first.translation[first.translation.index(tokens[1]):first.translation.index(tokens[3])])
    assert translated("every child likes the old tree", document.render().split("\n")[1])


@pytest.mark.parametrize("format, name", [("srt", "SRT"), ("vtt", "VTT"), ("po", "PO"), ("xliff", "XLIFF_12"), ("xliff", "XLIFF_20"),
                                          ("md", "MD"), ("txt", "MD")])
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_a_document_read_and_written_untranslated_is_its_own_bytes(format, name, newline):
    from nmtcli.documents.formats import read, written

    for data in (globals()[name].replace("\n", newline), globals()[name].rstrip("\n")):
        document = read(data.encode("utf-8"), format)
        assert written(document) == data.encode("utf-8") and document.blocks


def test_a_long_document_reports_its_progress_a_chunk_of_blocks_at_a_time(translator):
    blocks = [core.Block([f"the dog sees {n % 7 + 1} cats"]) for n in range(core.CHUNK + 6)] + [core.Block(["..."])]
    calls = []
    core.translate_document(translator, core.Document(blocks), progress=lambda done, total: calls.append((done, total)))
    total = core.CHUNK + 6  # the block with no letter is not translated, nor counted
    assert calls == [(0, total), (core.CHUNK, total), (total, total)] and blocks[-1].translation is None


# --- each format --------------------------------------------------------------------------------------

SRT = """1
00:00:01,000 --> 00:00:03,000
<i>the small dog sees</i>
a red ball.

2
00:00:03,500 --> 00:00:05,000 X1:10 X2:100
every child likes the <font color="#ff0000">old tree</font> and

3
00:00:05,000 --> 00:00:07,000
{\\an8}this young woman finds the green book.

"""


def cues(text: str) -> list[list[str]]:
    return [block.splitlines() for block in re.split(r"\r?\n\r?\n", text.strip())]


def test_srt_keeps_numbers_timings_and_styling_and_translates_every_cue(translator):
    out = translate(translator, SRT, "srt")
    source, target = cues(SRT), cues(out)
    assert [c[:2] for c in target] == [c[:2] for c in source] and out.endswith("\n\n")
    for before, after in zip(source, target):
        text = " ".join(after[2:])
        assert translated(" ".join(before[2:]), text), (before, after)
        assert well_nested(re.findall(r"</?[a-z][^>]*>", text))
        assert len(after[2:]) <= max(2, len(before[2:])) and all(len(line) <= 60 for line in after[2:])
    assert target[0][2].startswith("<i>") and "</i>" in "".join(target[0][2:])
    assert target[2][2].startswith("{\\an8}")
    # The colour stays on the translation of "old tree": one element, or, where the model's word order puts one of
    # the two words into the next cue, closed at the end of cue 2 and opened again after cue 3's {\an8}.
    fonts = re.findall(r'<font color="#ff0000">(.*?)</font>', out)
    assert sorted(" ".join(fonts).split()) == ["alt", "baum"] and len(fonts) in (1, 2), out
    if len(fonts) == 2:
        assert target[1][-1].endswith("</font>") and target[2][2].startswith('{\\an8}<font color="#ff0000">'), out


def test_a_sentence_over_two_cues_is_translated_once_and_shared_over_both(translator):
    two = "1\n00:00:01,000 --> 00:00:02,000\nthe small dog sees\n\n2\n00:00:02,000 --> 00:00:04,000\na red ball\n"
    out = cues(translate(translator, two, "srt"))
    one = translate(translator, "the small dog sees a red ball\n", "txt").strip()
    assert " ".join([out[0][2], out[1][2]]) == one


VTT = """WEBVTT - a test

NOTE this note
stays as it is

STYLE
::cue { color: yellow }

intro
00:01.000 --> 00:03.000 line:0 position:10%
<v Bob>the small dog &amp; the red ball
<c.loud>every child likes the old tree.</c>

00:03.500 --> 00:05.000
this young woman finds the green book.
"""


def test_vtt_keeps_its_header_notes_styles_identifiers_and_settings(translator):
    out = translate(translator, VTT, "vtt")
    source, target = cues(VTT), cues(out)
    assert target[:3] == source[:3] and target[3][:2] == source[3][:2] and target[4][0] == source[4][0]
    first = target[3][2:]
    assert len(first) == 2 and first[0].startswith("<v Bob>") and out.count("<c.loud>") == out.count("</c>") == 1
    assert "&amp;" not in out or " &amp; " in out  # text written escaped, as WebVTT reads it
    assert translated("the small dog sees", " ".join(first)) and translated("this young woman", target[4][1])


PO = r'''# A catalog.
msgid ""
msgstr ""
"Project-Id-Version: test 1.0\n"
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

#: src/main.c:10
#, c-format
msgid "the small dog sees %s red ball."
msgstr ""

#. a comment for translators
msgctxt "menu"
msgid ""
"every child likes the old tree. this young woman finds the green book and the "
"fast horse follows a dark ship\n"
msgstr ""

msgid "the old man sees {name}"
msgid_plural "the old man sees %(count)d red balls"
msgstr[0] ""
msgstr[1] ""

msgid "the king reads a letter"
msgstr "der koenig ein brief liest"

#~ msgid "the obsolete tree"
#~ msgstr ""
'''


def test_po_fills_each_empty_msgstr_marks_it_fuzzy_and_keeps_everything_else(translator):
    polib = pytest.importorskip("polib")
    out = translate(translator, PO, "po")
    catalog = polib.pofile(out)  # polib reads it back
    assert out.startswith(PO.split("\n\n")[0] + "\n\n") and "#~ msgid \"the obsolete tree\"\n#~ msgstr \"\"\n" in out
    entries = {e.msgid: e for e in catalog}
    first = entries["the small dog sees %s red ball."]
    assert first.flags == ["c-format", "fuzzy"] and translated(first.msgid, first.msgstr) and first.msgstr.count("%s") == 1
    second = next(e for e in catalog if e.msgctxt == "menu")
    assert second.flags == ["fuzzy"] and second.msgstr.endswith("\n") and translated(second.msgid, second.msgstr)
    plural = entries["the old man sees {name}"]
    assert plural.msgstr_plural[0].count("{name}") == 1 and plural.msgstr_plural[1].count("%(count)d") == 1
    assert all(translated(plural.msgid, s) for s in plural.msgstr_plural.values())
    kept = entries["the king reads a letter"]
    assert kept.msgstr == "der koenig ein brief liest" and kept.flags == []
    # every line that is not a msgstr of a translated entry or a flag is the source's, in order
    def skeleton(text):
        return [line for line in text.splitlines() if not line.startswith(("msgstr", '"', "#,"))]
    assert skeleton(out) == skeleton(PO)


XLIFF_12 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="de" datatype="plaintext" original="ui.txt">
    <body>
      <trans-unit id="1">
        <source>the <g id="1">small dog</g> sees <x id="2"/> a red ball &amp; the old tree.</source>
      </trans-unit>
      <trans-unit id="2">
        <source>every child likes the <ph id="3">&lt;br/&gt;</ph> old tree</source>
        <target/>
      </trans-unit>
      <trans-unit id="3" translate="no"><source>the king reads</source></trans-unit>
      <trans-unit id="4"><source>the cat</source><target state="final">die katze</target></trans-unit>
      <!-- a comment -->
    </body>
  </file>
</xliff>
"""

XLIFF_20 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
 <file id="f1">
  <unit id="u1">
   <segment id="s1">
    <source>the <pc id="1" dataRefStart="d1">small <pc id="2">dog</pc></pc> sees <ph id="3"/> a red ball.</source>
   </segment>
   <ignorable><source> </source></ignorable>
   <segment id="s2" state="initial">
    <source>every child likes the old tree</source>
    <target></target>
   </segment>
  </unit>
 </file>
</xliff>
"""


@pytest.mark.parametrize("version, source", [("1.2", XLIFF_12), ("2.0", XLIFF_20)])
def test_xliff_sources_get_targets_with_their_inline_codes_and_states(translator, version, source):
    from lxml import etree

    out = translate(translator, source, "xliff")
    root = etree.fromstring(out.encode("utf-8"))  # a second XML parser reads it
    ns = {"x": root.nsmap[None]}
    # everything but the targets written (and the state XLIFF 2 keeps on the segment) is the source's bytes
    written = r'\s*<target(?: state="needs-review-translation" state-qualifier="mt-suggestion")?>.*?</target>| state="translated"'
    assert re.sub(written, "", out) == re.sub(r'\s*<target/>|\s*<target></target>| state="initial"', "", source)
    units = root.findall(".//x:trans-unit" if version == "1.2" else ".//x:segment", ns)
    done = [u for u in units if u.find("x:target", ns) is not None and u.findtext("x:source", namespaces=ns) != "the cat"]
    assert len(done) == 2 and "the king reads" not in out.split("<target")[-1]
    for unit in done:
        source_el, target_el = unit.find("x:source", ns), unit.find("x:target", ns)
        text = "".join(target_el.itertext())
        assert translated("".join(source_el.itertext()), text)
        source_codes = sorted((e.tag, e.get("id")) for e in source_el.iter() if e is not source_el)
        target_codes = sorted((e.tag, e.get("id")) for e in target_el.iter() if e is not target_el)
        assert source_codes == target_codes  # each inline element once, nested as XML nests them
        for inner in source_el.iter():
            if inner is not source_el and inner.get("id") == "2" and version == "2.0":  # <pc 2> stays inside <pc 1>
                assert target_el.find(".//x:pc/x:pc", ns) is not None
        state = target_el.get("state") if version == "1.2" else unit.get("state")
        assert state == ("needs-review-translation" if version == "1.2" else "translated")
    assert version == "2.0" or '<target state="final">die katze</target>' in out


MD = """---
title: the old tree
---
# The *old* tree

Every child likes the [old tree](http://example.org/a_b "A title") and `the code`.
The small dog **sees** a red ball.

> this young woman finds
> the green book.

- the king reads a letter <span class="x">here</span>
- the cat sees [the dog][ref] and [ref]

```python
print("the small dog sees a red ball")
```

    the indented code stays

<div>the raw html stays</div>

| the small dog | the red ball |
|---|---|
| the old tree | the green book |

[ref]: http://example.com/ref
"""


def test_markdown_keeps_code_link_targets_html_and_block_markers(translator):
    from markdown_it import MarkdownIt

    out = translate(translator, MD, "md")
    for kept in ("---\ntitle: the old tree\n---\n", "](http://example.org/a_b \"A title\")", "`the code`",
                 '```python\nprint("the small dog sees a red ball")\n```\n', "    the indented code stays\n",
                 "<div>the raw html stays</div>\n", "[ref]: http://example.com/ref\n", '<span class="x">', "</span>",
                 "][ref]", "[ref]\n", "|---|---|\n"):
        assert out.count(kept) == 1, kept
    lines = out.splitlines()
    assert lines[3].startswith("# ") and lines[8].startswith("> ") and lines[9].startswith("> ") and lines[11].startswith("- ")
    assert out.count("**") == 2 and out.count("*") == MD.count("*") == 6
    parser = MarkdownIt("commonmark").enable("table")
    shape = [t.type for t in parser.parse(out)]
    assert shape == [t.type for t in parser.parse(MD)]  # the same blocks
    texts = [t.content for t in parser.parse(out) if t.type == "inline"][1:]  # after the front matter's
    sources = [t.content for t in parser.parse(MD) if t.type == "inline"][1:]
    for source, text in zip(sources, texts):
        assert translated(source, re.sub(r"`[^`]*`|\]\([^)]*\)|<[^>]*>|\[ref\]", "", text)), (source, text)


def test_txt_translates_each_line_as_paragraphs_and_keeps_the_layout(translator):
    source = "\ufeffthe small dog sees a red ball. every child likes the old tree.\r\n\r\n  the king reads a letter  \n"
    out = translate(translator, source, "txt")
    lines = out.split("\n")
    assert out.startswith("\ufeff") and lines[1] == "\r" and lines[0].endswith("\r") and out.endswith("  \n")
    assert lines[2].startswith("  ") and translated("the king", lines[2])
    assert translated(source, lines[0]) and len(lines[0].split()) >= 8


# --- nmt translate -i FILE ----------------------------------------------------------------------------


def test_nmt_translate_picks_the_format_by_its_extension_and_replaces_the_output_whole(translator, nmt_main, trained_model, tmp_path):
    (tmp_path / "talk.srt").write_text(SRT, encoding="utf-8")
    (tmp_path / "out.srt").write_text("an older translation\n")
    result = nmt_main("translate", "-m", str(trained_model), "-i", str(tmp_path / "talk.srt"), "-o", str(tmp_path / "out.srt"))
    assert (tmp_path / "out.srt").read_text(encoding="utf-8") == translate(translator, SRT, "srt")
    assert "translated 2 block(s) of talk.srt (srt)" in result.stderr and (tmp_path / "talk.srt").read_text() == SRT
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left
    forced = nmt_main("translate", "-m", str(trained_model), "--format", "po", "-i", str(tmp_path / "talk.srt"), check=False)
    assert forced.returncode == 2 and forced.stderr.startswith("nmt: error: the file is not a gettext catalog")


ENTITY = """<?xml version="1.0"?>
<!DOCTYPE xliff [<!ENTITY secret SYSTEM "file://{path}">]>
<xliff version="1.2"><file><body><trans-unit id="1"><source>&secret;</source></trans-unit></body></file></xliff>
"""
LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE xliff [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;">]>
<xliff version="1.2"><file><body><trans-unit id="1"><source>&c;</source></trans-unit></body></file></xliff>
"""


@pytest.mark.parametrize("name, content, message", [
    ("broken.xlf", XLIFF_12[:300], "the file is not well-formed XML: "),
    ("catalog.srt", PO, "the file is not SubRip: no cue has a timing line"),
    ("notes.po", SRT, "the file is not a gettext catalog: '1' is neither a comment, a keyword nor a string"),
    ("external.xlf", ENTITY, "the XML file declares or refers to an entity: refused, entities are never resolved"),
    ("laughs.xliff", LAUGHS, "the XML file declares or refers to an entity"),
    ("binary.md", b"PK\x03\x04\x14\x00\x06\x00\x08\x00\x00\x00!\x00\xff\xfe", "the Markdown file is not UTF-8 text"),
    ("report.docx", b"PK\x03\x04 a zip", "the file is not a Word document: it is not a zip package"),
    ("slides.pptx", b"PK\x03\x04 a zip", "the file is not a PowerPoint presentation: it is not a zip package"),
    ("book.xlsx", b"PK\x03\x04 a zip", "book.xlsx: nmt does not translate .xlsx files"),
])
def test_bad_documents_are_one_error_line_exit_2_and_leave_every_file_as_it_was(nmt_main, random_model, tmp_path, name, content, message):
    (tmp_path / "secret.txt").write_text("TOPSECRET\n")
    if isinstance(content, str):
        content = content.replace("{path}", str(tmp_path / "secret.txt")).encode("utf-8")
    source, output = tmp_path / name, tmp_path / f"out{source_suffix(name)}"
    source.write_bytes(content)
    output.write_text("the previous translation\n")
    result = nmt_main("translate", "-m", str(random_model), "-i", str(source), "-o", str(output), check=False)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"nmt: error: {message}"), result.stderr
    assert source.read_bytes() == content and output.read_text() == "the previous translation\n"
    assert "TOPSECRET" not in result.stderr + result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, output.name, "secret.txt"])


def source_suffix(name: str) -> str:
    return name[name.rindex("."):]
