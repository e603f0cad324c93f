"""nmt: the Transformer of "Attention Is All You Need" for machine translation, end to end."""

__version__ = "0.1.0"
