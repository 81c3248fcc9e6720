"""scripts/measure.py: the machine, the clock and the tables every measuring script shares."""

import json
import sys

import pytest

import measure


def test_the_machine_names_the_cpu_threads_and_versions():
    described = measure.machine()
    assert set(described) == {"cpu", "cores", "threads", "torch", "python"}
    assert described["cpu"] and described["cores"] >= 1 and described["threads"] >= 1
    line = measure.machine_line()
    assert line.startswith(described["cpu"]) and f"torch {described['torch']}" in line


def test_a_table_has_a_head_a_rule_and_a_row_per_sequence():
    table = measure.markdown_table(["a", "b"], [[1, "x"], [2.5, ""]])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | x |", "| 2.5 |  |"]


def test_timing_returns_the_result_and_counts_per_second():
    result, seconds = measure.timed(sorted, [3, 1, 2])
    assert result == [1, 2, 3] and seconds >= 0
    translate = lambda lines: [[type("T", (), {"text": line.upper()})] for line in lines]  # noqa: E731
    assert measure.texts(translate, ["a", "b"]) == ["A", "B"]
    calls = []
    assert measure.calls_per_s(lambda lines: calls.append(len(lines)), list("abcde"), 2) > 0
    assert calls == [2, 2, 1]


def test_a_process_is_timed_with_its_peak_memory_and_a_failure_names_it(tmp_path):
    grow = "x = bytearray(64 * 2**20); x[::4096] = b'1' * len(x[::4096])"
    seconds, peak_mb = measure.run_process([sys.executable, "-c", grow])
    assert seconds > 0 and peak_mb > 64
    with pytest.raises(SystemExit, match="the reason"):
        measure.run_process([sys.executable, "-c", "import sys; sys.exit('the reason')"])


def test_a_processs_own_memory_leaves_out_the_file_it_maps(tmp_path):
    (tmp_path / "weights").write_bytes(b"1" * (128 * 2**20))
    mapped = f"import mmap, time; f = open({str(tmp_path / 'weights')!r}, 'rb'); "
    mapped += "m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ); "
    mapped += "s = sum(m[i] for i in range(0, len(m), 4096)); "  # the file's pages read: resident
    mapped += "x = bytearray(32 * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(0.3)"
    seconds, peak_mb, own_mb = measure.peak_own_memory([sys.executable, "-c", mapped], interval=0.01)
    assert seconds > 0 and peak_mb > 128 + 32  # the mapped file's pages count in RSS
    assert 32 < own_mb < 128  # the process's own: the bytearray and the interpreter, not the file


def test_results_are_written_as_json(tmp_path):
    measure.write_json(str(tmp_path / "r.json"), {"rows": [1]})
    assert json.loads((tmp_path / "r.json").read_text()) == {"rows": [1]}
