import json
import os

import pytest

from conftest import ROOT, run_cli


def test_translate_keeps_one_line_per_input_line(trained_run, corpus, tmp_path):
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:6]
    lines[2:2] = ["", "   "]
    source = tmp_path / "in.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.de"
    result = run_cli("mt-translate", "--checkpoint", trained_run, "-i", str(source), "-o", str(out), "--beam", "2")
    assert result.returncode == 0, result.stderr
    translated = out.read_text(encoding="utf-8").split("\n")
    assert translated[-1] == "" and len(translated) - 1 == len(lines)
    assert translated[2] == "" and translated[3] == ""
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


def test_translate_stdin_stdout_and_nbest(trained_run):
    result = run_cli("mt-translate", "--checkpoint", trained_run, "--nbest", "2", "--beam", "3",
                     input="I bought a red apple yesterday.\nTom will sell 5 old cups tomorrow.\n")
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "1", "1"]
    assert all(len(r) == 3 for r in rows)
    assert float(rows[0][1]) >= float(rows[1][1])
    greedy = run_cli("mt-translate", "--checkpoint", trained_run, "--beam", "1", input="I saw a dog.\n")
    assert greedy.returncode == 0 and len(greedy.stdout.splitlines()) == 1


def test_translate_errors_are_one_line(trained_run, tmp_path):
    missing = run_cli("mt-translate", "--checkpoint", str(tmp_path / "nothing"), input="x\n")
    assert missing.returncode == 2
    assert missing.stderr.strip().startswith("error: ") and len(missing.stderr.strip().splitlines()) == 1
    too_many = run_cli("mt-translate", "--checkpoint", trained_run, "--nbest", "3", "--beam", "2", input="x\n")
    assert too_many.returncode == 2 and "--nbest: 3 exceeds the beam size (2)" in too_many.stderr


def test_eval_translates_and_scores(trained_run, corpus, tmp_path):
    hyp = tmp_path / "hyp.de"
    result = run_cli("mt-eval", "--checkpoint", trained_run, "--src", f"{corpus}/test.en", "--ref",
                     f"{corpus}/test.de", "--json", "-o", str(hyp))
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    assert 0 <= scores["bleu"] <= 100 and "chrf" in scores and "bleu" in scores["signature"]
    assert len(hyp.read_text(encoding="utf-8").splitlines()) == 40


@pytest.mark.slow
def test_demo_commands_run_as_in_the_makefile(tmp_path):
    """`make demo` in miniature: the same commands and config, with fewer steps and less data."""
    data, run = tmp_path / "demo", tmp_path / "run"
    from mt_transformer.demo_data import main as generate
    generate([str(data), "--train", "3000", "--valid", "20", "--test", "20"])
    overrides = [f"data.train={data}/train", f"data.valid={data}/valid", f"data.test={data}/test",
                 f"train.output_dir={run}", "train.max_steps=4", "train.valid_every=4", "train.log_every=2",
                 "data.vocab_size=300"]
    train = run_cli("mt-train", "--config", os.path.join(ROOT, "configs/demo.yaml"), "--set", *overrides)
    assert train.returncode == 0, train.stderr
    assert "valid BLEU" in train.stdout
    translate = run_cli("mt-translate", "--checkpoint", str(run), "-i", f"{data}/test.en", "-o", f"{run}/test.hyp.de")
    assert translate.returncode == 0, translate.stderr
    scored = run_cli("mt-eval", "--hyp", f"{run}/test.hyp.de", "--ref", f"{data}/test.de", "--metrics", "bleu", "chrf")
    assert scored.returncode == 0 and scored.stdout.startswith("BLEU = ")
