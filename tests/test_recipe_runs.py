"""scripts/recipe_runs.py: one recipe run, scored and appended to results.jsonl."""

import json

import pytest

import recipe_runs
from conftest import tiny_config, write_config


@pytest.mark.slow  # about 15 s: a tiny run in a process of its own, scored in this one
def test_a_run_is_trained_scored_and_recorded(corpus, tmp_path):
    config = tiny_config(corpus, str(tmp_path / "unused"))
    config["data"]["test"] = f"{corpus}/test"
    config["train"].update(save_every=10, keep_last=5)
    path = write_config(tmp_path / "config.yaml", config)
    runs = tmp_path / "runs"
    row = recipe_runs.main(["--config", path, "--name", "tiny", "--runs-dir", str(runs), "--brief"])
    assert row["updates"] == 40 and row["last_step"] == 40 and row["avg3_steps"] == [20, 30, 40]
    for label in ("last", "avg3"):
        assert 0 <= row[f"test_{label}"]["bleu"] <= 100 and 0 <= row[f"test_{label}"]["chrf"] <= 100
    assert row["cpu"] and (runs / "tiny" / "avg3").is_dir()
    assert json.loads((runs / "results.jsonl").read_text().splitlines()[-1]) == row
