"""Named corpora for `nmt prepare NAME`: where each split comes from, which languages, which vocabulary.

Adding a corpus is one `Recipe(...)` in RECIPES. A split is either files of a Hugging Face Hub
dataset (parquet with a `translation` struct column, as `wmt/wmt14` stores them) or a corpus
shipped inside this package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from nmtcli.data.download import HubFile
from nmtcli.errors import NmtError


@dataclass(frozen=True)
class HubSplit:
    """A split stored as parquet files in a Hub dataset: listed `files`, or every file matching `pattern`."""

    files: tuple[HubFile, ...] = ()
    pattern: str | None = None
    description: str = ""


@dataclass(frozen=True)
class BundledSplit:
    """A split of a corpus shipped in the package (`nmtcli/data/<resource>`)."""

    resource: str
    split: str
    description: str = ""


@dataclass(frozen=True)
class Recipe:
    name: str
    source_lang: str
    target_lang: str
    summary: str
    pairs: str  # human-readable size of the training split, for `--list`
    source: str  # where the data comes from, for `--list`
    license: str
    splits: dict[str, HubSplit | BundledSplit]
    vocab_size: int = 37000
    repo: str | None = None  # Hub dataset for HubSplit splits
    revision: str = "main"  # the manifest records the commit it resolved to
    spm_sentences: int = 1_000_000  # pairs sampled to train sentencepiece (each gives 2 lines)
    max_ratio: float = 1.5  # drop training pairs whose token-length ratio exceeds this
    notes: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name, "source_lang": self.source_lang, "target_lang": self.target_lang,
            "summary": self.summary, "pairs": self.pairs, "source": self.source, "license": self.license,
            "repo": self.repo, "revision": self.revision, "vocab_size": self.vocab_size,
            "splits": {k: v.description for k, v in self.splits.items()},
        }


# The Hub's `wmt/wmt14`: one parquet dataset per language pair, `translation: struct<de, en>`. The
# training split concatenates Europarl v7, Common Crawl and News Commentary v9, unshuffled and
# uncleaned; validation is newstest2013 and test the full newstest2014 (3,003 lines, the paper's set).
WMT14 = "wmt/wmt14"
WMT14_LICENSE = "WMT14 terms (research use)"

_WMT14_DE_EN = {
    "train": HubSplit(
        files=(
            HubFile("de-en/train-00000-of-00003.parquet"),
            HubFile("de-en/train-00001-of-00003.parquet"),
            HubFile("de-en/train-00002-of-00003.parquet"),
        ),
        description="Europarl v7 + Common Crawl + News Commentary v9 (4,508,785 pairs)",
    ),
    "valid": HubSplit(files=(HubFile("de-en/validation-00000-of-00001.parquet", rows=3000),), description="newstest2013 (3,000 pairs)"),
    "test": HubSplit(files=(HubFile("de-en/test-00000-of-00001.parquet", rows=3003),), description="newstest2014, full (3,003 pairs)"),
}
_WMT14_FR_EN = {
    "train": HubSplit(pattern="fr-en/train-*.parquet", description="Europarl, Common Crawl, UN, News Commentary, Gigafren (about 40.8M pairs)"),
    "valid": HubSplit(pattern="fr-en/validation-*.parquet", description="newstest2013 (3,000 pairs)"),
    "test": HubSplit(pattern="fr-en/test-*.parquet", description="newstest2014, full (3,003 pairs)"),
}

DEMO_RESOURCE = "demo/demo.en-de.tsv.xz"


def _demo(src: str, tgt: str) -> Recipe:
    return Recipe(
        name=f"demo-{src}-{tgt}" if (src, tgt) != ("en", "de") else "demo",
        source_lang=src,
        target_lang=tgt,
        summary="Small real corpus shipped with nmt: UI strings of open-source web projects (offline, CPU-sized)",
        pairs="4,228",
        source="bundled: gettext catalogues of 12 PyPI projects",
        license="BSD-3/BSD-2/MIT (PROVENANCE.md)",
        splits={split: BundledSplit(DEMO_RESOURCE, split, f"{n} pairs") for split, n in (("train", "4,228"), ("valid", "500"), ("test", "500"))},
        vocab_size=4000,  # about 9k short lines: a small vocabulary keeps the tiny preset fast on a CPU
        # UI strings are a few words long, where the plain 1.5 ratio drops a fifth of the good pairs ("Save" ->
        # "Speichern" is 1 token against 3). 3.0 drops 28 pairs, most of them right translations too ("Keyboard
        # shortcut" -> "Tastaturkürzel", 5 pieces against 1); 1.5 with --ratio-slack 5 would drop 6.
        max_ratio=3.0,
    )


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            name="wmt14-en-de", source_lang="en", target_lang="de",
            summary="WMT 2014 English->German, the paper's first task (sec. 5.1)",
            pairs="4.5M", source=f"Hub {WMT14} (de-en)", license=WMT14_LICENSE,
            splits=_WMT14_DE_EN, vocab_size=37000, repo=WMT14,
        ),
        Recipe(
            name="wmt14-de-en", source_lang="de", target_lang="en",
            summary="WMT 2014 German->English (the same data, the other direction)",
            pairs="4.5M", source=f"Hub {WMT14} (de-en)", license=WMT14_LICENSE,
            splits=_WMT14_DE_EN, vocab_size=37000, repo=WMT14,
        ),
        Recipe(
            name="wmt14-en-fr", source_lang="en", target_lang="fr",
            summary="WMT 2014 English->French, the paper's second task (sec. 5.1: 36M pairs, 32,000 word pieces)",
            pairs="40.8M", source=f"Hub {WMT14} (fr-en)", license=WMT14_LICENSE,
            splits=_WMT14_FR_EN, vocab_size=32000, repo=WMT14, spm_sentences=2_000_000,
        ),
        _demo("en", "de"),
        _demo("de", "en"),
    )
}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise NmtError(f"no recipe named {name!r}", f"`nmt prepare --list` shows them: {', '.join(RECIPES)}")
    return RECIPES[name]
