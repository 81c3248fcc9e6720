"""scripts/huggingface_compare.py: the transformers and CTranslate2 exports against our translator."""

import json

import pytest

import huggingface_compare


@pytest.mark.slow  # about 10 s: two exports, transformers' generate()
def test_three_engines_at_two_searches_are_timed_and_scored(trained_run, corpus, tmp_path):
    out = tmp_path / "rows.json"
    args = ["--checkpoint", trained_run, "--src", f"{corpus}/valid.en", "--ref", f"{corpus}/valid.de"]
    rows = huggingface_compare.main([*args, "--threads", "1", "--batch-size", "16", "--json", str(out)])
    engines = ("mt_transformer", "transformers", "ctranslate2")
    assert [(r["search"], r["engine"]) for r in rows] == [(s, e) for s in ("greedy", "beam 4") for e in engines]
    assert all(r["sentences_per_s"] > 0 and 0 <= r["bleu"] <= 100 for r in rows)
    assert all(r["equal_to_ours"] == 1.0 for r in rows if r["engine"] == "mt_transformer")
    assert json.loads(out.read_text())["rows"] == rows
