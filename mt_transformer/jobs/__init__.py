"""Corpus jobs: a corpus of any length translated or scored in windows, resumable after a kill, in shards."""
