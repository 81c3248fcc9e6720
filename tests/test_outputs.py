"""What a command may write over: never a protected path, a link, an input or what its marker does
not list; an earlier output swapped whole, and of it only what its marker lists removed. Every
test runs with a temporary HOME and working directory: none touches the real ones."""

import json
import os

import pytest

from mt_transformer.errors import UserError
from mt_transformer.files import write_text
from mt_transformer.outputs import (
    OUTPUT_MARKER,
    atomic_dir,
    check_output,
    claim_dir,
    protected,
    remove_written,
    replace_dir,
    unrelated_entries,
    written_by,
)


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A temporary home directory with a dotfile, and a working directory beside it."""
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    (home / ".bashrc").write_text("the user's own\n")
    monkeypatch.setenv("HOME", str(home))
    (tmp_path / "work" / "deep").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work" / "deep")
    return home


def export(path, command="mt-export") -> None:
    """An earlier output of `command` at `path`, with a subdirectory."""
    with atomic_dir(str(path), written_by=command) as tmp:
        os.makedirs(os.path.join(tmp, "sub"))
        write_text(os.path.join(tmp, "model.bin"), "weights")
        write_text(os.path.join(tmp, "sub", "vocab.txt"), "a\nb\n")


def test_the_marker_lists_every_file_with_its_size_and_every_directory(tmp_path, home):
    export(tmp_path / "out")
    with open(tmp_path / "out" / OUTPUT_MARKER, encoding="utf-8") as f:
        marker = json.load(f)
    assert marker == {"written_by": "mt-export", "files": {"model.bin": 7, "sub/vocab.txt": 4}, "directories": ["sub"]}
    assert unrelated_entries(str(tmp_path / "out")) == []


def test_protected_paths_are_never_replaced_even_with_force(tmp_path, home):
    cwd = os.getcwd()
    (tmp_path / "link_home").symlink_to(home)
    cases = {
        str(home): "the home directory",
        str(tmp_path): "it holds the home directory",
        str(tmp_path / "link_home"): "the home directory",  # a link is followed to what it names
        cwd: "the current directory",
        ".": "the current directory",
        str(tmp_path / "work"): "it holds the current directory",
        "/": "the file system's root",
    }
    for path, reason in cases.items():
        with pytest.raises(UserError, match=f"{reason}; mt-average never replaces it, even with --force"):
            check_output(path, "mt-average", force=True)
    assert (home / ".bashrc").read_text() == "the user's own\n"
    mounts = [line.split()[1] for line in open("/proc/mounts") if line.split()[1] not in ("/",)]
    mount = next((m for m in mounts if os.path.isdir(m) and os.path.ismount(m)), None)
    if mount:  # a mount point is never renamed aside
        assert protected(mount) == "a mount point"


def test_a_directory_holding_anything_the_marker_does_not_list_is_refused(tmp_path, home):
    out = tmp_path / "out"
    export(out)
    (out / "notes.txt").write_text("mine")  # one unrelated file beside an old export
    for force in (False, True):
        with pytest.raises(UserError, match=r"out: holds 1 entry that no earlier output of mt-export wrote \('notes"):
            check_output(str(out), "mt-export", force=force)
    assert (out / "notes.txt").read_text() == "mine" and (out / "model.bin").read_text() == "weights"
    os.remove(out / "notes.txt")
    (out / "model.bin").write_text("weights, edited")  # a listed file of another size is no longer ours
    (out / "sub" / "extra").mkdir()
    with pytest.raises(UserError, match=r"holds 2 entries .*\('model\.bin'\)"):
        check_output(str(out), "mt-export", force=True)
    # a marker copied into a directory of other files lists none of them
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    os.link(out / OUTPUT_MARKER, mine / OUTPUT_MARKER)
    with pytest.raises(UserError, match="holds 1 entry"):
        check_output(str(mine), "mt-export", force=True)
    # a marker of an unlisted kind (a run's) makes nothing replaceable
    claim_dir(str(tmp_path / "run"), "mt-train")
    (tmp_path / "run" / "config.yaml").write_text("x")
    with pytest.raises(UserError, match="holds 1 entry"):
        check_output(str(tmp_path / "run"), "mt-average", force=True)


def test_an_earlier_output_is_replaced_another_commands_with_force(tmp_path, home):
    export(tmp_path / "ct2")
    check_output(str(tmp_path / "ct2"), "mt-export")
    with pytest.raises(UserError, match="an output of mt-export, not of mt-average; add --force"):
        check_output(str(tmp_path / "ct2"), "mt-average")
    check_output(str(tmp_path / "ct2"), "mt-average", force=True)
    (tmp_path / "empty").mkdir()
    check_output(str(tmp_path / "empty"), "mt-average")
    check_output(str(tmp_path / "new"), "mt-average")


def test_files_links_and_inputs_are_refused(tmp_path, home):
    run = tmp_path / "run"
    (run / "checkpoints" / "step_1").mkdir(parents=True)
    for output in (run, tmp_path, run / "checkpoints" / "step_1"):  # the input, or a directory holding it
        with pytest.raises(UserError, match="would replace the input"):
            check_output(str(output), "mt-export", [str(run / "checkpoints" / "step_1")], force=True)
    (tmp_path / "a.txt").write_text("keep")
    with pytest.raises(UserError, match=r"a\.txt: a file is there, and mt-average writes a directory"):
        check_output(str(tmp_path / "a.txt"), "mt-average", force=True)
    export(tmp_path / "ct2")
    (tmp_path / "latest").symlink_to(tmp_path / "ct2")
    with pytest.raises(UserError, match="a symbolic link"):
        check_output(str(tmp_path / "latest"), "mt-export", force=True)
    # a command that writes a file replaces, with --force, only a file of its format
    is_ours = lambda path: open(path).read() == "package"  # noqa: E731
    (tmp_path / "b.pkg").write_text("package")
    check_output(str(tmp_path / "b.pkg"), "mt-export", force=True, file_format=is_ours)
    with pytest.raises(UserError, match=r"add --force"):
        check_output(str(tmp_path / "b.pkg"), "mt-export", file_format=is_ours)
    with pytest.raises(UserError, match="not one to replace"):
        check_output(str(tmp_path / "a.txt"), "mt-export", force=True, file_format=is_ours)
    with pytest.raises(UserError, match="a directory is there"):
        check_output(str(tmp_path / "ct2"), "mt-export", force=True, file_format=is_ours)
    assert (tmp_path / "a.txt").read_text() == "keep"


def test_replace_dir_swaps_the_whole_directory_and_removes_only_what_was_listed(tmp_path, home):
    final = tmp_path / "out"
    export(final)
    new = tmp_path / ".out.tmp"
    new.mkdir()
    (new / "model.bin").write_text("new")
    replace_dir(str(new), str(final))
    assert os.listdir(final) == ["model.bin"] and (final / "model.bin").read_text() == "new"
    (tmp_path / "empty").mkdir()
    with atomic_dir(str(tmp_path / "empty"), written_by="mt-export") as tmp:
        write_text(os.path.join(tmp, "model.bin"), "x")
    assert sorted(os.listdir(tmp_path)) == ["empty", "home", "out", "work"]  # nothing renamed aside is left
    # what appeared after the check is never removed: the swap is refused
    later = tmp_path / "later"
    export(later)
    (later / "late.txt").write_text("written while the export ran")
    new.mkdir()
    with pytest.raises(UserError, match="changed while the new output was written; nothing was replaced"):
        replace_dir(str(new), str(later))
    assert (later / "late.txt").exists() and (later / "model.bin").read_text() == "weights"
    # an output without a marker (the new one above) is no earlier output to replace
    with pytest.raises(UserError, match="holds 1 entry"):
        check_output(str(final), "mt-export", force=True)


def test_remove_written_keeps_what_the_marker_does_not_list(tmp_path, home):
    out = tmp_path / "out"
    export(out)
    (out / "sub" / "notes.txt").write_text("mine")
    assert remove_written(str(out)) == ["sub/notes.txt"]
    assert sorted(os.listdir(out)) == [OUTPUT_MARKER, "sub"] and os.listdir(out / "sub") == ["notes.txt"]
    # a forged marker naming a path outside the directory removes nothing there
    (tmp_path / "outside.txt").write_text("keep")
    forged = tmp_path / "forged"
    forged.mkdir()
    marker = {"written_by": "mt-export", "files": {"../outside.txt": 4}, "directories": [".."]}
    (forged / OUTPUT_MARKER).write_text(json.dumps(marker))
    assert remove_written(str(forged)) == []
    assert (tmp_path / "outside.txt").read_text() == "keep" and not forged.exists()


def test_claim_dir_writes_into_a_new_empty_or_own_directory_only(tmp_path, home):
    run = tmp_path / "run"
    claim_dir(str(run), "mt-train")
    assert written_by(str(run)) == "mt-train"
    (run / "metrics.jsonl").write_text("{}\n")
    claim_dir(str(run), "mt-train")  # again: its own
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "config.yaml").write_text("the user's own")
    with pytest.raises(UserError, match="mine holds files mt-train did not write"):
        claim_dir(str(mine), "mt-train")
    claim_dir(str(mine), "mt-train", also_ours=lambda path: True)  # known as a run by its contents
    for path, reason in ((home, "the home directory"), ("/", "the file system's root")):
        with pytest.raises(UserError, match=reason):
            claim_dir(str(path), "mt-train")
    assert sorted(os.listdir(home)) == [".bashrc", ".config"]
    claim_dir(".", "mt-train")  # a run may be written into the current directory: nothing is replaced


# Every module that writes a directory for the user (atomic_dir, claim_dir), and the command whose
# refusals the tests show: a new one fails the test below until it is added here with its tests.
DIRECTORY_WRITERS = {
    "mt_transformer.evaluation.average": "mt-average",
    "mt_transformer.decoding.ctranslate2_export": "mt-export --format ctranslate2, argos (and --engine auto's cache)",
    "mt_transformer.exchange.huggingface_export": "mt-export --format huggingface",
    "mt_transformer.exchange.huggingface_import": "mt-import",
    "mt_transformer.checkpoint.saving": "mt-train's checkpoints (train.keep_last removes them through remove_written)",
    "mt_transformer.data.prepare": "the encoded splits (mt-prepare, mt-train)",
    "mt_transformer.data.cache": "data.cache_dir, claimed before any work (mt-prepare, mt-train)",
    "mt_transformer.training.train": "train.output_dir",
    "mt_transformer.training.teacher": "a teacher's translations",
    "mt_transformer.data.cleaning": "a corpus's cleaned pairs (mt-prepare, mt-train)",
}
# What else moves or removes directories or replaces files, and why it loses nothing of the user's
OTHER_REMOVALS = {
    (
        "mt_transformer.files",
        "replace",
    ): "atomic_path: a file's temporary name onto it, after check_output or by design",
    ("mt_transformer.jobs.job", "replace"): "mt-translate -o: the finished partial file onto its output file",
    ("mt_transformer.checkpoint.saving", "rmtree"): "atomic_dir's temporary names a killed save left (SAVING_DIR)",
    (
        "mt_transformer.decoding.ctranslate2_export",
        "rmtree",
    ): "the float32 weights checked inside atomic_dir's directory",
    ("mt_transformer.exchange.huggingface_export", "rmtree"): "a scratch directory inside atomic_dir's directory",
}


def test_every_directory_writer_goes_through_the_check():
    import ast

    from test_architecture import modules

    writers, removals = set(), set()
    for name, path in modules().items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in ("atomic_dir", "claim_dir") and name != "mt_transformer.outputs":
                    writers.add(name)
                if called in ("rmtree", "rmdir", "removedirs", "rename", "replace", "move", "copytree"):
                    if isinstance(node.func, ast.Attribute) and getattr(node.func.value, "id", "") in ("os", "shutil"):
                        removals.add((name, called))
    assert writers == set(DIRECTORY_WRITERS)
    assert {r for r in removals if r[0] != "mt_transformer.outputs"} == set(OTHER_REMOVALS)
