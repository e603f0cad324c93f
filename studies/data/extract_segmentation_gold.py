"""Rebuild studies/data/sentence_gold_{en,de}.json from a checkout of the Pragmatic Segmenter
(github.com/diasks2/pragmatic_segmenter, MIT, Copyright (c) 2015 Kevin S. Dias):

    python studies/data/extract_segmentation_gold.py PATH/TO/pragmatic_segmenter

Reads the examples of spec/pragmatic_segmenter/languages/{english,deutsch}_spec.rb (their data only:
each example's text and expected sentences) into JSON: {"set": "golden" (the "Golden Rules" context)
or "text" (the other examples, mostly real text: Alice in Wonderland, Wikipedia, an e-book, ...),
"name", "text", "sentences"}. Left out, with the reason counted: examples marked skip, PDF mode (joins
lines, where nmt ends a sentence at every line break), and examples whose expected sentences are
not the text's own characters in order (the segmenter's cleaning rewrote them).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"', "'": "'", "0": "\0", "e": "\x1b", "s": " "}


def ruby_string(source: str, at: int) -> tuple[str, int]:
    """The Ruby string literal ("..." or '...') starting at `at`, and the index after it."""
    quote, out, i = source[at], [], at + 1
    while source[i] != quote:
        c = source[i]
        if c == "\\":
            nxt = source[i + 1]
            if quote == "'":
                out.append(nxt if nxt in "\\'" else c + nxt)
                i += 2
                continue
            if nxt == "u":
                out.append(chr(int(source[i + 2:i + 6], 16)))
                i += 6
                continue
            out.append(ESCAPES.get(nxt, nxt))
            i += 2
            continue
        if quote == '"' and source.startswith("#{", i):
            raise ValueError("string interpolation")
        out.append(c)
        i += 1
    return "".join(out), i + 1


def ruby_array(source: str, at: int) -> list[str]:
    """The array of string literals starting at `at` ("[")."""
    items, i = [], at + 1
    while True:
        while source[i] in " ,\n":
            i += 1
        if source[i] == "]":
            return items
        item, i = ruby_string(source, i)
        items.append(item)


def examples(spec: str):
    """(set, name, text, sentences, options) for each `it` block that segments one text."""
    golden_end = spec.find("describe '#segment'")
    for block in re.finditer(r"\n    it ['\"](.*?)['\"] do\n(.*?)\n    end\n", spec, re.S):
        name, body = block.group(1), block.group(2)
        if "skip" in body.split("Segmenter.new")[0]:
            yield None, name, None, None, "skipped"
            continue
        new = body.find("Segmenter.new(text: ")
        expect = body.find("expect(ps.segment).to eq(")
        if new < 0 or expect < 0:
            yield None, name, None, None, "not a segment example"
            continue
        at = new + len("Segmenter.new(text: ")
        if body[at] in "\"'":
            text, after = ruby_string(body, at)
        else:  # text: text, assigned above as a literal or a heredoc
            assigned = re.search(r"text = (<<-EOF\n(.*?)\n\s*EOF|[\"'])", body, re.S)
            if assigned is None:
                yield None, name, None, None, "text not found"
                continue
            text = assigned.group(2) + "\n" if assigned.group(2) is not None else ruby_string(body, assigned.start(1))[0]
            after = body.find(")", at)
        options = body[after:body.find(")", after)]
        sentences = ruby_array(body, expect + len("expect(ps.segment).to eq("))
        yield ("golden" if block.start() < golden_end else "text"), name, text, sentences, options


def verbatim(text: str, sentences: list[str]) -> bool:
    at = 0
    for sentence in sentences:
        found = text.find(sentence, at)
        if found < 0 or text[at:found].strip():
            return False
        at = found + len(sentence)
    return not text[at:].strip()


def main(root: Path) -> None:
    out = Path(__file__).parent
    for code, spec_name in (("en", "english"), ("de", "deutsch")):
        spec = (root / "spec" / "pragmatic_segmenter" / "languages" / f"{spec_name}_spec.rb").read_text(encoding="utf-8")
        kept, left_out = [], Counter()
        for set_name, name, text, sentences, options in examples(spec):
            if set_name is None:
                left_out[options] += 1
            elif "pdf" in options:
                left_out["pdf mode"] += 1
            elif not verbatim(text, sentences):
                left_out["sentences are not the text's characters (cleaned)"] += 1
            else:
                kept.append({"set": set_name, "name": name, "text": text, "sentences": sentences})
        doc = {"source": "Pragmatic Segmenter (github.com/diasks2/pragmatic_segmenter, MIT License, Copyright (c) 2015 "
                         f"Kevin S. Dias): the examples of spec/pragmatic_segmenter/languages/{spec_name}_spec.rb, "
                         "extracted by studies/data/extract_segmentation_gold.py",
               "left_out": dict(left_out), "examples": kept}
        path = out / f"sentence_gold_{code}.json"
        path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
        print(f"{path}: {Counter(e['set'] for e in kept)} kept, left out {dict(left_out)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", type=Path, help="a checkout of github.com/diasks2/pragmatic_segmenter")
    main(parser.parse_args().root)
