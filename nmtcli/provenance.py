"""What made a file: the versions recorded in the metadata of everything nmt writes (manifests, run
configs, model dirs, exports), so a result can be traced to the software that produced it."""

from __future__ import annotations

import platform

import nmtcli


def versions() -> dict[str, str]:
    """nmt's version and those of Python and the libraries whose behaviour shapes the output."""
    import numpy as np
    import sentencepiece as spm
    import torch

    found = {
        "nmt": nmtcli.__version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sentencepiece": spm.__version__,
        "numpy": np.__version__,
    }
    for module in ("pyarrow", "huggingface_hub"):
        try:
            found[module] = __import__(module).__version__
        except ImportError:
            pass
    return found
