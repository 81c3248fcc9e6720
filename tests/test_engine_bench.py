"""scripts/engine_bench.py: our engine and CTranslate2 side by side on one checkpoint."""

import json

import pytest

import engine_bench
from conftest import THREADS


@pytest.mark.slow
def test_both_engines_are_timed_side_by_side_with_the_step_against_its_bound(trained_run, corpus, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    out = tmp_path / "bench.json"
    src, ref = f"{corpus}/valid.en", f"{corpus}/valid.de"
    args = ["--checkpoint", trained_run, "--src", src, "--ref", ref, "--lines", "8", "--single", "2"]
    engine_bench.main([*args, "--threads", THREADS, "--rounds", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "| ours fp32 |" in printed and "| CTranslate2 int8 |" in printed and "x the bound" in printed
    results = json.loads(out.read_text())
    for name in ("ours fp32", "ct2 fp32", "ours int8", "ct2 int8"):
        row = results[name]
        assert row["single_ms"] > 0 and row["calls_32"] > 0 and row["whole"] > 0 and 0 <= row["bleu"] <= 100
    step = results["step int8"]
    assert step["step_ms"] > 0 and 0 < step["weights_mb"] < results["step fp32"]["weights_mb"] * 1.0001
