"""The search flags `nmt translate` and `nmt serve` share, declared once: name, bounds and help.

Each function gives the `typer.Option` of one flag, for a signature's `Annotated[type, options.beam()]`;
the signature gives the default (the paper's, as in `SearchSettings`). Where one command says more about
a flag than the other (serve: a request may ask for another beam; translate: CTranslate2's engine), it
passes those words in.
"""

from __future__ import annotations

import typer
from typer.models import OptionInfo


def beam(also: str = "") -> OptionInfo:
    return typer.Option(help=f"Beam size (sec. 6.1: 4); 1 is greedy search.{also}", min=1)


def alpha(also: str = "") -> OptionInfo:
    return typer.Option(help=f"Length penalty exponent (sec. 6.1: 0.6){also}.", min=0.0)


def length_penalty(also: str = "") -> OptionInfo:
    return typer.Option(help=f"gnmt: ((5+|Y|)/6)^alpha, the paper's; power: |Y|^alpha{also}.")


def coverage_penalty(also: str = "") -> OptionInfo:
    return typer.Option(help="GNMT's coverage penalty beta: the beam's translations reranked by how much of the source they attended to, "
                             f"for a model that ends sentences early (0.2-1.0; docs/translating.md). Default: 0, off, the paper's search{also}.",
                        min=0.0, max=10.0)


def brevity_penalty(also: str = "") -> OptionInfo:
    return typer.Option(help="Weight of the brevity penalty: a translation shorter than the length its source predicts (the training data's "
                             "target pieces per source piece) pays weight * log of BLEU's brevity penalty. Default: the model's own, which "
                             f"`nmt average` calibrates on the validation split (`nmt info` shows it); 0: off, the paper's search{also}.",
                        min=0.0, max=20.0, show_default=False)


def shortlist() -> OptionInfo:
    return typer.Option("--shortlist/--no-shortlist", help="Where the model dir has a lexical shortlist (`nmt shortlist`; `nmt distill` writes "
                        "one for its student), beam and greedy search score only the target pieces the batch's sources can translate "
                        "to: faster on a CPU, the same translations almost everywhere (docs/speed.md). --no-shortlist: the whole vocabulary.")


def max_len_a(also: str = "") -> OptionInfo:
    return typer.Option(help=f"Output length limit a*|x|+b: the a{also}.", min=0.0)


def max_len_b(also: str = "") -> OptionInfo:
    return typer.Option(help=f"Output length limit a*|x|+b: the b{also}.", min=0)


def batch_tokens(batch: str = "batch", also: str = "") -> OptionInfo:
    return typer.Option(help=f"Padded source tokens per {batch}. Default: 1024 on a CPU, 65536 on a GPU of 70 GB or more, 16384 on a smaller one (a GPU also takes at most 2048 or 512 sentences){also}.", min=1)


def device() -> OptionInfo:
    return typer.Option(help="auto, cpu, cuda or cuda:N.")


def precision() -> OptionInfo:
    return typer.Option(help="fp32 (exact); on a CPU int8 (int8 weights and products, 1.3-1.5x faster; a translation may differ "
                             "where candidates are close); on a GPU bf16 / fp16.")


def threads(chosen_by: str = "PyTorch's", serving: bool = False) -> OptionInfo:
    spare = " less one left to the web server's own thread" if serving else ""
    return typer.Option(help=f"CPU threads for {chosen_by} kernels (default: the CPUs this process may use, after its affinity mask "
                             f"and cgroup quota{spare}; $OMP_NUM_THREADS overrides it).", min=1)


def check_length_penalty(value: str) -> None:
    """Refuse a --length-penalty the search does not know (one error line, exit 2)."""
    from nmtcli.errors import NmtError
    from nmtcli.inference.penalties import LENGTH_PENALTIES

    if value not in LENGTH_PENALTIES:
        raise NmtError(f"unknown --length-penalty {value!r}", f"choose one of {', '.join(LENGTH_PENALTIES)}", exit_code=2)
