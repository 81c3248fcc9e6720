"""Corpus jobs without a model: windows, continuing a partial output, refusing a changed one,
gzip members, shards and their merge, and a signal that stops after the current window."""

import gzip
import json
import os
import signal

import pytest

from mt_transformer.decoding.corpus_files import merge_shards
from mt_transformer.decoding.corpus_job import (
    FIRST_WINDOW,
    CorpusJob,
    JobStopped,
    Shard,
    read_windows,
    shard_lines,
    window_sizes,
)
from mt_transformer.errors import UserError

LINES = [f"line {i}" for i in range(1000)]


def upper(window, advance) -> list[str]:
    advance(len(window.rows) // 2)
    return [row[0].upper() + "\n" for row in window.rows]


def run(output, lines=LINES, work=upper, buffer_lines=100, shard=Shard(), restart=False, settings=None):
    job = CorpusJob(output, settings or {"--beam": 4}, buffer_lines, shard, restart)
    job.run(read_windows([iter(lines)], ["the input"], buffer_lines), work, len(lines), progress=False)


def expected(lines=LINES) -> bytes:
    return "".join(line.upper() + "\n" for line in lines).encode()


def failing_after(windows: int):
    """Work that raises in window `windows`, as a kill would interrupt it."""

    def work(window, advance):
        if window.index == windows:
            raise RuntimeError("killed")
        return upper(window, advance)

    return work


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


def test_an_interrupted_job_continues_and_ends_byte_identical(tmp_path):
    whole, resumed = tmp_path / "whole.txt", tmp_path / "resumed.txt"
    run(str(whole))
    assert whole.read_bytes() == expected()
    assert sorted(os.listdir(tmp_path)) == ["whole.txt"]  # no partial file or record left
    with pytest.raises(RuntimeError):
        run(str(resumed), work=failing_after(3))
    record = json.loads((tmp_path / "resumed.txt.progress.json").read_text())
    assert [w["lines"] for w in record["windows"]] == [100, 100, 100]
    assert not resumed.exists()
    # a crash between a window's write and its record: the extra bytes are cut away
    with open(f"{resumed}.partial", "ab") as f:
        f.write(b"HALF A WINDO")
    seen = []

    def counting(window, advance):
        seen.append(window.index)
        return upper(window, advance)

    run(str(resumed), work=counting)
    assert seen == list(range(3, 10))  # the three windows done are not translated again
    assert resumed.read_bytes() == whole.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["resumed.txt", "whole.txt"]


def test_a_partial_output_of_other_settings_or_input_is_refused_by_name(tmp_path):
    out = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        run(str(out), work=failing_after(2))
    with pytest.raises(UserError, match=r"out.txt.partial: begun with --beam 4, now 5; run it as before"):
        run(str(out), settings={"--beam": 5})
    with pytest.raises(UserError, match=r"begun with --buffer-lines 100, now 200"):
        run(str(out), buffer_lines=200)
    changed = LINES[:150] + ["another line"] + LINES[151:]
    with pytest.raises(UserError, match=r"the input differs from the one it was begun with \(at line 101\)"):
        run(str(out), lines=changed)
    run(str(out), lines=changed, restart=True)
    assert out.read_bytes() == expected(changed)


def test_an_error_in_the_first_window_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        run(str(tmp_path / "out.txt"), work=failing_after(0))
    assert os.listdir(tmp_path) == []


def test_gzip_output_is_one_member_per_window_and_continues_byte_identical(tmp_path):
    whole, resumed = tmp_path / "whole.txt.gz", tmp_path / "resumed.txt.gz"
    run(str(whole))
    assert gzip.decompress(whole.read_bytes()) == expected()
    with pytest.raises(RuntimeError):
        run(str(resumed), work=failing_after(4))
    run(str(resumed))
    assert resumed.read_bytes() == whole.read_bytes()


@pytest.mark.parametrize("name", ["out.txt", "out.txt.gz"])
def test_shards_merge_to_the_unsharded_output(tmp_path, name):
    whole = tmp_path / name
    run(str(whole))
    shards = [Shard(k, 3).path(str(tmp_path / "shards" / name)) for k in range(3)]
    assert shards[1].endswith("/out.txt.1-of-3" + (".gz" if name.endswith(".gz") else ""))
    for k, path in enumerate(shards):
        run(path, shard=Shard(k, 3))
    merged = tmp_path / ("merged" + name)
    assert merge_shards(shards, str(merged)) == len(LINES)
    assert merged.read_bytes() == whole.read_bytes()
    with pytest.raises(UserError, match="needs the 3 shards 0/3 to 2/3 of one job"):
        merge_shards(shards[:2], str(merged))
    os.remove(shards[2])
    with pytest.raises(UserError, match="is not a finished shard"):
        merge_shards(shards, str(merged))


def test_a_shard_parses_as_k_of_n():
    assert Shard.parse("2/4") == Shard(2, 4) and Shard(2, 4).takes(6) and not Shard(2, 4).takes(5)
    for text in ("4/4", "x", "1/0", "-1/2"):
        with pytest.raises(UserError, match="--shard"):
            Shard.parse(text)


def test_sigterm_stops_after_the_current_window(tmp_path):
    out = tmp_path / "out.txt"

    def signalled(window, advance):
        if window.index == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # arrives while the window is in work
        return upper(window, advance)

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(JobStopped, match="stopped by SIGTERM after 300 lines; run the same command again") as stop:
        run(str(out), work=signalled)
    assert stop.value.signum == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before  # the handler is the job's only while it runs
    run(str(out))
    assert out.read_bytes() == expected()
