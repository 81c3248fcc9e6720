"""Evaluation: sacreBLEU scores and significance, checkpoint averaging, plots."""
