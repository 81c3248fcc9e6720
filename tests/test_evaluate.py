import json
import subprocess
import sys

import pytest

from conftest import run_cli
from mt_transformer.config import UserError
from mt_transformer.evaluate import read_lines, score

HYP = ["The cat sat on the mat.", "A dog runs in the park!", "Hello world", ""]
REF = ["The cat sat on a mat.", "A dog is running in the park!", "Hello, world", "Nothing"]


def sacrebleu_cli(hyp_path, ref_path, metric):
    out = subprocess.run([sys.executable, "-m", "sacrebleu", str(ref_path), "-i", str(hyp_path), "-m", metric, "-b", "-w", "2"],
                         capture_output=True, text=True, check=True)
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


def test_read_lines_handles_crlf_bom_and_missing_final_newline(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes("\ufeffone\r\ntwo\r\n\r\nfour".encode())
    assert read_lines(str(path)) == ["one", "two", "", "four"]
    with pytest.raises(UserError, match="nope.txt: file not found"):
        read_lines(str(tmp_path / "nope.txt"))


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
    result = run_cli("mt-eval", "--hyp", str(files["hyp.zh"]), "--ref", str(files["ref.zh"]), "--tgt-lang", "zh",
                     "--json")
    assert json.loads(result.stdout)["bleu"] == chinese["bleu"]
