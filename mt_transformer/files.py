"""Atomic file writing: write a temporary file beside the target, fsync, then rename.

A crash at any moment leaves either the old file or the new one, never half of one.
(And JSON read back with one-line errors, the size of a directory on disk, for reports, and
figures saved the same way.)
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile

from mt_transformer.errors import UserError


def fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _usual_mode(path: str, base: int) -> None:
    """Give a temporary file or directory (created private, 0600 / 0700) the permissions a plain
    open() or mkdir() would have given it, so colleagues can read a shared run directory."""
    os.chmod(path, base & ~_umask())


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield a temporary path in the target's directory; on success it replaces `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        _usual_mode(tmp, 0o666)
        os.replace(tmp, path)
        fsync_dir(directory)
    except OSError as error:
        if error.filename is None:  # a failed write names no file: name the one being written
            raise OSError(error.errno, error.strerror, path) from None
        raise
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


@contextlib.contextmanager
def atomic_dir(final_dir: str):
    """Yield a new temporary directory beside `final_dir`; on success it replaces `final_dir`
    (replace_dir), and on any error it is removed, leaving `final_dir` as it was."""
    parent = os.path.dirname(os.path.abspath(final_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(final_dir))}.", dir=parent)
    try:
        yield tmp
        _usual_mode(tmp, 0o777)
        replace_dir(tmp, final_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)


def write_bytes(path: str, data: bytes) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def read_json(path: str, what: str):
    """The JSON document at `path`; a missing or unreadable file is one line naming `what`."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: missing ({what})") from None
    except (OSError, ValueError):
        raise UserError(f"{path}: not readable JSON ({what})") from None


def replace_dir(tmp_dir: str, final_dir: str) -> None:
    """Move a fully written directory into place, replacing any old one of the same name."""
    for name in os.listdir(tmp_dir):
        path = os.path.join(tmp_dir, name)
        if os.path.isfile(path):
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
    if os.path.exists(final_dir):
        trash = f"{final_dir}.old"
        shutil.rmtree(trash, ignore_errors=True)
        os.replace(final_dir, trash)
        os.replace(tmp_dir, final_dir)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp_dir, final_dir)
    fsync_dir(os.path.dirname(os.path.abspath(final_dir)))


def user_cache_dir() -> str:
    """Where the project keeps what it makes once per machine or per read-only model:
    MT_CACHE_DIR, else $XDG_CACHE_HOME/mt_transformer, else ~/.cache/mt_transformer."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.environ.get("MT_CACHE_DIR") or os.path.join(home, "mt_transformer")


def directory_size(path: str) -> int:
    """Bytes of the files under `path`."""
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def save_png(figure, path: str) -> None:
    """A matplotlib figure written atomically to `path` as PNG."""
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
