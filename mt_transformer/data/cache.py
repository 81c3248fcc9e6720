"""The data cache: where a run's encoded splits, cleaned pairs and a teacher's translations live,
and the key that names each (its files' contents, where they came from, the settings that made it)."""

from __future__ import annotations

import hashlib
import json
import os
import re

from mt_transformer.config import CorpusConfig, DataConfig
from mt_transformer.data.corpus import hub_copy_stamp
from mt_transformer.errors import UserError
from mt_transformer.outputs import claim_dir

CACHE_VERSION = "2"  # raised when what an encoded split holds changes (2: a lone \r is a space, not a line end)
CACHE_WRITER = "mt-prepare"  # whose marker an encoded split and a teacher's translations carry
# what a cache directory holds: encoded splits, cleaned and distilled pairs, temporary names of those being written
CACHE_ENTRY = re.compile(r"^\.?(teacher-|clean-)?[0-9a-f]{24}(\.[a-z0-9_]{8})?$")


def _hash_file(path: str, digest) -> None:
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)


def cache_key(source: dict, data_files: list[str], tokenizer_files: list[str], settings: dict) -> str:
    digest = hashlib.sha256(CACHE_VERSION.encode())
    digest.update(json.dumps([source, settings], sort_keys=True).encode())
    for path in list(data_files) + list(tokenizer_files):
        _hash_file(path, digest)
    return digest.hexdigest()[:24]


def claim_cache(data: DataConfig) -> None:
    """data.cache_dir, where set, made and marked as the cache's before any work (outputs.claim_dir):
    a protected path, a file, or a non-empty directory that holds anything but cache entries is refused."""
    if data.cache_dir:
        try:
            claim_dir(
                data.cache_dir, CACHE_WRITER, also_ours=lambda path: all(map(CACHE_ENTRY.match, os.listdir(path)))
            )
        except UserError as error:
            raise UserError(f"data.cache_dir: {error}") from None


def cache_directory(data: DataConfig, run_dir: str) -> str:
    """Where a run's encoded data is cached: data.cache_dir, else the run directory's cache/."""
    return data.cache_dir or os.path.join(run_dir, "cache")


def split_source(corpus: CorpusConfig, split: str) -> dict:
    """What identifies a split's pairs beside its files' contents, for cache keys: its format,
    location and languages, the columns of jsonl and hub rows, and for hub data its name and the
    local copy's sizes and times (keys that do not apply to the format leave the key as it is)."""
    source = {
        "format": corpus.format,
        "location": getattr(corpus, split),
        "langs": [corpus.src_lang, corpus.tgt_lang],
    }
    if corpus.format in ("jsonl", "hub"):
        source["columns"] = [corpus.src_column, corpus.tgt_column]
    if corpus.format == "hub":
        source["hub"] = [corpus.hub_name, corpus.hub_config]
        stamp = hub_copy_stamp(corpus.hub_name)
        if stamp is not None:
            source["copy"] = stamp
    return source
