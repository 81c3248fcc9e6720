"""mt-export, mt-import, mt-average and mt-train on real runs: an output that is or holds an input,
a directory they did not write, or a file is refused in one line (exit 2) and left as it was;
their own earlier output is replaced whole."""

import os
import shutil

import pytest

from conftest import run_cli, tiny_config, write_config
from mt_transformer.files import OUTPUT_MARKER, written_by


def tree(path) -> dict:
    """Every file under `path` with its bytes: what a refused command must leave as it was."""
    found = {}
    for root, _, names in os.walk(path):
        for name in names:
            full = os.path.join(root, name)
            with open(full, "rb") as f:
                found[os.path.relpath(full, path)] = f.read()
    return found


@pytest.fixture
def run(trained_run, tmp_path) -> str:
    """A copy of the trained run, so a command that wrongly deletes it harms no other test."""
    copy = tmp_path / "run"
    shutil.copytree(trained_run, copy)
    return str(copy)


def refused(result, *phrases) -> None:
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and "Traceback" not in result.stderr
    for phrase in phrases:
        assert phrase in line, line


def test_an_output_that_is_or_holds_an_input_is_refused(run, corpus, tmp_path):
    sources = shutil.copy(f"{corpus}/test.en", tmp_path / "check.en")
    before = tree(run)
    step = sorted(os.listdir(os.path.join(run, "checkpoints")))[0]
    step_dir = os.path.join(run, "checkpoints", step)
    for command in (
        ("mt-export", "--checkpoint", run, "--format", "ctranslate2", run),
        ("mt-export", "--checkpoint", run, "--format", "huggingface", run, "--force"),
        ("mt-export", "--checkpoint", run, "--format", "argos", "--check-src", sources, sources, "--force"),
        ("mt-average", "--inputs", step_dir, "--output", run, "--force"),
        ("mt-average", "--inputs", run, "--last", "1", "--output", tmp_path),
        ("mt-import", "--format", "huggingface", run, run),
    ):
        refused(run_cli(*map(str, command)), "would replace the input")
    assert tree(run) == before and os.path.getsize(sources) > 0


def test_a_directory_or_file_the_command_did_not_write_is_refused_unless_forced(run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (tmp_path / "notes.txt").write_text("keep me")
    for output in (mine, tmp_path / "notes.txt"):
        refused(run_cli("mt-export", "--checkpoint", run, "--format", "ctranslate2", str(output)), "--force")
        refused(run_cli("mt-average", "--inputs", run, "--last", "1", "--output", str(output)), "--force")
        refused(run_cli("mt-import", "--format", "huggingface", run, str(output)), "--force")
    refused(run_cli("mt-export", "--checkpoint", run, "--format", "argos", str(mine)), "a directory is there")
    assert tree(mine) == {"thesis.tex": b"years of work"}
    assert (tmp_path / "notes.txt").read_text() == "keep me" and not os.path.exists(f"{tmp_path}/notes.txt.old")
    # forced, the file is replaced and nothing is left beside it
    result = run_cli("mt-average", "--inputs", run, "--last", "1", "--output", str(tmp_path / "notes.txt"), "--force")
    assert result.returncode == 0, result.stderr
    assert written_by(str(tmp_path / "notes.txt")) == "mt-average"
    assert sorted(os.listdir(tmp_path)) == ["mine", "notes.txt", "run"]


def test_a_command_replaces_its_own_earlier_output_whole(run, tmp_path):
    out = tmp_path / "avg"
    for _ in range(2):
        result = run_cli("mt-average", "--inputs", run, "--last", "1", "--output", str(out))
        assert result.returncode == 0, result.stderr
    assert OUTPUT_MARKER in os.listdir(out) and sorted(os.listdir(tmp_path)) == ["avg", "run"]
    # a checkpoint directory with model.safetensors 0644, readable by the colleagues of a shared disk
    mask = os.umask(0o022)
    try:
        result = run_cli("mt-average", "--inputs", run, "--last", "1", "--output", str(out))
    finally:
        os.umask(mask)
    assert result.returncode == 0, result.stderr
    assert (out / "model.safetensors").stat().st_mode & 0o777 == 0o644
    # an export written by mt-export is replaced by mt-export, not by mt-average
    ct2 = tmp_path / "ct2"
    for _ in range(2):
        result = run_cli("mt-export", "--checkpoint", run, "--format", "ctranslate2", str(ct2))
        assert result.returncode == 0, result.stderr
    assert written_by(str(ct2)) == "mt-export" and (ct2 / "model.bin").stat().st_mode & 0o777 == 0o644
    refused(run_cli("mt-average", "--inputs", run, "--last", "1", "--output", str(ct2)), "mt-average did not write")


def test_training_into_a_directory_of_other_files_is_refused(corpus, run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_text("the user's own\n")
    config = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(mine), train={"max_steps": 1}))
    result = run_cli("mt-train", "--config", config)
    refused(result, "train.output_dir", "mt-train did not write")
    assert tree(mine) == {"config.yaml": b"the user's own\n"}
    # the run's own directory, and a run without the marker that holds checkpoints, are mt-train's
    os.remove(os.path.join(run, OUTPUT_MARKER))
    config = write_config(tmp_path / "c.yaml", tiny_config(corpus, run, train={"max_steps": 1}))
    result = run_cli("mt-train", "--config", config)
    assert result.returncode == 0, result.stderr
    assert written_by(run) == "mt-train"


def test_a_run_is_known_by_its_marker_its_checkpoints_or_its_tokenizer(run, tmp_path):
    from mt_transformer.data.tokenizer import Tokenizer
    from mt_transformer.training.train import is_run_dir

    assert is_run_dir(run)
    prepared = tmp_path / "prepared"  # what the Python API's run_tokenizer leaves before training
    prepared.mkdir()
    for name in [*Tokenizer(run).files, "tokenizer.json"]:
        shutil.copy(os.path.join(run, name), prepared / name)
    assert is_run_dir(str(prepared))
    os.remove(prepared / "tokenizer.json")  # sentencepiece files alone may be anyone's
    assert not is_run_dir(str(prepared))
