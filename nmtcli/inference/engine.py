"""What an engine is: the contract the Python API (nmtcli/api.py) translates through, declared once.

Two engines keep it: the native one (inference/translator.py: nmt's PyTorch search) and CTranslate2's
(interop/ctranslate2_translator.py: a model dir written by `nmt export ctranslate2`). Each states it by
subclassing `Engine`. What an engine cannot do (CTranslate2: n-best lists, alignments, forced decoding)
raises NmtError naming the engine that can, at the call that asks for it.

Torch-free, so that the API can name the type without loading a model.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from nmtcli.errors import NotAvailable

if TYPE_CHECKING:
    from nmtcli.inference.results import Scored, Translation
    from nmtcli.inference.batches import BatchBudget
    from nmtcli.inference.settings import SearchSettings

ENGINES = ("native", "ctranslate2")


class Engine(ABC):
    """A loaded model that translates lines. Its attributes:

    name: "native" or "ctranslate2" (`--engine`).
    settings: the defaults of every call (beam, alpha, ..., the window and batch sizes), as it was opened.
    budget: the padded source tokens per batch (`budget.tokens`; a call's batch_tokens changes it).
    config_values: the model's config.json (nmt.json for CTranslate2): its languages, ...
    languages: a multilingual model's (source, target) codes, else None.
    device: where it computes ("cpu", "cuda:0").
    warn(message): where its warnings go (a line truncated to the model's length, ...).
    """

    name: ClassVar[str]
    settings: SearchSettings
    budget: BatchBudget
    config_values: dict[str, Any]
    languages: tuple[str, str] | None = None
    device: Any
    warn: Callable[[str], None]

    @property
    @abstractmethod
    def cpu_threads(self) -> int | None:
        """The CPU threads a search runs on, or None on a GPU."""

    def close(self) -> None:
        """Let go of what the engine holds (its weights, graphs, cached device memory): the Python API's `close()`."""

    @abstractmethod
    def translate_nbest(self, lines: Iterable[str], prefixes: Iterable[str] | None = None, settings: SearchSettings | None = None,
                        covering: Callable[[int], bool] | None = None) -> Iterator[list[Translation]]:
        """Each line's n-best list (best first; [] for an empty line), in order, read and translated a window at a
        time. `prefixes`: one target prefix per line ("" for none). `settings`: this call's, instead of the engine's.
        `covering(n)`: whether line n (from 1) needs the word alignment that places protected spans (an engine
        without alignments places them by position)."""

    @abstractmethod
    def translate_lines(self, lines: Sequence[str], settings: SearchSettings | None = None, prefixes: Sequence[str] | None = None,
                        numbers: Sequence[int] | None = None, covering: Sequence[bool] | None = None) -> list[list[Translation]]:
        """`lines` translated as one unit (sorted and batched together: `nmt serve`'s batch of concurrent requests);
        `numbers`: each line's number, for its samples and warnings (default 1, 2, ...)."""

    def score(self, lines: Iterable[str], targets: Iterable[str], alignment: str | None = None,
              settings: SearchSettings | None = None) -> Iterator[Scored]:
        """Forced decoding: each (line, target) pair's log-probabilities, in order."""
        raise NotAvailable(f"the {self.name} engine cannot score given translations (forced decoding)",
                           "use the native engine, engine=\"native\" (--engine native), with the model dir")
