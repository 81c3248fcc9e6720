"""scripts/constrained_eval.py: constraints drawn from the references, with and without them."""

import json
import re

import constrained_eval


def test_phrases_are_drawn_written_and_scored_at_each_beam(trained_run, corpus, tmp_path):
    out, phrases = tmp_path / "rows.json", tmp_path / "constraints.tsv"
    args = ["--checkpoint", trained_run, "--src", f"{corpus}/valid.en", "--ref", f"{corpus}/valid.de"]
    rows = constrained_eval.main([*args, "--beams", "2", "--write-constraints", str(phrases), "--json", str(out)])
    (row,) = rows
    drawn = [line.split("\t") for line in phrases.read_text(encoding="utf-8").splitlines()]
    assert len(drawn) == 60 and row["phrases"] == sum(len([p for p in d if p]) for d in drawn) > 0
    assert re.fullmatch(r"\d+/60", row["all_phrases_held"])
    assert row["sentences_per_s"]["constrained"] > 0 and row["sentences_per_s"]["unconstrained"] > 0
    for side in ("unconstrained", "constrained"):
        assert 0 <= row[side]["bleu"] <= 100
    assert json.loads(out.read_text())["machine"]["cpu"]
