"""scripts/corpus_bench.py: mt-translate on a drawn corpus, streamed, piped, killed and continued."""

import json

import pytest

import corpus_bench


@pytest.mark.slow  # about 30 s: seven mt-translate processes
def test_a_beam_is_measured_and_the_killed_run_ends_with_the_same_bytes(trained_run, corpus, tmp_path, capsys):
    args = ["--checkpoint", trained_run, "--source", f"{corpus}/train.en", "--workdir", str(tmp_path)]
    corpus_bench.main([*args, "--lines", "300", "--small", "60", "--compare", "120", "--beam", "1", "--rounds", "1"])
    host, row = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert host["host"]["cpu"] and row["beam"] == 1
    assert row["small"]["lines"] == 60 and row["large"]["lines"] == 300
    assert row["small"]["peak_rss_mb"] > 0 and row["streamed"]["sent_per_s"] > 0
    assert row["identical_to_whole_file"] and row["killed_at_60_percent"]["identical"]
    assert row["first_line_s"] > 0
