"""Documents (issue 38): what reading, placing and writing a document's format costs over translating its text alone.

The same sentences (generated, seeded) are written as a text of paragraphs and as a document of each format: .srt
(two lines a cue, one sentence over two cues, every fourth cue in <i>), .po (one message a paragraph, placeholders),
.xliff 1.2 (every paragraph with a <g> and an <x/>), .md (paragraphs with emphasis, links and inline code), .docx
(each paragraph three runs, the middle one bold; pages counted as 10 paragraphs, for a pages/s). Each is
translated by the same model on the same device: the baseline is `Translator.translate(paragraphs,
split_sentences=True)` of the document's text alone (no format, no inline elements); each format's row is
`documents.formats.translate_file` of the document (read, translated through translate / translate_html, written).
Printed: blocks, sentences, seconds, sentences per second, and the time over the baseline's. A format whose blocks
hold inline elements pays the covering alignment pass of translate_html (documents/markup.py) on top.

With --render DIR (LibreOffice and poppler installed: Debian's libreoffice-writer-nogui and poppler-utils), the
.docx is also rendered as LibreOffice prints it: the original, nmt's translation, and the translation as LibreTranslate
documents its own (each paragraph's text translated whole into its first run, the other runs dropped: its issues #599,
#683), each as a PDF and its first page as a PNG to look at; pages/s then counts the original's real pages.

Usage:
  python benchmarks/documents.py --model models/tiny-demo [--paragraphs 200] [--device cpu] [--threads 2]
  python benchmarks/documents.py --model models/tiny-en-de --paragraphs 1500 --formats docx --render /tmp/render
"""

from __future__ import annotations

import argparse
import html
import io
import random
import re
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import torch

from nmtcli import Translator
from nmtcli.documents.formats import translate_file

NOUNS = "dog cat house tree car book city river child woman man bird garden table window door ball friend".split()
ADJECTIVES = "small big red old young green fast quiet happy dark new blue".split()
VERBS = "sees likes finds buys paints hears builds carries follows visits knows reads".split()


def sentence(rng: random.Random) -> str:
    def phrase() -> str:
        return " ".join([rng.choice(["the", "a", "this", "every"]), *rng.sample(ADJECTIVES, rng.choice([0, 1])), rng.choice(NOUNS)])

    return f"{phrase()} {rng.choice(VERBS)} {phrase()}."


def documents(paragraphs: list[list[str]]) -> dict[str, str]:
    """The same paragraphs as each format's document (and the plain text every baseline translates)."""
    srt, po, units, md = [], ['msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'], [], []
    cue = 1
    for n, sentences in enumerate(paragraphs):
        text = " ".join(sentences)
        words = text.split()
        half = len(words) // 2
        first, second = " ".join(words[:half]), " ".join(words[half:])
        if n % 4 == 0:
            first = f"<i>{first}</i>"
        for part in (first, second):
            srt.append(f"{cue}\n00:00:{cue % 60:02d},000 --> 00:00:{cue % 60:02d},900\n{part}\n")
            cue += 1
        po.append(f'#: src/file.c:{n}\nmsgid "{text} (%s)"\nmsgstr ""\n')
        tagged = f'{words[0]} <g id="1">{words[1]} {words[2]}</g> {" ".join(words[3:])}'
        units.append(f'<trans-unit id="{n}"><source>{tagged} <x id="2"/></source></trans-unit>')
        md.append(f"The *{sentences[0][4:]}* [{sentences[-1]}](https://example.org/{n}) and `code {n}`.")
    xliff = ('<?xml version="1.0" encoding="UTF-8"?>\n<xliff version="1.2"><file source-language="en" target-language="de" '
             f'datatype="plaintext" original="x"><body>\n{chr(10).join(units)}\n</body></file></xliff>\n')
    return {"srt": "\n".join(srt), "po": "\n".join(po), "xliff": xliff, "md": "\n\n".join(md) + "\n", "docx": word(paragraphs)}


WORD_NS = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
CONTENT_TYPES = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Types xmlns="http://schemas.openxmlformats.org/package/2006/'
                 'content-types"><Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
                 '<Default Extension="xml" ContentType="application/xml"/><Override PartName="/word/document.xml" ContentType='
                 '"application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/></Types>')
PACKAGE_RELS = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Relationships xmlns="http://schemas.openxmlformats.org/'
                'package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/officeDocument/2006/'
                'relationships/officeDocument" Target="word/document.xml"/></Relationships>')


def word(paragraphs: list[list[str]]) -> bytes:
    """A minimal Word package (one that Word and LibreOffice open): each paragraph's words in three runs, the middle bold."""
    body = []
    for sentences in paragraphs:
        words = " ".join(sentences).split()
        a, b = len(words) // 3, 2 * len(words) // 3
        body.append([(" ".join(words[:a]) + " ", ""), (" ".join(words[a:b]), "<w:rPr><w:b/></w:rPr>"), (" " + " ".join(words[b:]), "")])
    return word_package(body)


def word_package(paragraphs: list[list[tuple[str, str]]]) -> bytes:
    """paragraphs: each a list of runs (text, run properties)."""
    body = "".join("<w:p>" + "".join(f'<w:r>{props}<w:t xml:space="preserve">{html.escape(text, quote=False)}</w:t></w:r>' for text, props in runs) + "</w:p>"
                   for runs in paragraphs)
    document = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document {WORD_NS}><w:body>{body}</w:body></w:document>'
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", CONTENT_TYPES)
        z.writestr("_rels/.rels", PACKAGE_RELS)
        z.writestr("word/document.xml", document)
    return out.getvalue()


def runs_merged(translator: Translator, paragraphs: list[list[str]]) -> bytes:
    """The .docx as LibreTranslate translates one (argos-translate-files, as its issues #599 and #683 describe it): each
    paragraph's text translated whole and written into its first run (here without formatting), the other runs dropped."""
    texts = translator.translate([" ".join(p) for p in paragraphs], split_sentences=True)
    return word_package([[(t.text, "")] for t in texts])


def render(documents: dict[str, bytes], out: Path, kind: str = "docx") -> dict[str, int]:
    """Each document (of format `kind`) as LibreOffice prints it: NAME.pdf, and NAME.png of its first page; returns the
    pages of each. Each conversion uses a profile under `out`, so no lock is shared with a user's LibreOffice."""
    if not (shutil.which("soffice") and shutil.which("pdfinfo") and shutil.which("pdftoppm")):
        raise SystemExit("--render needs LibreOffice (soffice) and poppler (pdfinfo, pdftoppm): "
                         "apt-get install libreoffice-writer-nogui poppler-utils")
    out.mkdir(parents=True, exist_ok=True)
    pages = {}
    for name, data in documents.items():
        (out / f"{name}.{kind}").write_bytes(data)
        subprocess.run(["soffice", f"-env:UserInstallation=file://{out}/profile", "--headless", "--convert-to", "pdf", "--outdir",
                        str(out), str(out / f"{name}.{kind}")], check=True, capture_output=True, timeout=600)
        info = subprocess.run(["pdfinfo", str(out / f"{name}.pdf")], check=True, capture_output=True, text=True).stdout
        pages[name] = int(re.search(r"^Pages:\s+(\d+)", info, re.MULTILINE)[1])
        subprocess.run(["pdftoppm", "-png", "-r", "80", "-f", "1", "-l", "1", "-singlefile", str(out / f"{name}.pdf"), str(out / name)], check=True)
    return pages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--paragraphs", type=int, default=200)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--formats", default="srt,po,xliff,md,docx", help="which formats to time (comma-separated)")
    parser.add_argument("--render", type=Path, default=None, help="render the .docx with LibreOffice into this dir (see above)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = random.Random(0)
    paragraphs = [[sentence(rng) for _ in range(rng.choice([1, 2, 3]))] for _ in range(args.paragraphs)]
    translator = Translator.load(args.model, device=args.device)
    translator.translate(["warm up the model"], split_sentences=True)
    count = sum(len(p) for p in paragraphs)
    print(f"{args.paragraphs} paragraphs, {count} sentences; model {args.model} on {translator.device}, "
          f"{torch.get_num_threads()} thread(s)\n")
    print(f"{'format':<10} {'blocks':>7} {'seconds':>8} {'sent/s':>8} {'vs text':>8}")
    started = time.perf_counter()
    translator.translate([" ".join(p) for p in paragraphs], split_sentences=True)
    baseline = time.perf_counter() - started
    print(f"{'text':<10} {len(paragraphs):>7} {baseline:>8.2f} {count / baseline:>8.1f} {1:>7.2f}x")
    chosen = args.formats.split(",")
    translations = {}
    for format, document in documents(paragraphs).items():
        if format not in chosen:
            continue
        started = time.perf_counter()
        translations[format], blocks = translate_file(translator, document if isinstance(document, bytes) else document.encode("utf-8"), format)
        seconds = time.perf_counter() - started
        pages = f"  ({args.paragraphs / 10 / seconds:.1f} pages/s, counting 10 paragraphs a page)" if format == "docx" else ""
        print(f"{format:<10} {blocks:>7} {seconds:>8.2f} {count / seconds:>8.1f} {seconds / baseline:>7.2f}x{pages}")
        if format == "docx":
            docx_seconds = seconds
    if args.render is not None and "docx" in translations:
        pages = render({"original": word(paragraphs), "nmt": translations["docx"], "runs-merged": runs_merged(translator, paragraphs)},
                       args.render)
        print(f"\nrendered by LibreOffice into {args.render}: pages {pages}; the .docx: {pages['original']} pages in "
              f"{docx_seconds:.2f} s = {pages['original'] / docx_seconds:.1f} pages/s; first pages: original.png, nmt.png, "
              "runs-merged.png")


if __name__ == "__main__":
    main()
