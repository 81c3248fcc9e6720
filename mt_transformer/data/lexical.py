"""data.clean.lexical: how well a pair's words translate each other, by IBM Model 1 (Brown et al.,
1993) learned from the corpus's own pairs, both ways. A misaligned pair (a neighbour's target,
another sentence on the same topic) passes every rule of form and language, but its words do not
translate each other: its likelihood per word falls far below the corpus's.

Exact and deterministic: EM from uniform word-translation probabilities, a fixed number of
iterations, a large corpus split into parts by a fixed seed (eflomal, which aligns the words of
train.guided_alignment, samples at random and gives other scores on each run).
"""

from __future__ import annotations

import contextlib
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from mt_transformer.data.clean_rules import UNSPACED, script_of

WORD, LETTER = re.compile(r"\w+"), re.compile(r"\w")  # a word; a letter, the word of a script without spaces
NULL = 0  # the empty word each target word may come from
ITERATIONS = 4
COMMON = 10  # the most frequent words of each language left out
RARE = 20  # the fewest times a word is seen in the pairs learned from to be kept
LINKS = 24_000_000  # the (source word, target word) links of a part at most, as estimated: ~20 bytes each
FLOOR = 1e-7  # the least probability a target word gets
OPEN = 128  # the parts' files written at once, in one pass over the corpus
CHUNK = 1 << 20  # the links an elementwise step takes at once: a temporary of 8 MiB, not 8 bytes a link


class Words:
    """A language's words as ids: the lower-cased words of a line (each letter, for a script
    written without spaces), less those of too little or too much use in the pairs learned from:
    seen under RARE times (Model 1 ties a rare word to whatever stood beside it), or among the
    COMMON most frequent (articles, prepositions: they translate anything, and make most of EM's
    work)."""

    def __init__(self, language: str):
        self.pattern = LETTER if script_of(language) in UNSPACED else WORD

    def learned(self, lines: list[str]) -> tuple[list[np.ndarray], int]:
        """Each line's kept words as ids, and the number of ids (NULL's included)."""
        ids, find = {"": NULL}, self.pattern.findall
        found = [np.array([ids.setdefault(w, len(ids)) for w in find(line.lower())], np.int32) for line in lines]
        counts = np.bincount(np.concatenate([*found, np.zeros(0, np.int32)]), minlength=len(ids))
        kept = counts >= RARE
        kept[np.argsort(-counts, kind="stable")[:COMMON]] = False
        return [words[kept[words]] for words in found], len(ids)


def _links(sources: list[np.ndarray], targets: list[np.ndarray]):
    """Every (source word or NULL, target word) of each pair, target word by target word: per
    link its target position (over all pairs), source id and target id; per target position
    its pair and its source's length with NULL."""
    src_lens = np.array([len(s) + 1 for s in sources], dtype=np.int64)  # with NULL  # (pairs,)
    tgt_lens = np.array([len(t) for t in targets], dtype=np.int64)  # (pairs,)
    src_flat = np.concatenate([np.concatenate(([NULL], s)) for s in sources]).astype(np.int32)
    tgt_flat = np.concatenate([*targets, np.zeros(0, np.int32)]).astype(np.int32)  # (positions,)
    tgt_pair = np.repeat(np.arange(len(targets), dtype=np.int32), tgt_lens)  # (positions,)
    width = src_lens[tgt_pair]  # each target position links to its pair's source words  # (positions,)
    position = np.repeat(np.arange(len(tgt_flat)), width)  # (links,)
    # each link's source word: its pair's first source word, plus its rank among its position's links
    src_word = np.repeat((np.cumsum(src_lens) - src_lens)[tgt_pair] - (np.cumsum(width) - width), width)
    for start in range(0, len(src_word), CHUNK):  # a link's rank over all links, a slice at a time
        src_word[start : start + CHUNK] += np.arange(start, min(start + CHUNK, len(src_word)))
    source = src_flat[src_word]
    del src_word
    return position, source, tgt_flat[position], tgt_pair, width


def _likelihood(sources: list[np.ndarray], targets: list[np.ndarray], size: int) -> np.ndarray:
    """Model 1 from source to target learned by EM from these pairs (`size`: the target ids):
    per pair, the mean over its target words of log P(e | source) = log (sum over f of t(e|f))
    / (source words + 1); NaN where it has none."""
    import pandas as pd  # its hash tables: several times faster than sorting the keys

    position, f, e, tgt_pair, width = _links(sources, targets)
    key = f.astype(np.int64)  # (links,)
    del f
    key *= size
    key += e
    del e
    link, keys = pd.factorize(key)  # (links,), (pairs of words,)
    del key
    source_of = keys // size
    probs, share = np.ones(len(keys)), np.empty(len(link))  # t(e|f), by the key f * size + e; (links,)
    for _ in range(ITERATIONS):  # EM: each link's share of its target word, summed per word pair
        np.take(probs, link, out=share, mode="clip")  # clip: written in place, not through a buffer
        total = np.bincount(position, share)  # (positions,)
        for start in range(0, len(share), CHUNK):
            share[start : start + CHUNK] /= total[position[start : start + CHUNK]]
        counts = np.bincount(link, share, minlength=len(keys))
        probs = counts / np.bincount(source_of, counts)[source_of]
    sums = np.bincount(position, np.take(probs, link, out=share, mode="clip"), minlength=len(tgt_pair))  # (positions,)
    likely = np.log(np.maximum(sums / width, FLOOR))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.bincount(tgt_pair, likely, minlength=len(targets)) / np.bincount(tgt_pair, minlength=len(targets))


def scores(pairs: list[tuple[str, str]], src_lang: str, tgt_lang: str) -> np.ndarray:
    """Per pair, how well its words translate each other: the mean of the two directions'
    log-likelihood per word, by Model 1 both ways learned from these pairs (higher: better)."""
    sources, src_size = Words(src_lang).learned([s for s, _ in pairs])
    targets, tgt_size = Words(tgt_lang).learned([t for _, t in pairs])
    return (_likelihood(sources, targets, tgt_size) + _likelihood(targets, sources, src_size)) / 2


def parts(lengths: np.ndarray, open_: np.ndarray, langs: tuple[str, str]) -> tuple[np.ndarray, int]:
    """Each open pair's part (-1 for the others) and the number of parts: one where the open
    pairs' links fit in LINKS (estimated from the sides' lengths in characters: a word and its
    space ~6, a letter of a script without spaces 1), else as many as they need, each pair's
    drawn by a fixed seed (a run of neighbours would meet a corpus's own order: a site's pages)."""
    rows = np.flatnonzero(open_)
    src, tgt = (lengths[rows, side] / (1 if script_of(lang) in UNSPACED else 6) for side, lang in enumerate(langs))
    count = max(1, math.ceil(float(np.sum((src + 2) * (tgt + 1))) / LINKS))
    part = np.full(len(open_), -1, dtype=np.int32)
    part[rows] = np.random.default_rng(0).integers(count, size=len(rows)) if count > 1 else 0
    return part, count


def _in_turn(batches, part: np.ndarray, count: int, directory: str) -> Iterator[list[tuple[str, str]]]:
    """The pairs of each part in turn, in corpus order: where there are several, each written to
    a file of `directory` first (OPEN files per pass over the corpus), read back and removed."""
    if count == 1:
        yield [pair for pair, k in _with_parts(batches, part) if k == 0]
        return
    for first in range(0, count, OPEN):
        paths = [os.path.join(directory, f"part-{k}") for k in range(first, min(first + OPEN, count))]
        with contextlib.ExitStack() as stack:
            files = [stack.enter_context(open(path, "w", encoding="utf-8", newline="\n")) for path in paths]
            for (s, t), k in _with_parts(batches, part):
                if first <= k < first + len(paths):
                    files[k - first].write(f"{s}\n{t}\n")
        for path in paths:
            with open(path, encoding="utf-8", newline="\n") as f:
                lines = f.read().split("\n")  # a source line, its target line, ..., and "" after the last
            os.remove(path)
            yield list(zip(lines[0:-1:2], lines[1:-1:2]))


def _with_parts(batches, part: np.ndarray) -> Iterator[tuple[tuple[str, str], int]]:
    row = 0
    for batch in batches():
        yield from zip(batch, part[row : row + len(batch)].tolist())
        row += len(batch)


def untranslated(
    batches: Callable[[], Iterable[list[tuple[str, str]]]],
    open_: np.ndarray,
    lengths: np.ndarray,
    langs: tuple[str, str],
    limit: float,
    directory: str,
) -> np.ndarray:
    """A mask of the open pairs (of the pairs `batches()` gives, read once per OPEN parts) whose
    words translate each other `limit` robust standard deviations (1.4826 median absolute
    deviations) under their part's median, each part (`parts`) learned and judged on its own."""
    part, count = parts(lengths, open_, langs)
    worst = np.zeros(len(open_), dtype=bool)
    for k, pairs in enumerate(_in_turn(batches, part, count, directory)):
        score = scores(pairs, *langs)
        if np.isnan(score).all():
            continue
        median = np.nanmedian(score)
        spread = 1.4826 * np.nanmedian(np.abs(score - median))
        if spread > 0:
            worst[np.flatnonzero(part == k)[score < median - limit * spread]] = True
    return worst
