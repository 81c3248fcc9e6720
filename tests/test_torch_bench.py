"""scripts/torch_bench.py: our engine on the calls only it runs, each in a process of its own."""

import json

import pytest

import torch_bench


@pytest.mark.slow  # about 10 s: two processes
def test_each_task_is_timed_in_a_process_and_its_outputs_compared(trained_run, corpus, tmp_path, capsys):
    out = tmp_path / "bench.json"
    args = ["--checkpoint", trained_run, "--src", f"{corpus}/valid.en", "--ref", f"{corpus}/valid.de"]
    args += ["--lines", "4", "--rounds", "1", "--tasks", "ensemble", "constraints", "--json", str(out)]
    torch_bench.main(args)
    assert "| ensemble | fp32 |" in capsys.readouterr().out
    results = json.loads(out.read_text())
    assert [r["task"] for r in results["rows"]] == ["ensemble", "constraints"]
    assert all(r["best"][0] > 0 and r["equal"] == 4 and r["ratio"] == 1.0 for r in results["rows"])
    assert results["packages"]["installed"].endswith("mt_transformer/__init__.py")
