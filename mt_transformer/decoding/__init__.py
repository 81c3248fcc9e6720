"""Decoding: greedy and beam search, the translator that batches lines, the CTranslate2 engine, alignments."""
