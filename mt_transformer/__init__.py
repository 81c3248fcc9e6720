"""mt_transformer: the Transformer of "Attention Is All You Need" as a command-line translation trainer,
and as a Python API:

    import mt_transformer as mt
    m = mt.load("runs/demo")
    m.translate("I bought 23 red apples on March 5.")

`load` and the classes it returns are imported on first use, so that the commands start without
loading PyTorch before they need it.
"""

__version__ = "0.1.0"
__all__ = ["load", "TranslationModel", "Translation", "__version__"]


def __getattr__(name: str):
    if name in ("load", "TranslationModel"):
        from mt_transformer import translation_model

        return getattr(translation_model, name)
    if name == "Translation":
        from mt_transformer.decoding.translator import Translation

        return Translation
    raise AttributeError(f"module 'mt_transformer' has no attribute {name!r}")
