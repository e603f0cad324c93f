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

Usage:
  python benchmarks/documents.py --model models/tiny-demo [--paragraphs 200] [--device cpu] [--threads 2]
"""

from __future__ import annotations

import argparse
import io
import random
import time
import zipfile

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


def word(paragraphs: list[list[str]]) -> bytes:
    """A minimal Word package: each paragraph's words in three runs, the middle one bold."""
    body = []
    for sentences in paragraphs:
        words = " ".join(sentences).split()
        a, b = len(words) // 3, 2 * len(words) // 3
        runs = [(" ".join(words[:a]) + " ", ""), (" ".join(words[a:b]), "<w:rPr><w:b/></w:rPr>"), (" " + " ".join(words[b:]), "")]
        body.append("<w:p>" + "".join(f'<w:r>{props}<w:t xml:space="preserve">{text}</w:t></w:r>' for text, props in runs) + "</w:p>")
    document = ('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:document xmlns:w="http://schemas.openxmlformats.org/'
                f'wordprocessingml/2006/main"><w:body>{"".join(body)}</w:body></w:document>')
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"/>')
        z.writestr("word/document.xml", document)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--paragraphs", type=int, default=200)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
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
    for format, document in documents(paragraphs).items():
        started = time.perf_counter()
        _, blocks = translate_file(translator, document if isinstance(document, bytes) else document.encode("utf-8"), format)
        seconds = time.perf_counter() - started
        pages = f"  ({args.paragraphs / 10 / seconds:.1f} pages/s)" if format == "docx" else ""
        print(f"{format:<10} {blocks:>7} {seconds:>8.2f} {count / seconds:>8.1f} {seconds / baseline:>7.2f}x{pages}")


if __name__ == "__main__":
    main()
