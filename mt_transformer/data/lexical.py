"""data.clean.lexical: how well a pair's words translate each other, by IBM Model 1 (Brown et al.,
1993) learned from the corpus's own pairs, both ways. A misaligned pair (a neighbour's target,
another sentence on the same topic) passes every rule of form and language, but its words do not
translate each other: its likelihood per word falls far below the corpus's.

Exact and deterministic: EM from uniform word-translation probabilities, a fixed number of
iterations, the pairs it learns from drawn by a fixed seed (eflomal, which aligns the words of
train.guided_alignment, samples at random and gives other scores on each run).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np

from mt_transformer.data.clean_rules import UNSPACED, script_of

WORD, LETTER = re.compile(r"\w+"), re.compile(r"\w")  # a word; a letter, the word of a script without spaces
NULL, UNKNOWN = 0, 1  # the empty word each target word may come from; a word never seen while learning
ITERATIONS = 4
COMMON = 10  # the most frequent words of each language left out
RARE = 20  # the fewest times a word is seen in the pairs learned from to be kept
LINKS = 8_000_000  # the (source word, target word) links EM learns from at most: ~80 bytes each
FLOOR = 1e-7  # the least probability a target word gets


class Words:
    """A language's words as ids: the lower-cased words of a line (each letter, for a script
    written without spaces), less those of too little or too much use in the pairs learned from:
    seen under RARE times (Model 1 ties a rare word to whatever stood beside it, so the pairs it
    learned from would score above those it looks up), or among the COMMON most frequent
    (articles, prepositions: they translate anything, and make most of EM's work)."""

    def __init__(self, language: str):
        self.pattern = LETTER if script_of(language) in UNSPACED else WORD
        self.ids: dict[str, int] = {"": NULL, "\0": UNKNOWN}
        self.kept = np.zeros(2, dtype=bool)

    def _ids(self, lines: list[str], learning: bool) -> list[np.ndarray]:
        ids, find = self.ids, self.pattern.findall
        if learning:
            return [np.array([ids.setdefault(w, len(ids)) for w in find(line.lower())], np.int64) for line in lines]
        return [np.array([ids.get(w, UNKNOWN) for w in find(line.lower())], np.int64) for line in lines]

    def learned(self, lines: list[str]) -> list[np.ndarray]:
        found = self._ids(lines, learning=True)
        counts = np.bincount(np.concatenate([*found, np.zeros(0, np.int64)]), minlength=len(self.ids))
        self.kept = counts >= RARE
        self.kept[np.argsort(-counts, kind="stable")[:COMMON]] = False
        return [words[self.kept[words]] for words in found]

    def known(self, lines: list[str]) -> list[np.ndarray]:
        return [words[self.kept[words]] for words in self._ids(lines, learning=False)]


def _links(sources: list[np.ndarray], targets: list[np.ndarray]):
    """Every (source word or NULL, target word) of each pair, target word by target word: per
    link its target position (over all pairs), source id and target id; per target position
    its pair and its source's length with NULL."""
    src_lens = np.array([len(s) + 1 for s in sources], dtype=np.int64)  # with NULL  # (pairs,)
    tgt_lens = np.array([len(t) for t in targets], dtype=np.int64)  # (pairs,)
    src_flat = np.concatenate([np.concatenate(([NULL], s)) for s in sources]).astype(np.int64)
    tgt_flat = np.concatenate([*targets, np.zeros(0)]).astype(np.int64)  # (positions,)
    tgt_pair = np.repeat(np.arange(len(targets)), tgt_lens)  # (positions,)
    width = src_lens[tgt_pair]  # each target position links to its pair's source words  # (positions,)
    position = np.repeat(np.arange(len(tgt_flat)), width)  # (links,)
    first = np.repeat(np.cumsum(width) - width, width)  # the position's first link  # (links,)
    src_word = np.repeat((np.cumsum(src_lens) - src_lens)[tgt_pair], width) + np.arange(len(position)) - first
    return position, src_flat[src_word], tgt_flat[position], tgt_pair, width


class Translations:
    """One direction's word-translation probabilities t(e|f), by the key f * size + e, and the
    log-likelihood per word of the pairs they were learned from."""

    def __init__(self, sources: list[np.ndarray], targets: list[np.ndarray], size: int):
        import pandas as pd  # its hash tables: several times faster than sorting the keys

        position, f, e, tgt_pair, width = _links(sources, targets)
        self.size = size
        link, keys = pd.factorize(f * size + e)  # (links,), (pairs of words,)
        self.keys = pd.Index(keys)
        source_of = keys // size
        probs = np.ones(len(keys))
        for _ in range(ITERATIONS):  # EM: each link's share of its target word, summed per word pair
            p = probs[link]
            share = p / np.bincount(position, p)[position]
            counts = np.bincount(link, share, minlength=len(keys))
            probs = counts / np.bincount(source_of, counts)[source_of]
        self.probs = np.append(probs, 0.0)  # [-1]: a pair of words never seen together
        self.learned = _per_word(probs[link], position, tgt_pair, width, targets)

    def per_word(self, sources: list[np.ndarray], targets: list[np.ndarray]) -> np.ndarray:
        position, f, e, tgt_pair, width = _links(sources, targets)
        return _per_word(self.probs[self.keys.get_indexer(f * self.size + e)], position, tgt_pair, width, targets)


def _per_word(p: np.ndarray, position, tgt_pair, width, targets: list[np.ndarray]) -> np.ndarray:
    """Per pair, the mean over its target words of log P(e | source) = log (sum over f of t(e|f))
    / (source words + 1), from each link's t(e|f) `p`; NaN where it has none."""
    likely = np.log(np.maximum(np.bincount(position, p, minlength=len(tgt_pair)) / width, FLOOR))
    total = np.bincount(tgt_pair, likely, minlength=len(targets))
    with np.errstate(invalid="ignore", divide="ignore"):
        return total / np.bincount(tgt_pair, minlength=len(targets))


class Lexicon:
    """IBM Model 1 both ways, learned from a corpus's pairs: a pair's score is the mean of the two
    directions' log-likelihood per word (higher: its words translate each other). `learned`:
    the scores of the pairs it learned from."""

    def __init__(self, pairs: list[tuple[str, str]], src_lang: str, tgt_lang: str):
        self.src, self.tgt = Words(src_lang), Words(tgt_lang)
        sources, targets = self.src.learned([s for s, _ in pairs]), self.tgt.learned([t for _, t in pairs])
        self.forward = Translations(sources, targets, len(self.tgt.ids))
        self.backward = Translations(targets, sources, len(self.src.ids))
        self.learned = (self.forward.learned + self.backward.learned) / 2

    def scores(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        sources, targets = self.src.known([s for s, _ in pairs]), self.tgt.known([t for _, t in pairs])
        return (self.forward.per_word(sources, targets) + self.backward.per_word(targets, sources)) / 2


def sample(lengths: np.ndarray, open_: np.ndarray) -> np.ndarray:
    """A mask of the open pairs to learn from: all of them where their links fit in LINKS (estimated
    from the sides' lengths in characters, a word and its space ~6), else as many as fit, drawn
    by a fixed seed (a stride would meet a corpus's own periods: a site's pages, a repeated file)."""
    rows = np.flatnonzero(open_)
    links = float(np.sum((lengths[rows, 0] / 6 + 2) * (lengths[rows, 1] / 6 + 1)))
    if links > LINKS:
        rows = np.sort(np.random.default_rng(0).choice(rows, int(len(rows) * LINKS / links), replace=False))
    mask = np.zeros(len(open_), dtype=bool)
    mask[rows] = True
    return mask


def untranslated(
    batches: Callable[[], Iterable[list[tuple[str, str]]]], open_: np.ndarray, lengths: np.ndarray, langs, limit: float
) -> np.ndarray:
    """A mask of the open pairs (of the pairs `batches()` gives, read twice) whose words translate
    each other `limit` robust standard deviations (1.4826 median absolute deviations) under the
    median: Model 1 both ways learned from the open pairs, or a draw of them (`sample`)."""
    learned = sample(lengths, open_)
    pairs, row = [], 0
    for batch in batches():
        pairs += [pair for pair, take in zip(batch, learned[row : row + len(batch)]) if take]
        row += len(batch)
    lexicon = Lexicon(pairs, *langs)
    scores = np.full(len(open_), np.nan, dtype=np.float32)
    scores[learned] = lexicon.learned
    rest, row = open_ & ~learned, 0
    for batch in batches() if rest.any() else ():  # the pairs it did not learn from, looked up
        rows = np.flatnonzero(rest[row : row + len(batch)])
        if len(rows):
            scores[row + rows] = lexicon.scores([batch[i] for i in rows])
        row += len(batch)
    worst = np.zeros(len(open_), dtype=bool)
    for group in (learned, rest):  # a model scores the pairs it learned from higher: each group apart
        if not group.any():
            continue
        median = np.nanmedian(scores[group])
        spread = 1.4826 * np.nanmedian(np.abs(scores[group] - median))
        if spread > 0:
            worst |= group & (scores < median - limit * spread)
    return worst
