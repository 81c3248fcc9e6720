"""mt_transformer: the Transformer of "Attention Is All You Need" as a command-line translation trainer."""

__version__ = "0.1.0"
