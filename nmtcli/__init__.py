"""nmt: the Transformer of "Attention Is All You Need" for machine translation, end to end.

The Python API (docs/python-api.md):

    from nmtcli import Translator
    translator = Translator.load("models/tiny-demo")
    for t in translator.translate(["Insert image", "Save the file"]):
        print(t.text, t.confidence)

`import nmtcli` is cheap: the names below are imported when first used, and torch only when a model is loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["Glossary", "NmtError", "NotAvailable", "Scored", "Translation", "Translator", "__version__", "read_glossary"]

# Each public name and the module that defines it: the lazy import below, and the layering test's one exception.
_PUBLIC = {"Translator": "nmtcli.api", "Translation": "nmtcli.inference.results", "Scored": "nmtcli.inference.results",
           "NmtError": "nmtcli.errors", "NotAvailable": "nmtcli.errors", "Glossary": "nmtcli.inference.glossary",
           "read_glossary": "nmtcli.inference.glossary"}

if TYPE_CHECKING:
    from nmtcli.api import Translator
    from nmtcli.errors import NmtError, NotAvailable
    from nmtcli.inference.glossary import Glossary, read_glossary
    from nmtcli.inference.results import Scored, Translation


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        import importlib

        value = getattr(importlib.import_module(_PUBLIC[name]), name)
        globals()[name] = value  # found directly from now on
        return value
    raise AttributeError(f"module 'nmtcli' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
