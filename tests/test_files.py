"""Atomic writes: a failure part-way leaves the old file (or directory) whole and no temporary behind;
JSON read back with one-line errors."""

import os

import pytest

from mt_transformer.errors import UserError
from mt_transformer.files import (
    OUTPUT_MARKER,
    atomic_dir,
    atomic_path,
    check_output,
    mark_output,
    read_json,
    replace_dir,
    write_bytes,
    write_text,
    written_by,
)


def test_write_text_replaces_the_file_whole(tmp_path):
    path = tmp_path / "out.txt"
    write_text(str(path), "old\n")
    write_text(str(path), "new\n")
    write_bytes(str(tmp_path / "b.bin"), b"\x00\x01")
    assert path.read_text() == "new\n" and (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert sorted(os.listdir(tmp_path)) == ["b.bin", "out.txt"]


def test_a_failure_while_writing_keeps_the_old_file(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old\n")
    with pytest.raises(OSError):
        with atomic_path(str(path)) as tmp:
            with open(tmp, "w") as f:
                f.write("half of the new")
            raise OSError(28, "No space left on device")
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["out.txt"]


def test_replace_dir_swaps_a_whole_directory(tmp_path):
    final = tmp_path / "step"
    final.mkdir()
    (final / "a").write_text("old")
    new = tmp_path / ".step.tmp"
    new.mkdir()
    (new / "a").write_text("new")
    (new / "b").write_text("new")
    replace_dir(str(new), str(final))
    assert sorted(os.listdir(final)) == ["a", "b"] and (final / "a").read_text() == "new"
    assert os.listdir(tmp_path) == ["step"]


def test_written_files_and_directories_get_the_usual_permissions(tmp_path):
    mask = os.umask(0o022)
    try:
        write_text(str(tmp_path / "a.txt"), "x")
        with atomic_dir(str(tmp_path / "d")) as tmp:
            write_text(os.path.join(tmp, "f"), "y")
    finally:
        os.umask(mask)
    # not the 0600 / 0700 of the temporary names: a shared run directory stays readable
    assert (tmp_path / "a.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "d" / "f").stat().st_mode & 0o777 == 0o644


def test_read_json_names_the_file_and_what_it_holds(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"beam": 4}', encoding="utf-8")
    assert read_json(str(path), "the settings") == {"beam": 4}
    path.write_text('{"beam": ', encoding="utf-8")
    with pytest.raises(UserError, match=r"settings\.json: not readable JSON \(the settings\)$"):
        read_json(str(path), "the settings")
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(UserError, match="not readable JSON"):
        read_json(str(path), "the settings")
    with pytest.raises(UserError, match=r"absent\.json: missing \(the settings\)$"):
        read_json(str(tmp_path / "absent.json"), "the settings")


def test_check_output_refuses_what_would_lose_the_users_files(tmp_path):
    inputs = tmp_path / "run"
    (inputs / "checkpoints" / "step_1").mkdir(parents=True)
    for output in (inputs, tmp_path, inputs / "checkpoints" / "step_1"):  # the input, or a directory holding it
        with pytest.raises(UserError, match="would replace the input"):
            check_output(str(output), "mt-export", [str(inputs / "checkpoints" / "step_1")], force=True)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    (tmp_path / "a.txt").write_text("keep")
    with pytest.raises(UserError, match="mine: a directory mt-export did not write, and not empty; .* --force"):
        check_output(str(tmp_path / "mine"), "mt-export")
    with pytest.raises(UserError, match=r"a\.txt: a file is there"):
        check_output(str(tmp_path / "a.txt"), "mt-export")
    (tmp_path / "empty").mkdir()
    mark_output(str(tmp_path / "mine"), "mt-average")  # another command's output is not this one's
    with pytest.raises(UserError, match="did not write"):
        check_output(str(tmp_path / "mine"), "mt-export")
    for allowed in ("empty", "new", "mine"):
        check_output(str(tmp_path / allowed), "mt-average")
    check_output(str(tmp_path / "a.txt"), "mt-export", force=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep" and (tmp_path / "a.txt").read_text() == "keep"


def test_a_forced_replacement_leaves_nothing_renamed_aside(tmp_path):
    (tmp_path / "out").write_text("a file the user had")
    with atomic_dir(str(tmp_path / "out"), written_by="mt-export") as tmp:
        write_text(os.path.join(tmp, "model.bin"), "x")
    assert written_by(str(tmp_path / "out")) == "mt-export"
    assert sorted(os.listdir(tmp_path / "out")) == [OUTPUT_MARKER, "model.bin"]
    assert os.listdir(tmp_path) == ["out"]  # no out.old, no hidden leftover
