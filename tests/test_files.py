"""Atomic writes: a failure part-way leaves the old file whole and no temporary behind; JSON read
back with one-line errors."""

import os

import pytest

from mt_transformer.errors import UserError
from mt_transformer.files import atomic_path, read_json, write_bytes, write_text
from mt_transformer.outputs import atomic_dir


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


def test_written_files_and_directories_get_the_usual_permissions(tmp_path):
    mask = os.umask(0o022)
    try:
        write_text(str(tmp_path / "a.txt"), "x")
        with atomic_dir(str(tmp_path / "d"), written_by="mt-export") as tmp:
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
