"""Inputs too long for the model translated in parts: the cuts, the joined hypotheses, and source
tags at the start of every part."""

from mt_transformer.decoding.long_inputs import cut_points, join_hypotheses, split_at, split_input
from mt_transformer.decoding.search import Hypothesis


def test_cut_points_prefer_sentence_ends_then_word_starts():
    pieces = ["▁Das", "▁ist", "▁gut", ".", "▁Und", "▁das", "▁auch", "▁hier", "▁und", "▁dort"]
    assert cut_points(pieces, 5) == [4, 9]  # after "." (not at the limit, 5), then before the last word
    assert cut_points(pieces, 6) == [4]
    assert cut_points(pieces, 10) == []
    # no spaces (Japanese): the sentence end "。" still marks a cut; otherwise cut at the limit
    assert cut_points(["今日", "は", "晴れ", "。", "明日", "は", "雨", "です"], 5) == [4]
    assert cut_points(list("abcdefghij"), 4) == [4, 8]


def test_split_at_and_join_hypotheses():
    assert split_at([1, 2, 3, 4, 5], [2, 4]) == [[1, 2], [3, 4], [5]]
    joined = join_hypotheses(
        [[Hypothesis([7], -1.0, -2.0), Hypothesis([8], -3.0, -4.0)], [Hypothesis([9, 10], -0.5, -1.0)]]
    )
    assert [h.tokens for h in joined] == [[7, 9, 10], [8, 9, 10]]
    assert joined[0].log_prob == -3.0 and joined[1].score == -3.5


class TaggedTokenizer:
    """Pieces "▁w<id>" for word ids and the tag <2en> as id 4."""

    tags = {"<2en>": 4}

    def src_pieces(self, ids):
        return ["<2en>" if i == 4 else f"▁w{i}" for i in ids]


def test_every_part_of_a_tagged_input_begins_with_its_tags():
    sequence = [4] + list(range(10, 20))  # the tag, then 10 words
    parts = split_input(sequence, TaggedTokenizer(), limit=6)
    assert all(part[0] == 4 and len(part) <= 6 for part in parts)
    assert [i for part in parts for i in part[1:]] == list(range(10, 20))  # every word once, in order
    untagged = split_input(list(range(10, 20)), TaggedTokenizer(), limit=6)
    assert untagged == split_at(list(range(10, 20)), cut_points([f"▁w{i}" for i in range(10, 20)], 6))
