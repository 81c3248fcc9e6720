import json
import re
import subprocess
import sys

import pytest

from conftest import run_cli
from mt_transformer.errors import UserError
from mt_transformer.evaluation.scores import score

HYP = ["The cat sat on the mat.", "A dog runs in the park!", "Hello world", ""]
REF = ["The cat sat on a mat.", "A dog is running in the park!", "Hello, world", "Nothing"]


def sacrebleu_cli(hyp_path, ref_path, metric):
    out = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(ref_path), "-i", str(hyp_path), "-m", metric, "-b", "-w", "2"],
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.strip())


def test_scores_equal_the_sacrebleu_command(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("\n".join(HYP) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REF) + "\n", encoding="utf-8")
    result = run_cli("mt-eval", "--hyp", str(hyp), "--ref", str(ref), "--metrics", "bleu", "chrf", "ter", "--json")
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout)
    assert set(ours) == {"bleu", "chrf", "ter", "signature"}
    for metric in ("bleu", "chrf", "ter"):
        assert ours[metric] == pytest.approx(sacrebleu_cli(hyp, ref, metric), abs=0.01)
    assert ours["signature"]["bleu"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


def test_plain_output_has_signatures(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a b c d\n", encoding="utf-8")
    ref.write_text("a b c d\n", encoding="utf-8")
    result = run_cli("mt-eval", "--hyp", str(hyp), "--ref", str(ref))
    assert result.stdout.splitlines()[0].startswith("BLEU = 100.00  (nrefs:1|")
    assert result.stdout.splitlines()[1].startswith("CHRF = 100.00")


def test_line_count_mismatch_is_a_one_line_error(tmp_path):
    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("a\nb\n", encoding="utf-8")
    ref.write_text("a\n", encoding="utf-8")
    result = run_cli("mt-eval", "--hyp", str(hyp), "--ref", str(ref))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: {hyp} has 2 lines but {ref} has 1"


def test_score_refuses_different_lengths():
    with pytest.raises(UserError):
        score(["a"], ["a", "b"])


def test_bleu_tokenizes_by_target_language(tmp_path):
    hyp, ref = ["我昨天买了一个苹果。"], ["我昨天买了一个红色的苹果。"]
    plain = score(hyp, ref, ("bleu",))
    chinese = score(hyp, ref, ("bleu",), tgt_lang="zh")
    assert "tok:13a" in plain["signature"]["bleu"] and "tok:zh" in chinese["signature"]["bleu"]
    assert plain["bleu"] == 0.0 < chinese["bleu"]  # 13a sees one "word" per sentence
    japanese = score(["これは本です。"], ["これはペンです。"], ("bleu",), tgt_lang="ja")
    assert "tok:ja-mecab" in japanese["signature"]["bleu"] or "tok:char" in japanese["signature"]["bleu"]
    files = {name: tmp_path / name for name in ("hyp.zh", "ref.zh")}
    files["hyp.zh"].write_text(hyp[0] + "\n", encoding="utf-8")
    files["ref.zh"].write_text(ref[0] + "\n", encoding="utf-8")
    result = run_cli(
        "mt-eval", "--hyp", str(files["hyp.zh"]), "--ref", str(files["ref.zh"]), "--tgt-lang", "zh", "--json"
    )
    assert json.loads(result.stdout)["bleu"] == chinese["bleu"]


def systems(tmp_path, size=150):
    """A reference and three systems: one garbles 20% of its words, one is the same with a tenth of
    the sentences garbled more, and one garbles 45%."""
    import random

    rng = random.Random(5)
    words = "the a cat dog sat ran on in park mat house tree big small red green quickly slowly".split()
    refs = [" ".join(rng.choice(words) for _ in range(rng.randint(5, 14))) for _ in range(size)]

    def garble(line, rate):
        return " ".join(w if rng.random() > rate else rng.choice(words) for w in line.split())

    good = [garble(r, 0.2) for r in refs]
    close = [garble(r, 0.3) if i % 10 == 0 else g for i, (r, g) in enumerate(zip(refs, good))]  # 10% redone
    lines = {"ref": refs, "good": good, "close": close, "weak": [garble(r, 0.45) for r in refs]}
    paths = {}
    for name, text in lines.items():
        paths[name] = tmp_path / f"{name}.txt"
        paths[name].write_text("\n".join(text) + "\n", encoding="utf-8")
    return paths


def sacrebleu_p_values(ref, baseline, system, test) -> list[float]:
    """The BLEU and chrF p-values the sacrebleu command prints (its JSON output fails on paired tests)."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sacrebleu",
            str(ref),
            "-i",
            str(baseline),
            str(system),
            "-m",
            "bleu",
            "chrf",
            f"--paired-{test}",
            "-f",
            "text",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(p) for p in re.findall(r"\(p = ([0-9.]+)\)", out.stdout)]


@pytest.mark.slow
def test_paired_tests_agree_with_the_sacrebleu_command(tmp_path):
    paths = systems(tmp_path)
    result = run_cli(
        "mt-eval", "--hyp", str(paths["good"]), "--compare", str(paths["close"]), "--ref", str(paths["ref"]), "--json"
    )
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout)["compare"]
    for test, short in (("bootstrap", "bs"), ("randomization", "ar")):
        theirs = sacrebleu_p_values(paths["ref"], paths["close"], paths["good"], short)
        assert [round(ours[name][f"{test}_p"], 4) for name in ("bleu", "chrf")] == pytest.approx(theirs, abs=1e-4)
    assert 0.002 < ours["bleu"]["bootstrap_p"] < 0.9  # a p-value in the middle, not the test's floor
    assert ours["bleu"]["system"] > ours["bleu"]["baseline"]
    clear = run_cli(
        "mt-eval",
        "--hyp",
        str(paths["good"]),
        "--compare",
        str(paths["weak"]),
        "--ref",
        str(paths["ref"]),
        "--tests",
        "bootstrap",
    )
    assert clear.stdout.splitlines()[2].endswith("): significant at p < 0.05")  # after the BLEU and chrF lines
    same = run_cli(
        "mt-eval",
        "--hyp",
        str(paths["good"]),
        "--compare",
        str(paths["good"]),
        "--ref",
        str(paths["ref"]),
        "--tests",
        "bootstrap",
        "--metrics",
        "bleu",
    )
    assert "difference +0.00" in same.stdout and "not significant" in same.stdout


def test_sentence_scores_are_sacrebleus_sentence_scores(tmp_path):
    from sacrebleu.metrics import BLEU, CHRF

    hyp, ref = tmp_path / "hyp.txt", tmp_path / "ref.txt"
    hyp.write_text("\n".join(HYP) + "\n", encoding="utf-8")
    ref.write_text("\n".join(REF) + "\n", encoding="utf-8")
    result = run_cli("mt-eval", "--hyp", str(hyp), "--ref", str(ref), "--sentence", "--json")
    rows = json.loads(result.stdout)["sentences"]
    assert len(rows) == len(HYP)
    bleu, chrf = BLEU(effective_order=True), CHRF()
    for row, h, r in zip(rows, HYP, REF):
        assert row["bleu"] == pytest.approx(bleu.sentence_score(h, [r]).score, abs=0.01)
        assert row["chrf"] == pytest.approx(chrf.sentence_score(h, [r]).score, abs=0.01)
    plain = run_cli("mt-eval", "--hyp", str(hyp), "--ref", str(ref), "--sentence").stdout.splitlines()
    assert plain[2] == "line\tBLEU\tCHRF" and len(plain) == 3 + len(HYP)
