"""scripts/student_bench.py: teachers and students, each engine of each in a process of its own."""

import json

import pytest

import student_bench


@pytest.mark.slow  # about 8 s: two processes
def test_every_model_is_scored_sized_and_timed_on_each_engine(trained_run, corpus, tmp_path, capsys):
    out = tmp_path / "bench.json"
    models = ["--model", f"teacher={trained_run}", "--model", f"student={trained_run}/checkpoints/step_00000020"]
    args = ["--src", f"{corpus}/valid.en", "--ref", f"{corpus}/valid.de", "--lines", "8", "--single", "2"]
    engines = ["--engines", "CTranslate2 int8"]
    student_bench.main([*models, *args, *engines, "--rounds", "1", "--threads", "1", "--json", str(out)])
    printed = capsys.readouterr().out
    assert "| teacher | 2+2, 32, 2 |" in printed and "| student | 2+2, 32, 2 |" in printed
    results = json.loads(out.read_text())["models"]
    for model in results.values():
        assert 0 < model["int8_export_mb"] < model["checkpoint_mb"]
        for engine in ("CTranslate2 int8",):
            row = model[engine]
            assert row["single_ms"] > 0 and row["whole"] > 0 and 0 <= row["bleu"] <= 100 and 0 <= row["chrf"] <= 100
    assert results["teacher"]["training_minutes"] > 0  # from the run's metrics.jsonl
    assert "default" not in results["teacher"] and "ours fp32" not in results["teacher"]  # not asked for
    assert results["student"]["CTranslate2 int8"]["engine"].startswith("CTranslate2 on cpu, int8")
