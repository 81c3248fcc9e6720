import json
import os
import re
import shutil

import pytest

from conftest import ROOT, run_cli, subprocess_env, tiny_config, token_log_probs, translator, write_config
from mt_transformer import checkpoint


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
    result = run_cli(
        "mt-translate",
        "--checkpoint",
        trained_run,
        "--nbest",
        "2",
        "--beam",
        "3",
        input="I bought a red apple yesterday.\nTom will sell 5 old cups tomorrow.\n",
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "0", "1", "1"]
    assert all(len(r) == 3 for r in rows)
    assert float(rows[0][1]) >= float(rows[1][1])
    greedy = run_cli("mt-translate", "--checkpoint", trained_run, "--beam", "1", input="I saw a dog.\n")
    assert greedy.returncode == 0 and len(greedy.stdout.splitlines()) == 1


@pytest.mark.parametrize("engine", ["auto", "torch"])
def test_translate_scores_are_the_models_log_probabilities(trained_run, engine):

    from mt_transformer.decoding.search import length_penalty

    lines = ["I bought a red apple yesterday.", "Tom will sell 5 old cups tomorrow."]
    result = run_cli(
        "mt-translate",
        "--checkpoint",
        trained_run,
        "--beam",
        "3",
        "--nbest",
        "2",
        "--scores",
        "--alpha",
        "0.6",
        "--engine",
        engine,
        input="\n".join(lines) + "\n",
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [(r[0], len(r)) for r in rows] == [("0", 5), ("0", 5), ("1", 5), ("1", 5)]
    translate = translator(trained_run, beam_size=3, alpha=0.6, max_len_a=1.0, max_len_b=10, n_best=2)
    model, tokenizer = translate.model, translate.tokenizer
    found = translate(lines)
    for row, translation in zip(rows, [t for sentence in found for t in sentence]):
        assert row[4] == translation.text and row[3] == "0"
        # teacher-forcing the hypothesis gives the printed log-probability (its EOS included) ...
        src_ids = tokenizer.encode_src([lines[int(row[0])]])[0]
        forced = float(token_log_probs(model, src_ids, translation.tokens).sum())
        assert float(row[2]) == pytest.approx(forced, abs=2e-3)
        # ... and the score is it over the GNMT length penalty, EOS counted in the length
        assert float(row[1]) == pytest.approx(forced / length_penalty(len(translation.tokens) + 1, 0.6), abs=2e-3)
    single = run_cli("mt-translate", "--checkpoint", trained_run, "--scores", input=lines[0] + "\n")
    assert len(single.stdout.splitlines()[0].split("\t")) == 4


def test_translate_on_a_terminal_answers_each_line_as_it_is_entered(trained_run):
    import pty
    import select
    import subprocess
    import sys

    controller, terminal = pty.openpty()
    code = "import sys; from mt_transformer.cli import translate_main; sys.argv[0] = 'mt-translate'; translate_main()"
    process = subprocess.Popen(
        [sys.executable, "-c", code, "--checkpoint", trained_run],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=subprocess_env(),
    )
    os.close(terminal)
    try:
        answers = []
        for sentence in (b"I saw a dog.\n", b"a red apple\n"):
            os.write(controller, sentence)
            # the translation arrives while the input is still open
            ready, _, _ = select.select([process.stdout], [], [], 120)
            assert ready, "no translation before the end of input"
            answers.append(process.stdout.readline())
        os.write(controller, b"\x04")  # Ctrl-D: end of input
        assert process.wait(timeout=60) == 0
    finally:
        process.kill()
        os.close(controller)
    assert all(answer.strip() for answer in answers)
    assert b"Ctrl-D ends" in process.stderr.read()


def test_translate_errors_are_one_line(trained_run, tmp_path):
    missing = run_cli("mt-translate", "--checkpoint", str(tmp_path / "nothing"), input="x\n")
    assert missing.returncode == 2
    assert missing.stderr.strip().startswith("error: ") and len(missing.stderr.strip().splitlines()) == 1
    too_many = run_cli("mt-translate", "--checkpoint", trained_run, "--nbest", "3", "--beam", "2", input="x\n")
    assert too_many.returncode == 2 and "--nbest: 3 exceeds --beam (2)" in too_many.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("mt-prepare", "--config", "c.yaml", "--show-augmented", "-5"),
        ("mt-translate", "--checkpoint", "run", "--beam", "0"),
        ("mt-translate", "--checkpoint", "run", "--nbest", "two"),
        ("mt-translate", "--checkpoint", "run", "--buffer-lines", "-1"),
        ("mt-average", "--inputs", "run", "--last", "0", "--output", "avg"),
        ("mt-score", "--checkpoint", "run", "--src", "s", "--tgt", "t", "--max-tokens", "0"),
        ("mt-serve", "--checkpoint", "run", "--port", "70000"),
        ("mt-average", "--output", "avg"),  # a missing option
    ],
)
def test_a_number_out_of_range_or_a_missing_option_is_one_line_before_any_work(command):
    result = run_cli(*command)
    assert result.returncode == 2 and result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and line.endswith(f"({command[0]} --help lists the options)"), line


def test_translate_outputs_and_checkpoints_that_cannot_be_used_are_one_line(trained_run, tmp_path):
    (tmp_path / "a-file").write_text("x")
    for output, says in ((tmp_path, ": a directory; -o names the file"), (tmp_path / "a-file" / "out", "")):
        result = run_cli("mt-translate", "--checkpoint", trained_run, "-o", str(output), input="I saw a dog.\n")
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith(f"error: {output}{says}")
    assert sorted(os.listdir(tmp_path)) == ["a-file"]  # no partial file or record left
    # a checkpoint whose config.json is nested deeper than Python's stack
    deep = tmp_path / "deep"
    shutil.copytree(checkpoint.list_checkpoints(trained_run)[-1][1], deep)
    (deep / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    result = run_cli("mt-translate", "--checkpoint", str(deep), input="I saw a dog.\n")
    assert (
        result.returncode == 2
        and result.stderr.strip()
        == f"error: {deep}/config.json: not readable JSON (" + (result.stderr.strip().split("(", 1)[-1])
    )


def test_eval_translates_and_scores(trained_run, corpus, tmp_path):
    hyp = tmp_path / "hyp.de"
    result = run_cli(
        "mt-eval",
        "--checkpoint",
        trained_run,
        "--src",
        f"{corpus}/test.en",
        "--ref",
        f"{corpus}/test.de",
        "--json",
        "-o",
        str(hyp),
    )
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    assert 0 <= scores["bleu"] <= 100 and "chrf" in scores and "bleu" in scores["signature"]
    assert len(hyp.read_text(encoding="utf-8").splitlines()) == 40


def test_eval_of_empty_files_is_one_line(trained_run, tmp_path):
    empty = str(tmp_path / "empty.txt")
    open(empty, "w").close()
    for extra in ([], ["--sentence"], ["--json"]):
        result = run_cli("mt-eval", "--hyp", empty, "--ref", empty, *extra)
        assert result.returncode == 2 and result.stderr.strip() == f"error: {empty} and {empty}: no lines to score"
    for extra in ([], ["--variants"]):
        result = run_cli("mt-eval", "--checkpoint", trained_run, "--src", empty, "--ref", empty, *extra)
        assert result.returncode == 2 and result.stderr.strip().endswith("no lines to score"), result.stderr


def test_eval_split_scores_the_runs_own_data(trained_run, corpus, tmp_path):
    """--split valid translates the valid files the run's config names: the same scores as those
    files given by hand; a split the config lacks or extra files are one-line errors."""
    by_split = run_cli("mt-eval", "--checkpoint", trained_run, "--split", "valid", "--json", "-o", str(tmp_path / "h"))
    assert by_split.returncode == 0, by_split.stderr
    by_hand = run_cli(
        "mt-eval", "--checkpoint", trained_run, "--src", f"{corpus}/valid.en", "--ref", f"{corpus}/valid.de", "--json"
    )
    assert json.loads(by_split.stdout) == json.loads(by_hand.stdout)
    assert len((tmp_path / "h").read_text(encoding="utf-8").splitlines()) == 60
    missing = run_cli("mt-eval", "--checkpoint", trained_run, "--split", "test")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        "error: --split: the checkpoint's config has no test split (data.test)"
    )
    both = run_cli("mt-eval", "--checkpoint", trained_run, "--split", "valid", "--ref", f"{corpus}/valid.de")
    assert both.returncode == 2 and "leave out --src, --hyp and --ref" in both.stderr


@pytest.mark.slow
@pytest.mark.slow
def test_prepare_encodes_once_and_training_loads_it(corpus, tmp_path):
    out = tmp_path / "prepared"
    config = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(out), train={"max_steps": 2, "valid_every": 2}))
    prepared = run_cli("mt-prepare", "--config", config)
    assert prepared.returncode == 0, prepared.stderr
    assert re.search(r"^prepared train \d+ pairs, valid 60 pairs: tokenizer in ", prepared.stdout)
    assert (out / "spm.model").is_file() and not (out / "checkpoints").exists()
    trained = run_cli("mt-train", "--config", config)
    assert trained.returncode == 0, trained.stderr
    assert "training sentencepiece" not in trained.stderr
    assert re.search(r"train: \d+ pairs \(cache\)", trained.stderr) and "valid: 60 pairs (cache)" in trained.stderr
    missing = run_cli("mt-prepare", "--config", config, "--set", f"data.train={tmp_path}/none")
    assert missing.returncode == 2 and missing.stderr.strip().startswith("error: data.train: file not found")


def test_demo_commands_run_as_in_the_makefile(tmp_path):
    """`make demo` in miniature: the same commands and config, with fewer steps and less data."""
    data, run = tmp_path / "demo", tmp_path / "run"
    from mt_transformer.data.demo_data import main as generate

    generate([str(data), "--train", "3000", "--valid", "20", "--test", "20"])
    overrides = [
        f"data.train={data}/train",
        f"data.valid={data}/valid",
        f"data.test={data}/test",
        f"train.output_dir={run}",
        "train.max_steps=4",
        "train.valid_every=4",
        "train.log_every=2",
        "data.vocab_size=300",
    ]
    train = run_cli("mt-train", "--config", os.path.join(ROOT, "configs/demo.yaml"), "--set", *overrides)
    assert train.returncode == 0, train.stderr
    assert "valid BLEU" in train.stdout
    translate = run_cli("mt-translate", "--checkpoint", str(run), "-i", f"{data}/test.en", "-o", f"{run}/test.hyp.de")
    assert translate.returncode == 0, translate.stderr
    scored = run_cli("mt-eval", "--hyp", f"{run}/test.hyp.de", "--ref", f"{data}/test.de", "--metrics", "bleu", "chrf")
    assert scored.returncode == 0 and scored.stdout.startswith("BLEU = ")


def test_train_help_lists_every_config_key_with_its_default():
    import dataclasses

    from mt_transformer.config import Config

    shown = run_cli("mt-train", "--help")
    assert shown.returncode == 0, shown.stderr
    listing = shown.stdout.split("config keys and their defaults")[1]
    for section in dataclasses.fields(Config):
        assert f"{section.name}: " in listing
        for key in dataclasses.fields(getattr(Config(), section.name)):
            assert re.search(rf"(^|\s){key.name}=\S", listing), key.name
    for setting in ("spm_alpha=0.0", "target_tags=false", "init_from=null", "init_from_reset=true", "accumulate=1"):
        assert setting in listing


def test_sigterm_where_a_command_does_not_handle_it_ends_it_as_ctrl_c_does(tmp_path, capsys):
    """Exit code 143 after the command's `finally` and context managers ran: a temporary directory
    it held is gone (a killed mt-clean used to leave its spool)."""
    import signal
    import tempfile
    import threading
    import time

    from mt_transformer.cli.common import entry_point

    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals are handled in the main thread only")
    held = []

    @entry_point
    def command(argv):
        with tempfile.TemporaryDirectory(dir=tmp_path) as directory:
            held.append(directory)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(30)  # the signal's handler ends this at once

    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exit:
            command([])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert exit.value.code == 143 and held and not os.path.exists(held[0])
    assert capsys.readouterr().err.strip().splitlines()[-1] == "terminated"
