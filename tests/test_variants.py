"""mt-eval --variants: the test set in capitals, title case, without final punctuation and with
typos, each translated and scored against the matching references."""

import json

from conftest import run_cli
from mt_transformer.evaluation.variants import VARIANTS, evaluate_variants, format_variants, variant

SOURCES = ["ein Mann läuft.", "wo ist das Haus?", "zwei Hunde spielen im Garten"]
REFERENCES = ["a man runs.", "where is the house?", "two dogs play in the garden"]


def test_each_variant_changes_sources_and_references_as_it_says():
    assert variant("clean", SOURCES, REFERENCES) == (SOURCES, REFERENCES)
    assert variant("upper_case", SOURCES, REFERENCES)[1][0] == "A MAN RUNS."
    assert variant("title_case", SOURCES, REFERENCES)[0][2] == "Zwei Hunde Spielen Im Garten"
    src, ref = variant("remove_end_punct", SOURCES, REFERENCES)
    assert src[:2] == ["ein Mann läuft", "wo ist das Haus"] and ref[2] == REFERENCES[2]
    src, ref = variant("typos", SOURCES, REFERENCES, seed=3)
    assert ref == REFERENCES and src != SOURCES and [len(s.split()) for s in src] == [3, 4, 5]
    assert variant("typos", SOURCES, REFERENCES, seed=3) == (src, ref)  # seeded


def test_a_model_that_copies_its_input_drops_only_where_the_copy_stops_matching():
    def copy(lines):
        return lines

    rows = evaluate_variants(copy, REFERENCES, REFERENCES, "en")
    assert [row["variant"] for row in rows] == list(VARIANTS)
    by_name = {row["variant"]: row for row in rows}
    assert by_name["clean"]["bleu"] == 100.0 and by_name["upper_case"]["bleu"] == 100.0  # references changed alike
    assert by_name["upper_case"]["drop"] == 0.0 and by_name["typos"]["drop"] < 0
    assert "drop" in format_variants(rows).splitlines()[0]


def test_mt_eval_variants_on_a_tiny_model(trained_run, corpus):
    result = run_cli("mt-eval", "--checkpoint", trained_run, "--split", "valid", "--variants", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["variants"]
    assert [row["variant"] for row in rows] == list(VARIANTS)
    assert all(0 <= row["bleu"] <= 100 and "drop" in row and "bleu_case_insensitive" in row for row in rows)
    table = run_cli(
        "mt-eval", "--checkpoint", trained_run, "--src", f"{corpus}/test.en", "--ref", f"{corpus}/test.de", "--variants"
    )
    assert table.returncode == 0 and table.stdout.splitlines()[0].startswith("variant\tBLEU\tCHRF")
    assert len(table.stdout.splitlines()) == 1 + len(VARIANTS)
    wrong = run_cli("mt-eval", "--checkpoint", trained_run, "--src", f"{corpus}/test.en", "--variants")
    assert wrong.returncode == 2 and wrong.stderr.strip() == "error: --variants: needs --src and --ref, or --split"
