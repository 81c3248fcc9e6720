"""Decoding: greedy and beam search, the translator that batches lines, the CTranslate2 engine, alignments.

The entrance is engines.open_translator: a checkpoint (or an export, or an ensemble) and settings
in, a Translator out, on the engine runtime.settle picks. mt.load, every command and the server
open their translators through it; validation wraps the model being trained with
translator.torch_translator, the one other way in."""
