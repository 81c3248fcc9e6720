"""scripts/step_bench.py: our engine's decoding step against reading its weights once."""

import json

import step_bench


def test_the_step_is_timed_against_its_bound(trained_run, tmp_path, capsys):
    out = tmp_path / "step.json"
    step_bench.main(["--checkpoint", trained_run, "--threads", "1", "--repeats", "2", "--json", str(out)])
    assert "x the bound" in capsys.readouterr().out
    results = json.loads(out.read_text())
    for precision in ("fp32", "bf16"):
        assert results[precision]["step_ms"] > 0 and results[precision]["bound_ms"] > 0
    assert results["bf16"]["weights_mb"] == results["fp32"]["weights_mb"] / 2  # the linear weights in 2 bytes
