"""Command-line entry points: mt-train, mt-prepare, mt-clean, mt-translate, mt-eval, mt-score, mt-export,
mt-import, mt-average, mt-plot, mt-serve.

Each parses its arguments, calls into the package, and turns a UserError into one line on
stderr and exit code 2.
"""

from mt_transformer.cli.clean import clean_main
from mt_transformer.cli.evaluate import eval_main
from mt_transformer.cli.score import score_main
from mt_transformer.cli.serve import serve_main
from mt_transformer.cli.tools import average_main, export_main, import_main, plot_main
from mt_transformer.cli.train import prepare_main, train_main
from mt_transformer.cli.translate import translate_main

__all__ = [
    "average_main",
    "clean_main",
    "eval_main",
    "export_main",
    "import_main",
    "plot_main",
    "prepare_main",
    "score_main",
    "serve_main",
    "train_main",
    "translate_main",
]
