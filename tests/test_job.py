"""Corpus jobs without a model: continuing a partial output, refusing a changed one,
gzip members, shards and their merge, and a signal that stops after the current window."""

import gzip
import json
import os
import signal

import pytest

from mt_transformer.errors import UserError
from mt_transformer.jobs.job import CorpusJob, JobStopped
from mt_transformer.jobs.records import merge_shards
from mt_transformer.jobs.windows import Shard, read_windows

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
