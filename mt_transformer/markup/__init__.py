"""Markup: inline elements of a sentence carried onto its translation by word alignments."""
