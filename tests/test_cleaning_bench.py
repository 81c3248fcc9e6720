"""scripts/cleaning_bench.py on the generated corpus: every kind of noise labelled and counted."""

import json


def test_each_kind_of_noise_is_added_labelled_and_its_catch_reported(corpus, trained_run, tmp_path):
    import cleaning_bench

    results = cleaning_bench.main(
        ["--corpus", f"{corpus}/train", "--src", "en", "--tgt", "de", "--other", f"{corpus}/train.en"]
        + ["--share", "0.02", "--out", str(tmp_path), "--scorers", trained_run, "--score-drop", "0.05"]
    )
    labels = (tmp_path / "noisy.labels").read_text().split()
    assert labels.count("clean") == 2000 and all(labels.count(kind) == 40 for kind in cleaning_bench.KINDS)
    for name in ("rules", "with language_id", "defaults"):
        shares = results[name]["shares"]
        assert set(shares) == {"clean", *cleaning_bench.KINDS} and all(0 <= v <= 1 for v in shares.values())
        # (boilerplate is caught past data.clean.max_repeats partners: 40 lines here, too few)
        assert shares["copy"] > 0.9 and shares["long"] > 0.9 and shares["duplicate"] == 1
    # English sentences where German should be: caught by language identification; a neighbour's
    # target, by word translation
    assert results["with language_id"]["shares"]["language"] > results["rules"]["shares"]["language"]
    assert results["defaults"]["shares"]["misaligned"] > results["with language_id"]["shares"]["misaligned"]
    scored = results["with scorers"]["report"]
    assert scored["dropped"]["score"] == round(0.05 * (results["defaults"]["report"]["kept"]))
    assert list(scored["settings"]["scorers"]) == [trained_run]
    assert json.loads((tmp_path / "cleaning_bench.json").read_text())["cpu"]


def test_at_scale_each_round_is_judged_by_the_number_at_its_lines_end(tmp_path):
    from cleaning_bench import caught_at_scale

    rows = [("clean", "a", "A"), ("copy", "b", "b"), ("clean", "c 1", "C 1")]  # a line may end in a number itself
    kept = [("a", "A"), ("c 1", "C 1"), ("a 1", "A 1"), ("a 2", "A 2")]  # 7 rows: 2 rounds and one row
    for k, name in enumerate(("de", "en")):
        (tmp_path / f"kept.{name}").write_text("".join(pair[k] + "\n" for pair in kept), encoding="utf-8")
    shares = caught_at_scale(rows, 7, (str(tmp_path / "kept.de"), str(tmp_path / "kept.en")))
    assert shares["clean"] == (2 + 1 + 1) / 5 and shares["copy"] == 1.0
