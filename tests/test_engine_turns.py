"""scripts/engine_turns.py: engines in processes of their own, taking turns (run through the
benchmarks that use it: test_engine_bench.py, test_torch_bench.py, test_student_bench.py)."""

import engine_turns


def test_the_constrained_phrase_is_the_references_longest_word():
    assert engine_turns.included_words(["a red house.", ""]) == [["house"], []]


def test_paired_ratios_are_the_median_of_each_rounds_ratio():
    # one line: fewer ms is faster, so the ratio is the reference's ms over the row's
    row = {"rounds": {"single_ms": [10.0, 20.0, 30.0], "calls_32": [100.0, 90.0, 80.0], "whole": [50.0, 60.0, 70.0]}}
    reference = {"rounds": {"single_ms": [20.0, 20.0, 15.0], "calls_32": [50.0, 90.0, 160.0], "whole": [50.0] * 3}}
    assert engine_turns.paired(row, reference) == [1.0, 1.0, 1.2]
