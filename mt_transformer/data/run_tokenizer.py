"""A run's tokenizer: the one already in its directory, if trained with the config's settings,
or one trained on the run's training pairs (their capitals included where data.augment will add
them), its settings written beside it."""

from __future__ import annotations

import json
import logging
import os

import datasets

from mt_transformer.config import CorpusConfig, DataConfig, corpus_keys
from mt_transformer.data.augment import TokenizerSample
from mt_transformer.data.corpus import ColumnLines, drop_empty, load_pairs
from mt_transformer.data.from_text import vocabulary_size_for
from mt_transformer.data.sentencepiece_training import train_tokenizer
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.files import read_json, write_text

log = logging.getLogger(__name__)

TOKENIZER_SETTINGS = "tokenizer.json"  # the settings a run's tokenizer was trained with


def training_pairs(data: DataConfig, train_from: dict[str, CorpusConfig] | None = None) -> datasets.Dataset:
    """Every corpus's non-empty training pairs, untagged: the text the tokenizer learns from."""
    corpora = [((train_from or {}).get(key, c), key) for c, key in corpus_keys(data)]
    parts = [drop_empty(load_pairs(c, "train", f"{key}.train"))[0] for c, key in corpora]
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def _with_augmented_lines(data: DataConfig, src, tgt, seed: int):
    """Each side's lines, with the capitals and tags data.augment will give the training pairs
    (data/augment.py), so that sentencepiece learns pieces for them; a folded source has no capitals."""
    augment = [data.augment_of(corpus) for corpus in data.corpus_list()]
    upper, title = max(a.upper_case for a in augment), max(a.title_case for a in augment)
    inline = max(a.inline_tags for a in augment)
    if data.fold_source_case:
        upper = title = 0.0
    if upper or title or inline:
        src = TokenizerSample(src, upper, title, seed, data.tags, inline)
    cased = [a for a in augment if a.case_target]  # the corpora whose targets get capitals too
    tgt_upper = max((a.upper_case for a in cased), default=0.0)
    tgt_title = max((a.title_case for a in cased), default=0.0)
    if tgt_upper or tgt_title or inline:
        tgt = TokenizerSample(tgt, tgt_upper, tgt_title, seed + 1, inline=inline)
    return src, tgt


def run_tokenizer(
    data: DataConfig, run_dir: str, seed: int, train_from: dict[str, CorpusConfig] | None = None
) -> Tokenizer:
    """The run directory's tokenizer if its settings match the config (else a one-line error),
    or a new one trained on the training pairs."""
    settings = data.tokenizer_settings()
    settings_path = os.path.join(run_dir, TOKENIZER_SETTINGS)
    if Tokenizer.exists(run_dir) and os.path.isfile(settings_path):
        conflict = data.tokenizer_conflict(read_json(settings_path, "the run's tokenizer settings"))
        if conflict:
            key, value, saved = conflict
            raise UserError(
                f"{key}: {value!r} differs from the tokenizer already in {run_dir} ({saved!r}); "
                f"use a new train.output_dir"
            )
        return Tokenizer(run_dir)
    pairs = training_pairs(data, train_from)
    if len(pairs) == 0:
        where = "data.corpora: their train splits" if data.corpora else f"data.train: {data.train}"
        raise UserError(f"{where}: no pair has text on both sides")
    src, tgt = ColumnLines(pairs, "src"), ColumnLines(pairs, "tgt")
    size = data.vocab_size
    if not size:
        size, words = vocabulary_size_for([src, tgt], data.joint_vocab, data.spm_max_sentences)
        log.info("data.vocab_size: %d (sized from the data: %d distinct words)", size, words)
    src, tgt = _with_augmented_lines(data, src, tgt, seed)
    log.info(
        "training sentencepiece (%s, vocab %d, %s) on %d pairs",
        data.spm_type,
        size,
        "joint" if data.joint_vocab else "one per side",
        len(pairs),
    )
    tokenizer = train_tokenizer(
        run_dir,
        src,
        tgt,
        data.joint_vocab,
        size,
        data.spm_type,
        data.character_coverage,
        data.spm_max_sentences,
        seed,
        data.byte_fallback,
        data.tags,
        exact_size=bool(data.vocab_size),
        fold_source=data.fold_source_case,
    )
    write_text(settings_path, json.dumps({**settings, "vocab_size": size}, indent=2))
    return tokenizer


def chosen_vocab_size(run_dir: str) -> int:
    """The vocabulary size the run's tokenizer was trained for (data.vocab_size, or the size
    that data.vocab_size 0 chose from the data)."""
    return read_json(os.path.join(run_dir, TOKENIZER_SETTINGS), "the run's tokenizer settings")["vocab_size"]


def has_run_tokenizer(run_dir: str) -> bool:
    """Whether `run_dir` holds a tokenizer a run trained (or adopted), with its settings."""
    return Tokenizer.exists(run_dir) and os.path.isfile(os.path.join(run_dir, TOKENIZER_SETTINGS))
