"""scripts/finetune_memory.py: each memory option in its own process, its state counted and measured."""

import json

import pytest

import finetune_memory


@pytest.mark.slow
def test_each_option_states_what_it_keeps(tmp_path, capsys):
    out = tmp_path / "memory.json"
    options = ["bf16", "lora+checkpoint"]  # full is each flag off: fp32 would be 4 bytes a weight
    small = ["--shape", "tiny", "--vocab", "300", "--sentences", "2", "--length", "6", "--steps", "1", "--threads", "1"]
    finetune_memory.main([*small, "--options", *options, "--json", str(out)])
    assert "| lora+checkpoint |" in capsys.readouterr().out
    bf16, adapted = json.loads(out.read_text())["results"]
    assert [r["option"] for r in (bf16, adapted)] == options
    assert bf16["weights"] < 4 * bf16["trained"] and bf16["optimizer"] == 8 * bf16["trained"]  # fp32 Adam moments
    assert adapted["trained"] < bf16["trained"] / 2 and adapted["gradients"] == 4 * adapted["trained"]
    assert all(r["own_peak_mb"] > 0 and r["tokens_per_s"] > 0 for r in (bf16, adapted))
