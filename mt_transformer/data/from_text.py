"""The tokenizer settings that a config may leave to the training text: data.character_coverage
0 and data.vocab_size 0."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable

# sentencepiece's advice for character_coverage: 1.0 for languages with a small character set,
# 0.9995 for rich ones such as Chinese or Japanese, whose rarest characters would otherwise each
# take a vocabulary entry. "Rich" here: more than 10% of the characters are Han, kana or Hangul,
# or the text uses more than 1,000 distinct characters (web-crawled data full of stray symbols).
RICH_COVERAGE = 0.9995
RICH_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
RICH_SHARE, RICH_DISTINCT, COVERAGE_SAMPLE = 0.10, 1000, 100_000

# data.vocab_size 0: one piece for every WORDS_PER_PIECE distinct space-separated words of the
# text a model learns from, rounded to a thousand, within VOCAB_RANGE. On the two pairs measured
# (29k and 166k training pairs) it picked whichever of 4,000 and 8,000 pieces learned more per
# update (docs/recipes.md, "A vocabulary sized from the data"); WMT-sized corpora reach the
# ~32,000 pieces usual for them.
WORDS_PER_PIECE, VOCAB_RANGE = 10, (1000, 32_000)


def auto_coverage(sentences: Iterable[str]) -> float:
    """The character coverage for text like `sentences` (the first 100,000 are looked at)."""
    distinct: set[str] = set()
    rich = total = 0
    for sentence in itertools.islice(sentences, COVERAGE_SAMPLE):
        distinct.update(sentence)
        rich += len(RICH_SCRIPT.findall(sentence))
        total += len(sentence) - sentence.count(" ")
    if rich > RICH_SHARE * max(total, 1) or len(distinct) > RICH_DISTINCT:
        return RICH_COVERAGE
    return 1.0


def vocabulary_size_for(sides: list[Iterable[str]], joint: bool, max_sentences: int) -> tuple[int, int]:
    """(the vocabulary size for data.vocab_size 0, the distinct words it comes from): a joint
    model counts the words of both sides together, one model per side those of the side with
    more; each side's first `max_sentences` lines are read."""
    counts = [set() for _ in sides]
    for words, lines in zip(counts, sides):
        for line in itertools.islice(lines, max_sentences):
            words.update(line.split())
    distinct = len(set().union(*counts)) if joint else max(map(len, counts))
    low, high = VOCAB_RANGE
    return min(high, max(low, int(round(distinct / WORDS_PER_PIECE, -3)))), distinct
