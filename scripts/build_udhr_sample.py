"""Rebuild `tests/data/udhr.tsv`: the Universal Declaration of Human Rights in 14 languages, one paragraph
a line, the real text that language detection is measured on (tests/test_languages.py,
studies/language_detect.py).

Source: the "UDHR in Unicode" project (https://www.unicode.org/udhr/), whose XML files carry the
translations of the Office of the United Nations High Commissioner for Human Rights (OHCHR); OHCHR lets
the Declaration be reproduced and translated freely. Read from a checkout of its git mirror
(github.com/unicode-corpus/udhr-in-unicode, commit f4613da):

    python scripts/build_udhr_sample.py PATH/TO/udhr-in-unicode/data/xml

Every <para> and <listitem> of the preamble and the 30 articles is kept, whitespace collapsed; a header
of comment lines says where it comes from. Output: `language<TAB>article<TAB>paragraph` (article 0: the
preamble), languages as ISO 639-1 codes.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from xml.etree import ElementTree

# ISO 639-1 code -> the file of UDHR in Unicode (German: the 1996 spelling reform's text).
FILES = {"en": "udhr_eng.xml", "de": "udhr_deu_1996.xml", "fr": "udhr_fra.xml", "es": "udhr_spa.xml", "it": "udhr_ita.xml",
         "nl": "udhr_nld.xml", "pt": "udhr_por_PT.xml", "pl": "udhr_pol.xml", "sv": "udhr_swe.xml", "da": "udhr_dan.xml",
         "cs": "udhr_ces.xml", "fi": "udhr_fin.xml", "tr": "udhr_tur.xml", "ru": "udhr_rus.xml"}
NS = "{http://www.unhchr.ch/udhr}"
OUT = Path(__file__).parents[1] / "tests" / "data" / "udhr.tsv"
HEADER = """\
# The Universal Declaration of Human Rights, one paragraph a line: language<TAB>article<TAB>paragraph (article 0: the preamble).
# Translations: (c) The Office of the United Nations High Commissioner for Human Rights (OHCHR), which allows the
# Declaration to be freely reproduced and translated; XML from the "UDHR in Unicode" project, https://www.unicode.org/udhr/
# (git mirror github.com/unicode-corpus/udhr-in-unicode, commit f4613da). Rebuilt by scripts/build_udhr_sample.py.
"""


def paragraphs(path: Path) -> list[tuple[int, str]]:
    root = ElementTree.parse(path).getroot()
    found = []
    for number, part in enumerate([root.find(f"{NS}preamble"), *root.findall(f"{NS}article")]):
        for element in part.iter():
            if element.tag in (f"{NS}para", f"{NS}listitem") and element.text and element.text.strip():
                found.append((number, " ".join(element.text.split())))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("xml_dir", type=Path, help="data/xml of a checkout of udhr-in-unicode")
    args = parser.parse_args()
    lines = [f"{code}\t{article}\t{text}" for code, name in FILES.items() for article, text in paragraphs(args.xml_dir / name)]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(HEADER + "\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(lines)} paragraphs in {len(FILES)} languages -> {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
