"""Reading a corpus in windows: their sizes, streams in lockstep, and shards."""

import pytest

from mt_transformer.errors import UserError
from mt_transformer.jobs.windows import FIRST_WINDOW, Shard, read_windows, shard_lines, window_sizes

LINES = [f"line {i}" for i in range(1000)]


def test_windows_start_small_and_double_up_to_the_buffer():
    sizes = window_sizes(10_000)
    assert [next(sizes) for _ in range(8)] == [256, 512, 1024, 2048, 4096, 8192, 10_000, 10_000]
    assert [next(window_sizes(100)) for _ in range(2)] == [100, 100]
    windows = list(read_windows([iter(LINES)], ["the input"], 300))
    assert [len(w.rows) for w in windows] == [FIRST_WINDOW, 300, 300, 144]
    assert [w.first_line for w in windows] == [0, 256, 556, 856]
    assert [row[0] for w in windows for row in w.rows] == LINES


def test_streams_of_different_lengths_are_a_one_line_error_naming_both():
    for short in (0, 1):
        streams = [iter(LINES[:3] if i == short else LINES[:5]) for i in range(2)]
        with pytest.raises(UserError) as error:
            list(read_windows(streams, ["the input", "--prefix: p.txt"], 100))
        assert str(error.value) == f"--prefix: p.txt has {3 if short else 5} lines, the input {5 if short else 3}"


def test_a_shards_lines_add_up_to_the_input():
    for total in (0, 1, 255, 256, 1000, 123_457):
        assert sum(shard_lines(total, 1000, Shard(k, 3)) for k in range(3)) == total
    assert shard_lines(None, 1000, Shard()) is None


def test_a_shard_parses_as_k_of_n():
    assert Shard.parse("2/4") == Shard(2, 4) and Shard(2, 4).takes(6) and not Shard(2, 4).takes(5)
    for text in ("4/4", "x", "1/0", "-1/2"):
        with pytest.raises(UserError, match="--shard"):
            Shard.parse(text)
