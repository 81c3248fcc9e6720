"""scripts/engine_bench.py: the default engine, CTranslate2 and ours, each in a process of its own."""

import json

import pytest

import engine_bench


@pytest.mark.slow  # about 15 s: three processes (int8, the default second precision, runs the same code)
def test_each_engine_is_timed_in_its_own_process(trained_run, corpus, tmp_path, capsys):
    out = tmp_path / "bench.json"
    src, ref = f"{corpus}/valid.en", f"{corpus}/valid.de"
    args = ["--checkpoint", trained_run, "--src", src, "--ref", ref, "--lines", "8", "--single", "2"]
    engine_bench.main([*args, "--threads", "1", "--rounds", "1", "--precisions", "fp32", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "| default, fp32 |" in printed and "| CTranslate2 float32, 1 worker(s) of 1 thread |" in printed
    assert "| default / fastest CTranslate2 |" in printed and "| ours / fastest CTranslate2 |" in printed
    assert "| default / CTranslate2 1 workers, paired rounds (median) |" in printed
    results = json.loads(out.read_text())
    for name in ("default fp32", "ct2 1 fp32", "ours fp32"):
        row = results[name]
        assert row["single_ms"] > 0 and row["calls_32"] > 0 and row["whole"] > 0 and 0 <= row["bleu"] <= 100
    # the default path runs CTranslate2 on the checkpoint's conversion, our engine runs when asked
    assert results["default fp32"]["engine"].startswith("CTranslate2 on cpu, float32")
    assert results["ours fp32"]["engine"].startswith("ours (PyTorch)")
    assert results["ct2 1 fp32"]["equal_to_ct2"] == 1.0 and "default int8" not in results


def test_the_faster_layout_is_the_one_named():
    import argparse

    args = argparse.Namespace(threads=[1, 2], precisions=["fp32", "int8"])
    row = dict(single_ms=10.0, calls_32=100.0, whole=100.0)
    results = {
        "cpu": "a CPU",
        "ct2 2 fp32": row,
        "ct2 intra fp32": dict(single_ms=5.0, calls_32=90.0, whole=100.0),  # one line twice as fast: it wins
        "ct2 2 int8": row,
        "ct2 intra int8": dict(single_ms=12.0, calls_32=80.0, whole=90.0),
    }
    assert engine_bench.layout(results, args) == {"float32": 2, "int8": 1}
