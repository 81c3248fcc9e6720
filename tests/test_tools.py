"""mt-export, mt-import, mt-average and mt-train on real runs: an output that is or holds an input,
a directory they did not write, or a file is refused in one line (exit 2) and left as it was;
their own earlier output is replaced whole."""

import os
import shutil

import pytest

from conftest import run_cli, tiny_config, write_config
from mt_transformer.outputs import OUTPUT_MARKER, written_by


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


def test_a_directory_or_file_the_command_did_not_write_is_refused_even_with_force(run, tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (tmp_path / "notes.txt").write_text("keep me")
    for force in ([], ["--force"]):
        for output in (mine, tmp_path / "notes.txt"):
            what = "holds 1 entry" if output == mine else "a file is there"
            refused(run_cli("mt-export", "--checkpoint", run, "--format", "ctranslate2", str(output), *force), what)
            refused(run_cli("mt-average", "--inputs", run, "--last", "1", "--output", str(output), *force), what)
            refused(run_cli("mt-import", "--format", "huggingface", run, str(output), *force), what)
        refused(
            run_cli("mt-export", "--checkpoint", run, "--format", "argos", str(mine), *force), "a directory is there"
        )
        refused(run_cli("mt-export", "--checkpoint", run, "--format", "argos", str(tmp_path / "notes.txt"), *force))
    assert tree(mine) == {"thesis.tex": b"years of work"}
    assert (tmp_path / "notes.txt").read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == ["mine", "notes.txt", "run"]


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A temporary home directory with a dotfile and a virtual environment, and a working
    directory beside it: the real ones are never touched."""
    home = tmp_path / "home"
    (home / "venv" / "bin").mkdir(parents=True)
    (home / "venv" / "bin" / "python").write_text("#!")
    (home / ".bashrc").write_text("the user's own\n")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    return home


def test_the_home_and_current_directories_and_links_to_them_are_never_replaced(run, tmp_path, home):
    before = tree(home)
    (tmp_path / "to_home").symlink_to(home)
    step = os.path.join(run, "checkpoints", sorted(os.listdir(os.path.join(run, "checkpoints")))[-1])
    for output, reason in (
        (home, "the home directory"),
        (tmp_path / "to_home", "the home directory"),
        (".", "the current directory"),
    ):
        result = run_cli("mt-average", "--inputs", step, step, "--output", str(output), "--force")
        refused(result, reason, "never replaces it, even with --force")
    assert tree(home) == before and os.path.islink(tmp_path / "to_home") and os.listdir(".") == []


def test_an_earlier_export_is_replaced_and_one_beside_other_files_is_kept(run, tmp_path, home):
    out = tmp_path / "ct2"
    for force in ([], ["--force"]):
        result = run_cli("mt-export", "--checkpoint", run, "--format", "ctranslate2", str(out), *force)
        assert result.returncode == 0, result.stderr
    result = run_cli("mt-average", "--inputs", run, "--last", "1", "--output", str(out), "--force")
    assert result.returncode == 0, result.stderr  # another command's earlier output, with --force
    assert written_by(str(out)) == "mt-average" and "model.bin" not in os.listdir(out)
    (out / "README.md").write_text("how we deploy this model")
    before = tree(out)
    result = run_cli("mt-average", "--inputs", run, "--last", "1", "--output", str(out), "--force")
    refused(result, "holds 1 entry that no earlier output of mt-average wrote ('README.md')")
    assert tree(out) == before and sorted(os.listdir(tmp_path)) == ["ct2", "home", "run", "work"]


def test_every_command_that_writes_a_directory_refuses_the_home_directory(run, corpus, tmp_path, home):
    before = tree(home)
    commands = [
        ("mt-average", "--inputs", run, "--last", "1", "--output", home, "--force"),
        *(("mt-export", "--checkpoint", run, "--format", f, home, "--force") for f in ("ctranslate2", "huggingface")),
        ("mt-export", "--checkpoint", run, "--format", "argos", home, "--force"),
        ("mt-import", "--format", "huggingface", run, home, "--force"),
    ]
    for command in commands:
        refused(run_cli(*map(str, command)), "the home directory")
    train = write_config(tmp_path / "train.yaml", tiny_config(corpus, str(home), train={"max_steps": 1}))
    refused(run_cli("mt-train", "--config", train), "train.output_dir", "the home directory")
    cached = tiny_config(corpus, str(tmp_path / "r"), train={"max_steps": 1})
    cached["data"]["cache_dir"] = str(home)
    refused(run_cli("mt-prepare", "--config", write_config(tmp_path / "c.yaml", cached)), "data.cache_dir", "home")
    assert tree(home) == before


def test_the_cache_and_the_teachers_outputs_go_through_the_same_check(run, corpus, tmp_path, home, monkeypatch):
    import torch

    from mt_transformer.config import DataConfig
    from mt_transformer.data import prepare
    from mt_transformer.errors import UserError
    from mt_transformer.training import teacher

    key = "0123456789abcdef01234567"
    monkeypatch.setattr(prepare, "cache_key", lambda *args: key)
    monkeypatch.setattr(teacher, "cache_key", lambda *args: key)
    for entry in (key, f"teacher-{key}"):  # a directory of the user's where an entry would go
        os.makedirs(tmp_path / "cache" / entry)
        (tmp_path / "cache" / entry / "notes.txt").write_text("mine")
    config = tiny_config(corpus, str(tmp_path / "r"), train={"max_steps": 1})
    config["data"]["cache_dir"] = str(tmp_path / "cache")
    result = run_cli("mt-prepare", "--config", write_config(tmp_path / "c.yaml", config))
    refused(result, "holds 1 entry that no earlier output of mt-prepare wrote ('notes.txt')")
    data = DataConfig(
        src_lang="en", tgt_lang="de", train=f"{corpus}/train", teacher=(run,), cache_dir=config["data"]["cache_dir"]
    )
    with pytest.raises(UserError, match="holds files mt-prepare did not write"):
        teacher.distilled_corpora(data, str(tmp_path / "r"), torch.device("cpu"))
    assert all((tmp_path / "cache" / e / "notes.txt").read_text() == "mine" for e in (key, f"teacher-{key}"))


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
    refused(
        run_cli("mt-average", "--inputs", run, "--last", "1", "--output", str(ct2)), "not of mt-average; add --force"
    )


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
