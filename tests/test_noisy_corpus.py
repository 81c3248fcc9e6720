"""scripts/noisy_corpus.py: the shuffled share of a corpus, and the filter's precision and recall."""

import json
import subprocess
import sys

from conftest import ROOT, subprocess_env


def run(*args: str) -> dict:
    result = subprocess.run(
        [sys.executable, f"{ROOT}/scripts/noisy_corpus.py", *args],
        capture_output=True,
        text=True,
        check=True,
        env=subprocess_env(),
    )
    return json.loads(result.stdout)


def test_shuffled_pairs_are_made_and_caught_by_their_scores(tmp_path):
    sources = [f"quelle {i}" for i in range(50)]
    (tmp_path / "c.de").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    (tmp_path / "c.en").write_text("".join(f"target {i}\n" for i in range(50)), encoding="utf-8")
    made = run(
        "make",
        "--corpus",
        str(tmp_path / "c"),
        "--src",
        "de",
        "--tgt",
        "en",
        "--share",
        "0.2",
        "--out",
        str(tmp_path / "noisy"),
    )
    assert made == {"pairs": 50, "shuffled": 10}
    flags = (tmp_path / "noisy.shuffled").read_text().split()
    targets = (tmp_path / "noisy.en").read_text().splitlines()
    assert (tmp_path / "noisy.de").read_text().splitlines() == sources
    for i, (flag, target) in enumerate(zip(flags, targets)):
        assert (target == f"target {i}") == (flag == "0")  # every shuffled line lost its own target
    assert sorted(targets) == sorted(f"target {i}" for i in range(50))

    # scores that make the shuffled pairs costly in one direction, and half of them in the other
    shuffled = [i for i, flag in enumerate(flags) if flag == "1"]
    forward = [f"-9\t{-3.0 if i in shuffled else -1.0}\n" for i in range(50)]
    backward = [f"-9\t{-3.0 if i in shuffled[:5] else -1.0}\n" for i in range(50)]
    (tmp_path / "a.scores").write_text("".join(forward))
    (tmp_path / "b.scores").write_text("".join(backward))
    common = ["filter", "--corpus", str(tmp_path / "noisy"), "--src", "de", "--tgt", "en", "--drop", "0.2"]
    one = run(*common, "--scores", str(tmp_path / "a.scores"), "--out", str(tmp_path / "one"))
    assert (one["precision"], one["recall"], one["dropped"]) == (1.0, 1.0, 10)
    assert len((tmp_path / "one.en").read_text().splitlines()) == 40
    dual = run(
        *common, "--scores", str(tmp_path / "a.scores"), str(tmp_path / "b.scores"), "--out", str(tmp_path / "two")
    )
    assert dual["rule"] == "dual conditional cross-entropy" and dual["recall"] == 1.0
