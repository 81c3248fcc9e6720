import numpy as np
import pytest

from mt_transformer.data.batching import (
    collate,
    corpus_rows,
    corpus_shares,
    encoder_input,
    token_batches,
)
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


def lengths(n=500, seed=0):
    """Source lengths and correlated target lengths, as in real parallel text."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 60, n)
    return src, np.maximum(1, src + rng.integers(-3, 4, n))


def padded_size(batch, src, tgt):
    return len(batch) * max(src[batch].max() + 1, tgt[batch].max() + 1)


def test_every_example_exactly_once_and_no_batch_over_budget():
    src, tgt = lengths()
    for epoch in range(3):
        batches = token_batches(src, tgt, max_tokens=400, seed=1, epoch=epoch)
        seen = np.concatenate(batches)
        assert sorted(seen.tolist()) == list(range(len(src)))
        assert all(padded_size(b, src, tgt) <= 400 for b in batches)


def test_length_grouping_keeps_padding_low():
    src, tgt = lengths(2000)
    batches = token_batches(src, tgt, max_tokens=2000, seed=1)
    real = sum(int(np.maximum(src[b] + 1, tgt[b] + 1).sum()) for b in batches)
    padded = sum(padded_size(b, src, tgt) for b in batches)
    assert 1 - real / padded < 0.1


def test_seeded_epochs_are_reproducible_and_differ():
    src, tgt = lengths()
    first = token_batches(src, tgt, 400, seed=5, epoch=0)
    again = token_batches(src, tgt, 400, seed=5, epoch=0)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    other = token_batches(src, tgt, 400, seed=5, epoch=1)
    assert [a.tolist() for a in first] != [b.tolist() for b in other]


def test_unshuffled_batches_are_sorted_by_length():
    src, tgt = lengths()
    order = np.concatenate(token_batches(src, tgt, 400, shuffle=False))
    assert np.all(np.diff(tgt[order]) >= 0)


def test_an_example_over_the_budget_is_an_error():
    with pytest.raises(ValueError, match="exceeds max_tokens"):
        token_batches(np.array([10, 500]), np.array([10, 20]), 100)


def test_collate_adds_specials_and_pads():
    batch = collate([[5, 6], [7]], [[8], [9, 10, 11]])
    assert batch.src.tolist() == [[5, 6, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 8, PAD_ID, PAD_ID], [BOS_ID, 9, 10, 11]]
    assert batch.tgt_out.tolist() == [[8, EOS_ID, PAD_ID, PAD_ID], [9, 10, 11, EOS_ID]]
    assert batch.target_tokens == 6


def test_split_keeps_every_row_once_and_trims_padding():
    batch = collate([[5, 6, 7, 8], [5], [6, 7], [9]], [[4], [4, 5, 6], [4, 5], [7]])
    parts = batch.split(2)
    assert [p.size for p in parts] == [2, 2]
    assert parts[0].src.tolist() == [[5, 6, 7, 8, EOS_ID], [5, EOS_ID, PAD_ID, PAD_ID, PAD_ID]]
    assert parts[1].src.tolist() == [[6, 7, EOS_ID], [9, EOS_ID, PAD_ID]]  # trimmed to its own longest
    assert parts[1].tgt_in.tolist() == [[BOS_ID, 4, 5], [BOS_ID, 7, PAD_ID]]
    assert parts[1].tgt_out.tolist() == [[4, 5, EOS_ID], [7, EOS_ID, PAD_ID]]
    assert sum(p.target_tokens for p in parts) == batch.target_tokens
    assert [p.size for p in batch.split(3)] == [2, 2]  # ceiling: never more pieces than asked
    assert [p.size for p in batch.split(4)] == [1, 1, 1, 1]


def test_lengths_reads_whole_columns_as_arrays_and_respects_a_selection():
    import datasets

    from mt_transformer.data.batching import lengths as column_lengths

    dataset = datasets.Dataset.from_dict({"src_len": [3, 1, 4, 1, 5], "tgt_len": [9, 2, 6, 5, 3], "src": list("abcde")})
    src, tgt = column_lengths(dataset.select([4, 0, 2]))
    assert src.dtype == np.int64 and src.tolist() == [5, 3, 4] and tgt.tolist() == [3, 9, 6]


def test_corpus_rows_follow_the_temperature():
    sizes = [9000, 1000]
    assert corpus_rows(sizes, temperature=1.0) is None  # the sizes' own proportions: each row once
    assert corpus_rows([500], temperature=5.0) is None
    rows = corpus_rows(sizes, temperature=5.0, seed=1, epoch=0)
    assert len(rows) == 10_000
    first = int((rows < 9000).sum())
    share = 0.9**0.2 / (0.9**0.2 + 0.1**0.2)  # (9000/10000) ** (1/5) normalised: 0.61
    assert abs(first - share * 10_000) <= 1
    second = rows[rows >= 9000]
    assert np.unique(second).size == 1000  # drawn more often than its size: every row, some twice or more
    assert np.unique(rows[rows < 9000]).size == first  # drawn less often: distinct rows
    assert np.array_equal(rows, corpus_rows(sizes, 5.0, seed=1, epoch=0))
    assert not np.array_equal(rows, corpus_rows(sizes, 5.0, seed=1, epoch=1))
    assert np.allclose(corpus_shares([10, 10, 0], 2.0), [0.5, 0.5, 0.0])
    assert len(corpus_rows([10, 0, 30], 2.0)) == 40  # an empty corpus (everything cleaned away) gives nothing


def test_a_legacy_layout_source_reads_its_language_token_after_eos():
    assert encoder_input([9, 5, 6]) == [9, 5, 6, EOS_ID]
    assert encoder_input([9, 5, 6], tag_after_eos=True) == [5, 6, EOS_ID, 9]
    batch = collate([[9, 5, 6], [8, 7]], [[4], [4]], tag_after_eos=True)
    assert batch.src.tolist() == [[5, 6, EOS_ID, 9], [7, EOS_ID, 8, PAD_ID]]
