"""Encoding a split into subword ids with `datasets.map`, cached on disk.

The cache key hashes the data (file contents for local files; name, config and split for hub
data, with the files' sizes and times for a local copy of it), the tokenizer model files and
the cleaning settings, so a second run with the same inputs loads the encoded Arrow files
instead of encoding again.
"""

from __future__ import annotations

import json
import logging
import os

import datasets
import numpy as np
import pyarrow as pa
from datasets.table import InMemoryTable

from mt_transformer.config import CorpusConfig, DataConfig, corpus_keys
from mt_transformer.data.batching import corpus_shares
from mt_transformer.data.cache import CACHE_WRITER, cache_directory, cache_key, split_source
from mt_transformer.data.corpus import drop_empty, load_pairs, quiet_datasets
from mt_transformer.data.languages import language_scheme
from mt_transformer.data.run_tokenizer import run_tokenizer
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.data.word_alignment import align_words, flat
from mt_transformer.files import write_text
from mt_transformer.outputs import atomic_dir, check_output

log = logging.getLogger(__name__)


class SubwordEncoder:
    """A picklable batch function for `datasets.map` and the training loader: loads the tokenizer
    of `directory` lazily in each worker. Source tags at the start of a line keep their own ids.
    `alpha` > 0 draws a segmentation per call (subword regularization: unigram sampling with
    smoothing alpha, or BPE-dropout with probability alpha); with a `seed`, the draws of that call
    are those of the seed, in whichever process or order the calls run. `leads`: the ids each
    source and each target begins with (language tokens, data.language_tokens)."""

    def __init__(self, directory: str, alpha: float = 0.0, leads: tuple[list[int], list[int]] = ([], [])):
        self.directory, self.alpha, self.leads = directory, alpha, leads
        self._tokenizer = None

    def __getstate__(self):
        return {"directory": self.directory, "alpha": self.alpha, "leads": self.leads, "_tokenizer": None}

    def __call__(self, batch: dict, seed: int | None = None) -> dict:
        import sentencepiece as spm

        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self.directory)
        sampling = {"enable_sampling": True, "alpha": self.alpha, "nbest_size": -1} if self.alpha > 0 else {}
        if sampling and seed is not None:
            spm.set_random_generator_seed(seed)
        src = self._tokenizer.encode_src(batch["src"], **sampling)
        tgt = self._tokenizer.encode_tgt(batch["tgt"], **sampling)
        if any(self.leads):
            src, tgt = ([lead + ids for ids in side] for lead, side in zip(self.leads, (src, tgt)))
        return {"src_ids": src, "tgt_ids": tgt, "src_len": [len(s) for s in src], "tgt_len": [len(t) for t in tgt]}


FEATURES = datasets.Features(
    {
        "src_ids": datasets.Sequence(datasets.Value("int32")),
        "tgt_ids": datasets.Sequence(datasets.Value("int32")),
        "src_len": datasets.Value("int32"),
        "tgt_len": datasets.Value("int32"),
    }
)


def encode_split(
    load,
    cache_dir: str,
    key: str,
    tokenizer_dir: str,
    training: bool,
    max_len: int,
    max_ratio: float,
    num_proc: int,
    keep_text: bool = False,
    leads: tuple[list[int], list[int]] = ([], []),
    align=None,
) -> tuple[datasets.Dataset, dict]:
    """Return the encoded split and its cleaning counts, from the cache when it is there.

    `load()` returns the normalized `src`/`tgt` Dataset; it is only called on a cache miss.
    Training data loses empty pairs, pairs longer than `max_len` subwords on either side and
    pairs whose length ratio exceeds `max_ratio`; other splits keep every line. Training data
    keeps its text only with `keep_text` (to draw segmentations from it). `leads`: the ids each
    source and target begins with, as SubwordEncoder takes them. `align(sources, targets)`: the
    word pairs of each training pair, kept flat in an `alignment` column (train.guided_alignment).
    """
    path = os.path.join(cache_dir, key)
    if os.path.isfile(os.path.join(path, "stats.json")):
        with open(os.path.join(path, "stats.json"), encoding="utf-8") as f:
            stats = json.load(f)
        return datasets.load_from_disk(path), {**stats, "cached": True}

    check_output(path, CACHE_WRITER)
    pairs = load()
    stats = {"pairs": len(pairs), "empty": 0, "too_long": 0, "bad_ratio": 0}
    if training:
        pairs, stats["empty"] = drop_empty(pairs)
    # other splits keep their text: validation translates it and scores against it
    keep_text = keep_text or not training
    text_for_now = keep_text or align is not None
    features = datasets.Features({**pairs.features, **FEATURES}) if text_for_now else FEATURES
    encoded = pairs.map(
        SubwordEncoder(tokenizer_dir, leads=leads),
        batched=True,
        num_proc=num_proc if num_proc > 1 else None,
        remove_columns=None if text_for_now else pairs.column_names,
        features=features,
    )
    if training:
        encoded = _cleaned(encoded, max_len, max_ratio, stats)
    if training and align is not None:
        kept = encoded.with_format("arrow")[:]  # the kept rows as one table, taken once
        found = align(kept["src"].to_pylist(), kept["tgt"].to_pylist())  # lists: a Column read row by row is slow
        stats["aligned"] = sum(1 for pairs in found if pairs)
        links = pa.array([flat(pairs) for pairs in found], type=pa.list_(pa.int16()))
        # the links beside the rows: Dataset.add_column would hash the column and copy the rows again
        encoded = datasets.Dataset(InMemoryTable(kept.append_column("alignment", links)))
        if not keep_text:
            encoded = encoded.remove_columns(list(pairs.column_names))
    stats["kept"] = len(encoded)

    with atomic_dir(path, written_by=CACHE_WRITER) as tmp:
        encoded.save_to_disk(tmp)
        write_text(os.path.join(tmp, "stats.json"), json.dumps(stats))
    return datasets.load_from_disk(path), {**stats, "cached": False}


def _cleaned(encoded: datasets.Dataset, max_len: int, max_ratio: float, stats: dict) -> datasets.Dataset:
    """Training pairs without those longer than `max_len` subwords on a side or whose lengths differ
    by more than `max_ratio` times; counted in `stats`. Decided on the length columns at once
    (numpy), kept rows selected by index."""
    lengths = encoded.select_columns(["src_len", "tgt_len"]).with_format("numpy")[:]
    src, tgt = lengths["src_len"], lengths["tgt_len"]  # (pairs,)
    fits = (src > 0) & (src <= max_len) & (tgt > 0) & (tgt <= max_len)
    in_ratio = np.maximum(src, tgt) <= max_ratio * np.minimum(src, tgt)
    stats["too_long"] = int((~fits).sum())
    stats["bad_ratio"] = int((fits & ~in_ratio).sum())
    return encoded.select(np.flatnonzero(fits & in_ratio))


def prepare_data(
    data: DataConfig,
    run_dir: str,
    seed: int,
    splits=("train", "valid"),
    train_from: dict[str, CorpusConfig] | None = None,
    aligned: bool = False,
):
    """Train (or reuse) the run's tokenizer and encode the splits of every corpus; with `aligned`,
    the training pairs also get their word alignments (train.guided_alignment).

    `train_from`: for a corpus key (as corpus_keys names it), the corpus its training pairs are
    read from instead (the distilled pairs of a teacher, training/teacher.py).
    Returns (tokenizer, {split: encoded Dataset}, the number of training pairs of each corpus);
    a split of several corpora is their concatenation, in the order of data.corpora.
    """
    quiet_datasets()  # also for loading the cache
    train_from = train_from or {}
    tokenizer = run_tokenizer(data, run_dir, seed, train_from)
    cache_dir = cache_directory(data, run_dir)
    encoded, sizes = {}, []
    for split in splits:
        parts = []
        for corpus, key in corpus_keys(data):
            if getattr(corpus, split) is None:
                continue
            if split == "train":
                corpus = train_from.get(key, corpus)
            parts.append(encode_corpus_split(data, corpus, key, split, cache_dir, tokenizer, aligned))
        if parts:
            encoded[split] = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
        if split == "train":
            sizes = [len(part) for part in parts]
    if len(sizes) > 1:
        shares = corpus_shares(sizes, data.sampling_temperature)
        log.info(
            "each epoch: %s (data.sampling_temperature %g)",
            ", ".join(
                f"{c.src_lang}->{c.tgt_lang}{f' {c.tag}' if c.tag else ''} {share:.1%}"
                for c, share in zip(data.corpus_list(), shares)
            ),
            data.sampling_temperature,
        )
    return tokenizer, encoded, sizes


def encode_corpus_split(
    data: DataConfig, corpus: CorpusConfig, key: str, split: str, cache_dir: str, tokenizer: Tokenizer, aligned=False
):
    training = split == "train"
    align = None
    if training and aligned:  # the words of the source after its tags

        def align(sources, targets):
            return align_words([" ".join(w for w in s.split() if w not in tokenizer.tags) for s in sources], targets)

    tags = corpus.source_tags(data.target_tags)
    # NLLB's and M2M100's layout: each side begins with its language's token (data/languages.py)
    leads = language_scheme(data, tokenizer).token_leads(
        corpus.src_lang, corpus.tgt_lang, ("data.src_lang", "data.tgt_lang")
    )
    source = {**split_source(corpus, split), "tags": tags, "leads": leads}
    # subword regularization draws from the text, and data.augment changes it
    keep_text = training and (data.spm_alpha > 0 or data.augment_of(corpus).active)
    cleaning = {"training": training, "max_len": data.max_len, "max_ratio": data.max_ratio, "text": keep_text}
    if align is not None:
        cleaning["aligned"] = True
    dataset, stats = encode_split(
        lambda: with_tags(load_pairs(corpus, split, f"{key}.{split}"), tags),
        cache_dir,
        cache_key(source, corpus.files(split), tokenizer.paths(), cleaning),
        tokenizer.directory,
        training,
        data.max_len,
        data.max_ratio,
        data.num_proc,
        keep_text,
        leads,
        align,
    )
    origin = "cache" if stats["cached"] else "encoded"
    name = split if key == "data" else f"{key} {split}"
    if training:
        log.info(
            "%s: %d pairs (%s%s), dropped %d empty, %d longer than %d subwords, %d with length ratio over %g",
            name,
            stats["kept"],
            origin,
            f", {stats['aligned']} word-aligned" if "aligned" in stats else "",
            stats["empty"],
            stats["too_long"],
            data.max_len,
            stats["bad_ratio"],
            data.max_ratio,
        )
    else:
        log.info("%s: %d pairs (%s)", name, stats["kept"], origin)
    return dataset


def with_tags(pairs: datasets.Dataset, tags: list[str]) -> datasets.Dataset:
    """The pairs with `tags` before each source sentence (empty sources stay empty: cleaning drops them)."""
    if not tags:
        return pairs
    head = " ".join(tags) + " "
    return pairs.map(lambda b: {"src": [head + s if s else s for s in b["src"]]}, batched=True)
