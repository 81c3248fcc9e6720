"""scripts/markup_corpus_bench.py: inline elements on a real test set, judged by eflomal."""

import json

import pytest

import markup_corpus_bench as bench


def test_an_elements_words_are_found_in_the_text_without_tags():
    found = bench.Elements('Ein <b>roter <i>Hut</i></b> &amp; ein <a href="x">Hund</a>.')
    assert found.text == "Ein roter Hut & ein Hund." and found.nested
    assert [(tag, bench.word_range(found.text, start, end)) for tag, start, end in found.elements] == [
        ("b", (1, 2)),
        ("i", (2, 2)),
        ("a", (5, 5)),
    ]
    assert not bench.Elements("a <b>c</i> d").nested and not bench.Elements("a <b>c").nested
    assert bench.word_range("a b", 3, 3) is None  # an empty element at the end


def test_an_element_is_right_where_it_wraps_the_words_aligned_to_its_words_exactly_or_consistently():
    cases = [(0, "a <b>b c</b> d", (1, 2))] * 6
    outputs = ["w <b>x y</b> z", "<b>w x y</b> z", "w <b>x y z</b>", "w <b>x</b> y z", "<b></b>w x y z", "w x <b>y z"]
    # eflomal: b-y, c-x, and a-w; z unaligned; the last: the span's words aligned to nothing
    links = [[(0, 0), (1, 2), (2, 1)]] * 5 + [[(0, 0)]]
    counts = bench.placement(cases, outputs, links)
    # exact: "x y"; consistent: "x y", and "x y z" (z unaligned joins), not "w x y" (w is a's)
    assert counts == {"exact": 1, "consistent": 2, "judged": 5, "unaligned": 1, "formed": 5}


def test_word_agreement_counts_the_output_words_the_judge_aligns():
    judge = [[(0, 0), (1, 1), (2, 1)], [(0, 1)]]  # words 0 and 1, and word 1 of the second line
    ours = [[(0, 0), (2, 1), (1, 2)], [(1, 1), (0, 0)]]  # right, right (one of two), wrong
    assert bench.agreement(ours, judge) == 2 / 3


@pytest.mark.slow  # about 10 s: eflomal twice and two translations
def test_the_bench_reports_placement_well_formedness_bleu_and_speed(trained_run, corpus, tmp_path, capsys):
    out = tmp_path / "bench.json"
    files = ["--src", f"{corpus}/test.en", "--ref", f"{corpus}/test.de"]
    stats = ["--train-src", f"{corpus}/train.en", "--train-tgt", f"{corpus}/train.de", "--train-pairs", "500"]
    bench.main(
        [
            "--checkpoint",
            trained_run,
            *files,
            *stats,
            "--lines",
            "20",
            "--rounds",
            "1",
            "--judges",
            "2",
            "--json",
            str(out),
        ]
    )
    (result,) = json.loads(out.read_text())["runs"]
    assert 0 < result["lines"] <= 20 and result["judged"] + result["unaligned"] == result["lines"]
    assert max(result["exact"], result["consistent"]) <= result["judged"]  # neither holds the other
    assert result["formed"] == result["lines"]  # every output well-formed, whatever the model
    assert len(result["judges"]["exact"]) == 2 and result["exact"] == sum(result["judges"]["exact"]) / 2
    assert result["bleu_html_without_tags"] >= 0 and result["html_sentences_per_s"] > 0
    assert 0 <= result["words_agreeing"] <= 1
    assert "elements on the right words" in capsys.readouterr().out
