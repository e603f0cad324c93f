"""Office documents and books in, the same out (nmtcli/documents/formats/: docx.py, pptx.py, runs.py, odf.py, epub.py,
package.py): each built here (by hand, or with python-pptx), translated by the session's trained model, read again by
the format's own library (python-docx, python-pptx) or an XML parser (lxml), every part without text byte for byte,
every paragraph translated, every run, link, field and break once and where a run may be."""

from __future__ import annotations

import io
import re
import sys
import zipfile
from pathlib import Path

import pytest
from test_formats import translated

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))  # documents.py: its .docx and rendering


@pytest.fixture(scope="module")
def translator(trained_model):
    from nmtcli import Translator

    return Translator.load(trained_model, device="cpu")


def translated_package(translator, source: bytes, kind: str, text_parts: tuple[str, ...]):
    """`source`, a zip package, translated as `kind`: (out, before, after, blocks), once the package is checked to hold
    the same parts in the same order and every part whose name does not start with one of `text_parts` byte for byte."""
    from nmtcli.documents.formats import translate_file

    out, blocks = translate_file(translator, source, kind)
    before, after = zipfile.ZipFile(io.BytesIO(source)), zipfile.ZipFile(io.BytesIO(out))
    assert after.namelist() == before.namelist()
    for name in before.namelist():
        if not name.startswith(text_parts):
            assert after.read(name) == before.read(name), name
    return out, before, after, blocks


# --- .docx --------------------------------------------------------------------------------------------

WORD_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships"'
CT = '''<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/><Default Extension="png" ContentType="image/png"/><Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/><Override PartName="/word/header1.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.header+xml"/><Override PartName="/word/footer1.xml" ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.footer+xml"/></Types>'''
RELS = '''<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>'''
DOC_RELS = '''<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships"><Relationship Id="rId2" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/hyperlink" Target="https://example.org/" TargetMode="External"/><Relationship Id="rId3" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/header" Target="header1.xml"/><Relationship Id="rId4" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/footer" Target="footer1.xml"/><Relationship Id="rId5" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/image" Target="media/image1.png"/></Relationships>'''
BODY = f'''<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:document {WORD_NS}><w:body>
<w:p><w:pPr><w:pStyle w:val="Heading1"/></w:pPr><w:r><w:t>the old tree</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">the </w:t></w:r><w:r><w:rPr><w:b/></w:rPr><w:t>small dog</w:t></w:r><w:r><w:t xml:space="preserve"> sees a </w:t></w:r><w:bookmarkStart w:id="0" w:name="ball"/><w:r><w:rPr><w:i/><w:color w:val="FF0000"/></w:rPr><w:t>red ball</w:t></w:r><w:bookmarkEnd w:id="0"/><w:r><w:t>.</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">every child likes </w:t></w:r><w:hyperlink r:id="rId2"><w:r><w:rPr><w:rStyle w:val="Hyperlink"/></w:rPr><w:t>the old tree</w:t></w:r></w:hyperlink><w:r><w:tab/><w:t>and a cat</w:t></w:r></w:p>
<w:p><w:r><w:t xml:space="preserve">this young woman finds </w:t></w:r><w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve"> PAGE </w:instrText></w:r><w:r><w:fldChar w:fldCharType="end"/></w:r><w:r><w:t xml:space="preserve"> the green book</w:t></w:r></w:p>
<w:tbl><w:tr><w:tc><w:p><w:r><w:t>the king reads a letter</w:t></w:r></w:p></w:tc><w:tc><w:p><w:r><w:t>a fast horse</w:t></w:r></w:p></w:tc></w:tr></w:tbl>
<w:p/>
<w:sectPr><w:headerReference w:type="default" r:id="rId3"/><w:footerReference w:type="default" r:id="rId4"/></w:sectPr>
</w:body></w:document>'''
HEADER = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:hdr {WORD_NS}><w:p><w:r><w:t>the small cat sees a bird</w:t></w:r></w:p></w:hdr>'
FOOTER = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:ftr {WORD_NS}><w:p><w:r><w:t>every man knows the river</w:t></w:r></w:p></w:ftr>'
def docx_package() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in [("[Content_Types].xml", CT), ("_rels/.rels", RELS), ("word/document.xml", BODY), ("word/_rels/document.xml.rels", DOC_RELS),
                           ("word/header1.xml", HEADER), ("word/footer1.xml", FOOTER)]:
            z.writestr(name, data)
        z.writestr("word/media/image1.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    return out.getvalue()


def test_docx_translates_body_tables_headers_and_footers_with_each_run_where_the_alignment_puts_it(translator):
    docx = pytest.importorskip("docx")
    from lxml import etree

    source = docx_package()  # every part without text (and the image) byte for byte:
    out, before, after, blocks = translated_package(translator, source, "docx", ("word/document", "word/header", "word/footer"))
    assert blocks == 8
    document = docx.Document(io.BytesIO(out))  # python-docx opens it
    sources = [p.text for p in docx.Document(io.BytesIO(source)).paragraphs]
    for text, source_text in zip([p.text for p in document.paragraphs][:4], sources):
        assert translated(source_text, text), (source_text, text)
    cells = [cell.text for row in document.tables[0].rows for cell in row.cells]
    assert all(translated("the king", cell) for cell in cells)
    assert translated("the small cat", document.sections[0].header.paragraphs[0].text)
    assert translated("every man", document.sections[0].footer.paragraphs[0].text)
    body = after.read("word/document.xml").decode()
    for kept in ('<w:pPr><w:pStyle w:val="Heading1"/></w:pPr>', "<w:rPr><w:b/></w:rPr>", '<w:rPr><w:i/><w:color w:val="FF0000"/></w:rPr>',
                 '<w:hyperlink r:id="rId2">', '<w:bookmarkStart w:id="0" w:name="ball"/>', '<w:bookmarkEnd w:id="0"/>',
                 '<w:instrText xml:space="preserve"> PAGE </w:instrText>', "<w:tab/>", "<w:p/>", "<w:sectPr>"):
        assert body.count(kept) == before.read("word/document.xml").decode().count(kept) == 1, kept
    tree = etree.fromstring(after.read("word/document.xml"))
    w = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
    assert not tree.findall(f".//{w}r//{w}r") and not tree.findall(f".//{w}r//{w}hyperlink")  # runs hold no runs
    assert all(t.getparent().tag == f"{w}r" for t in tree.iter(f"{w}t"))  # text only in runs
    bold = [r for p in document.paragraphs for r in p.runs if r.bold]
    assert len(bold) == 1 and translated("small dog", bold[0].text)  # the bold run on the dog's words, not merged



BOLD = "<w:rPr><w:b/></w:rPr>"


def repackaged(package: bytes, name: str, change) -> bytes:
    """The zip package with the part `name`'s text changed by `change`."""
    source, out = zipfile.ZipFile(io.BytesIO(package)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for part in source.namelist():
            data = source.read(part)
            z.writestr(part, change(data.decode()) if part == name else data)
    return out.getvalue()


@pytest.mark.parametrize("runs", [
    [("every child follows ", ""), ("every young door", BOLD)],
    [("the small dog ", ""), ("sees", BOLD), (" a red ball", "")],
    [("the old king", BOLD), (" reads a green letter", "")],
    [("every ", ""), ("child follows ", ""), ("every young door", BOLD)],  # plain text in two runs, less than the bold in each
], ids=["object", "verb", "subject", "split"])
@pytest.mark.parametrize("revisions", [False, True], ids=["", "revision-ids"])
def test_a_bold_run_lands_on_the_words_html_gives_its_tag_the_plain_runs_are_text(translator, runs, revisions):
    """The runs in a paragraph's own formatting are its plain text, as text outside tags is in HTML: a Word paragraph
    and the same paragraph as HTML put the bold on the same words. (When every run was an element, the plain run
    "every child follows", whose verb German puts last, claimed the words between and pushed the bold onto "folgt".)"""
    docx = pytest.importorskip("docx")
    from documents import word_package

    from nmtcli.documents.formats import translate_file

    source = word_package([runs])
    if revisions:  # each run typed at another time, as Word marks them: the plain runs are one formatting all the same
        count = iter(range(100))
        source = repackaged(source, "word/document.xml", lambda xml: re.sub("<w:r>", lambda _: f'<w:r w:rsidR="00A{next(count)}">', xml))
    out, _ = translate_file(translator, source, "docx")
    paragraph = docx.Document(io.BytesIO(out)).paragraphs[0]
    html = translator.translate_html("<p>" + "".join(f"<b>{text}</b>" if props else text for text, props in runs) + "</p>")
    assert [r.text.strip() for r in paragraph.runs if r.bold] == re.findall(r"<b>(.*?)</b>", html), (html, paragraph.text)
    assert re.sub(r"</?b>|</?p>", "", html).split() == paragraph.text.split()
    if runs[-1] == ("every young door", BOLD):
        assert set(re.findall(r"<b>(.*?)</b>", html)[0].split()) == {"jeder", "jung", "tuer"}, html

def test_a_docx_that_is_no_zip_or_unpacks_too_large_is_refused():
    from nmtcli.documents.formats import read
    from nmtcli.errors import NmtError

    with pytest.raises(NmtError, match="not a Word document: it is not a zip"):
        read(b"plain text, not a zip", "docx")
    package = bytearray(docx_package())
    central = package.index(b"PK\x01\x02")  # the first entry's central directory record: its size unpacked at +24
    package[central + 24:central + 28] = (0xFFFFFFF0).to_bytes(4, "little")
    with pytest.raises(NmtError, match="unpacks to more than 500,000,000 bytes: refused"):
        read(bytes(package), "docx")


# --- .odt, .odp -----------------------------------------------------------------------------------------

ODF_NS = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
          'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
          'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
          'xmlns:xlink="http://www.w3.org/1999/xlink" xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0" xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0" '
          'office:version="1.3"')
ODT_BODY = """<office:text>
<text:h text:style-name="H1" text:outline-level="1">The old tree</text:h>
<text:p text:style-name="P1">the <text:span text:style-name="T1">small dog</text:span> sees a<text:s text:c="2"/>red ball<text:note text:id="n1" text:note-class="footnote"><text:note-citation>1</text:note-citation><text:note-body><text:p>the note stays</text:p></text:note-body></text:note>.</text:p>
<text:p>every child likes <text:a xlink:type="simple" xlink:href="https://example.org/">the old tree</text:a><text:tab/>and a cat</text:p>
<text:list><text:list-item><text:p>this young woman finds the green book</text:p></text:list-item></text:list>
<table:table table:name="T"><table:table-row><table:table-cell><text:p>the king reads a letter</text:p></table:table-cell></table:table-row></table:table>
<text:p/>
<text:p>page <text:page-number text:select-page="current">1</text:page-number></text:p>
</office:text>"""
FRAME = 'svg:x="1cm" svg:y="1cm" svg:width="24cm" svg:height="4cm"'  # where LibreOffice draws it: a frame of no size wraps every letter
ODP_BODY = f"""<office:presentation><draw:page draw:name="one"><draw:frame presentation:class="title" {FRAME}><draw:text-box>
<text:p>the <text:span text:style-name="T1">small dog</text:span> sees a red ball</text:p></draw:text-box></draw:frame>
<presentation:notes><draw:frame {FRAME}><draw:text-box><text:p>every child likes the old tree</text:p></draw:text-box></draw:frame></presentation:notes>
</draw:page></office:presentation>"""


def odf_package(kind: str) -> bytes:
    mimetype = {"odt": "application/vnd.oasis.opendocument.text", "odp": "application/vnd.oasis.opendocument.presentation"}[kind]
    content = (f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content {ODF_NS}><office:automatic-styles>'
               '<style:style style:name="T1" style:family="text"><style:text-properties fo:font-weight="bold"/></style:style>'
               f'</office:automatic-styles><office:body>{ODT_BODY if kind == "odt" else ODP_BODY}</office:body></office:document-content>')
    styles = (f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-styles {ODF_NS}><office:master-styles><style:master-page style:name="S">'
              '<style:header><text:p>the small cat sees a bird</text:p></style:header></style:master-page></office:master-styles>'
              '</office:document-styles>')
    manifest = ('<?xml version="1.0" encoding="UTF-8"?>\n<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" '
                f'manifest:version="1.3"><manifest:file-entry manifest:full-path="/" manifest:media-type="{mimetype}"/>'
                '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
                '<manifest:file-entry manifest:full-path="styles.xml" manifest:media-type="text/xml"/>'
                '<manifest:file-entry manifest:full-path="Pictures/image1.png" manifest:media-type="image/png"/></manifest:manifest>')
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), mimetype, compress_type=zipfile.ZIP_STORED)
        for name, data in [("content.xml", content), ("styles.xml", styles), ("META-INF/manifest.xml", manifest)]:
            z.writestr(name, data)
        z.writestr("Pictures/image1.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    return out.getvalue()


@pytest.mark.parametrize("kind", ["odt", "odp"])
def test_opendocument_translates_paragraphs_with_spans_and_links_and_keeps_the_package(translator, kind):
    from lxml import etree

    source = odf_package(kind)  # every part but content.xml and styles.xml (the mimetype, the manifest, the image) as it was
    out, before, after, blocks = translated_package(translator, source, kind, ("content.xml", "styles.xml"))
    assert after.infolist()[0].compress_type == zipfile.ZIP_STORED
    text_ns = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
    content = etree.fromstring(after.read("content.xml"))  # a second XML parser reads it
    paragraphs = [p for p in content.iter(f"{text_ns}p", f"{text_ns}h") if p.getparent().tag != f"{text_ns}note-body"]
    sources = [p for p in etree.fromstring(before.read("content.xml")).iter(f"{text_ns}p", f"{text_ns}h")
               if p.getparent().tag != f"{text_ns}note-body"]
    for paragraph, original in zip(paragraphs, sources):
        words, source_words = "".join(paragraph.itertext()), "".join(original.itertext())
        if re.search(r"[a-z]{3}", source_words) and "page" not in source_words:
            assert translated(source_words, re.sub(r"the note stays|1", "", words)), (source_words, words)
        source_tags = sorted(etree.QName(e).localname for e in original.iter() if e is not original)
        assert sorted(etree.QName(e).localname for e in paragraph.iter() if e is not paragraph) == source_tags
    body = after.read("content.xml").decode()
    for kept in ('<text:span text:style-name="T1">', '<text:s text:c="2"/>', "<text:note-body><text:p>the note stays</text:p></text:note-body>",
                 '<text:a xlink:type="simple" xlink:href="https://example.org/">', "<text:tab/>", "<text:p/>",
                 '<text:page-number text:select-page="current">1</text:page-number>', "<office:automatic-styles>"):
        assert body.count(kept) == before.read("content.xml").decode().count(kept), kept
    assert translated("the small cat", "".join(etree.fromstring(after.read("styles.xml")).itertext()))
    assert blocks == (7 if kind == "odt" else 3)


# --- .epub ------------------------------------------------------------------------------------------------

CHAPTER = """<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" lang="en">
<head><title>The old tree</title><link rel="stylesheet" href="style.css"/></head>
<body><h1 id="c1">The old tree</h1>
<p>the <b>small dog</b> sees a red ball.<br/>every child likes <a href="ch2.xhtml#x">the old tree</a>.</p>
<p><img src="image1.png" alt="a tree"/>this young woman finds <code>the_code()</code> and the green book.</p>
</body></html>
"""


def epub_package() -> bytes:
    container = ('<?xml version="1.0"?>\n<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
                 '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles></container>')
    opf = ('<?xml version="1.0"?>\n<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id"><metadata '
           'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>The old tree</dc:title></metadata><manifest><item id="c1" '
           'href="ch1.xhtml" media-type="application/xhtml+xml"/></manifest><spine><itemref idref="c1"/></spine></package>')
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        for name, data in [("META-INF/container.xml", container), ("OEBPS/content.opf", opf), ("OEBPS/ch1.xhtml", CHAPTER),
                           ("OEBPS/style.css", "p { margin: 0 }\n")]:
            z.writestr(name, data)
        z.writestr("OEBPS/image1.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    return out.getvalue()


def test_epub_translates_each_chapter_as_html_and_keeps_the_book(translator):
    from lxml import etree

    source = epub_package()
    out, before, after, blocks = translated_package(translator, source, "epub", ("OEBPS/ch1.xhtml",))
    assert after.infolist()[0].compress_type == zipfile.ZIP_STORED and blocks == 1
    chapter = after.read("OEBPS/ch1.xhtml").decode()
    tree = etree.fromstring(chapter.encode())  # still well-formed XHTML
    ns = "{http://www.w3.org/1999/xhtml}"
    assert [e.tag for e in tree.iter()] == [e.tag for e in etree.fromstring(CHAPTER.encode()).iter()]
    for kept in ('<link rel="stylesheet" href="style.css"/>', '<a href="ch2.xhtml#x">', "<code>the_code()</code>", "<br/>",
                 '<img src="image1.png" alt="a tree"/>', '<h1 id="c1">'):
        assert chapter.count(kept) == 1, kept
    assert translated("the old tree", tree.find(f".//{ns}h1").text)
    assert all(translated("the small dog", "".join(p.itertext())) for p in tree.iter(f"{ns}p"))


# --- .pptx ------------------------------------------------------------------------------------------------


def pptx_package() -> bytes:
    """A slide built with python-pptx: a title, a text box of runs (bold, a link, a slide-number field), a table, notes."""
    pptx = pytest.importorskip("pptx")
    from pptx.util import Inches

    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[5])  # title only
    slide.shapes.title.text = "the old tree"
    paragraph = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1)).text_frame.paragraphs[0]
    for words, bold, link in (("the ", False, None), ("small dog", True, None), (" sees ", False, None),
                              ("a red ball", False, "https://example.org/")):
        run = paragraph.add_run()
        run.text, run.font.bold = words, bold or None
        if link:
            run.hyperlink.address = link
    paragraph.add_line_break()
    paragraph.add_run().text = "every child likes the old tree"
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(4), Inches(6), Inches(1)).table
    table.cell(0, 0).text, table.cell(0, 1).text = "the king reads a letter", "a fast horse"
    slide.notes_slide.notes_text_frame.text = "this young woman finds the green book"
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def test_pptx_translates_slides_tables_and_notes_with_each_run_where_the_alignment_puts_it(translator):
    pptx = pytest.importorskip("pptx")
    source = pptx_package()
    out, before, after, blocks = translated_package(translator, source, "pptx", ("ppt/slides/slide", "ppt/notesSlides/"))
    assert blocks == 5  # the title, the text box, two cells, the notes
    slide = pptx.Presentation(io.BytesIO(out)).slides[0]  # python-pptx opens it
    texts = [shape.text_frame.text for shape in slide.shapes if shape.has_text_frame]
    assert translated("the old tree", texts[0]) and all(translated("the dog", line) for line in texts[1].split("\v"))
    assert texts[1].count("\v") == 1  # the line break, once
    runs = [run for p in slide.shapes[1].text_frame.paragraphs for run in p.runs]
    assert [r.font.bold for r in runs].count(True) == 1 and [bool(r.hyperlink.address) for r in runs].count(True) == 1
    table = next(shape.table for shape in slide.shapes if shape.has_table)
    assert translated("the king", table.cell(0, 0).text) and translated("a horse", table.cell(0, 1).text)
    assert translated("this young woman", slide.notes_slide.notes_text_frame.text)
    xml = after.read("ppt/slides/slide1.xml").decode()
    assert all(p.split("</a:p>")[0].count("<a:endParaRPr") <= 1 for p in xml.split("<a:p>"))
    assert not re.search(r"<a:endParaRPr[^>]*/>\s*<a:r>", xml)  # the end properties stay last


# --- rendered by LibreOffice, where it is installed ------------------------------------------------------


@pytest.mark.parametrize("kind", ["docx", "odt", "pptx", "odp"])
def test_libreoffice_renders_each_translated_document_as_it_renders_the_original(translator, kind, tmp_path):
    """A document's own program opens what nmt wrote: `soffice --headless --convert-to pdf` of the translation gives
    as many pages as the original's, and the rendered text is the translation (pdftotext). Skipped where LibreOffice
    and poppler are not installed (Debian: libreoffice-writer-nogui, libreoffice-impress-nogui, poppler-utils); benchmarks/documents.py renders."""
    import shutil
    import subprocess

    from documents import render

    from nmtcli.documents.formats import translate_file

    if not all(shutil.which(tool) for tool in ("soffice", "pdftotext", "pdfinfo", "pdftoppm")):
        pytest.skip("LibreOffice (soffice) and poppler (pdftotext, pdfinfo, pdftoppm) are not installed")
    source = {"docx": docx_package, "pptx": pptx_package}.get(kind, lambda: odf_package(kind))()
    pages = render({"original": source, "translated": translate_file(translator, source, kind)[0]}, tmp_path, kind)
    assert pages["translated"] == pages["original"], pages
    original, rendered = (subprocess.run(["pdftotext", "-layout", str(tmp_path / f"{name}.pdf"), "-"], check=True, capture_output=True,
                                         text=True).stdout for name in ("original", "translated"))
    assert translated("the small dog sees a red ball", original) is False  # the original renders in English
    assert translated(original, rendered), rendered


def test_runs_in_the_paragraphs_own_formatting_are_its_text_whatever_their_editing_marks():
    """PowerPoint writes a plain run as `<a:r>`, `<a:rPr/>` or with editing state (`dirty`, a spelling mark `err`):
    all are the paragraph's plain text; only the bold run and the link stay inline elements around their words."""
    from nmtcli.documents.formats import read
    from nmtcli.documents.formats.core import Tag

    source = repackaged(pptx_package(), "ppt/slides/slide1.xml",
                        lambda xml: xml.replace("<a:rPr/><a:t> sees ", '<a:rPr lang="en-US" dirty="0" err="1"/><a:t> sees ', 1))
    assert 'err="1"/><a:t> sees ' in zipfile.ZipFile(io.BytesIO(source)).read("ppt/slides/slide1.xml").decode()
    box = next(b for b in read(source, "pptx").blocks if "small dog" in "".join(t for t in b.tokens if isinstance(t, str)))
    opened = [t.markup for t in box.tokens if isinstance(t, Tag) and t.kind == "open"]
    assert opened == ['<a:r><a:rPr b="1"/>', '<a:r><a:rPr><a:hlinkClick r:id="rId2"/></a:rPr>'], opened
