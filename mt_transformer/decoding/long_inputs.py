"""Inputs too long for the model, or for memory, translated in parts: where to cut them (ends of
sentences, then starts of words) and how the parts' hypotheses are joined."""

from __future__ import annotations

import logging

from mt_transformer.data.tokenizer import WORD_START, Tokenizer
from mt_transformer.decoding.constraints import Constraints, split_constraints
from mt_transformer.decoding.search import Hypothesis, output_limit

log = logging.getLogger(__name__)

SENTENCE_ENDS = (".", "!", "?", ";", ":", "。", "！", "？", "؟", "।")


def cut_points(pieces: list[str], limit: int) -> list[int]:
    """Where to cut a subword sequence into parts of at most `limit` (> 1) pieces.

    Within the last half of each window, prefer the end of a sentence, then the start of a word
    (a piece beginning with sentencepiece's "▁"), and cut at the limit only when neither exists.
    """
    cuts, start = [], 0
    while len(pieces) - start > limit:
        window = range(start + limit, start + limit // 2, -1)  # a cut at j ends the part before piece j
        cut = (
            next((j for j in window if pieces[j - 1].endswith(SENTENCE_ENDS)), None)
            or next((j for j in window if pieces[j].startswith(WORD_START)), None)
            or start + limit
        )
        cuts.append(cut)
        start = cut
    return cuts


def split_at(sequence: list[int], cuts: list[int]) -> list[list[int]]:
    bounds = [0, *cuts, len(sequence)]
    return [sequence[a:b] for a, b in zip(bounds, bounds[1:])]


def join_hypotheses(parts: list[list[Hypothesis]]) -> list[Hypothesis]:
    """The k-th joined hypothesis concatenates the k-th of every part (or its last, if it has fewer)."""
    joined = []
    for k in range(max(len(p) for p in parts)):
        chosen = [p[min(k, len(p) - 1)] for p in parts]
        joined.append(
            Hypothesis(
                [t for h in chosen for t in h.tokens], sum(h.score for h in chosen), sum(h.log_prob for h in chosen)
            )
        )
    return joined


def split_input(sequence: list[int], tokenizer: Tokenizer, limit: int) -> list[list[int]]:
    """Parts of at most `limit` subwords; the source tags a sequence begins with begin every part."""
    tag_ids = set(tokenizer.tags.values())
    n = 0
    while n < len(sequence) and sequence[n] in tag_ids:
        n += 1
    head, body = sequence[:n], sequence[n:]
    return [head + part for part in split_at(body, cut_points(tokenizer.src_pieces(body), max(limit - n, 2)))]


def segments_of(
    translator, ids: list[list[int]], forced: list[list[int]] | None, lexical: list[Constraints] | None, first_line: int
) -> tuple[list[list[int]], list[int], list[list[int]], list[Constraints]]:
    """What a translator searches for lines of `ids`: each line whole, or cut where it is longer
    than the model takes; with each part, its line, its prefix (the line's `forced` one for its
    first part) and its share of the line's `lexical` constraints."""
    segments, owners, segment_prefixes = [], [], []
    segment_constraints: list[Constraints] = []
    limit = translator.max_input_len
    for line, sequence in enumerate(ids):
        parts = [sequence]
        if limit and len(sequence) > limit:
            parts = split_input(sequence, translator.tokenizer, limit)
            log.warning(
                "line %d: %d subwords, more than %d: translated in %d parts",
                first_line + line + 1,
                len(sequence),
                limit,
                len(parts),
            )
        segments += parts
        owners += [line] * len(parts)
        segment_prefixes += [forced[line] if forced else []] + [list(translator.leads[1])] * (len(parts) - 1)
        if lexical:
            capacities = [output_limit(len(part), translator.decode, translator.max_positions) for part in parts]
            segment_constraints += split_constraints(lexical[line], capacities, first_line + line)
    return segments, owners, segment_prefixes, segment_constraints
