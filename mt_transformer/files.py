"""Atomic file writing: write a temporary file beside the target, fsync, then rename.

A crash at any moment leaves either the old file or the new one, never half of one (directories:
outputs.py). And JSON read back with one-line errors, files' digests, the size of a directory on
disk, for reports, and figures saved the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile

from safetensors import SafetensorError

from mt_transformer.errors import UserError

# how a full disk shows while weights are written: torch.save raises a RuntimeError, safetensors its own
WRITE_ERRORS = (OSError, RuntimeError, SafetensorError)


def write_error_reason(error: Exception) -> str:
    """One line saying why a write failed (No space left on device, ...)."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return (str(error).splitlines() or [type(error).__name__])[0][:200]


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


def usual_modes(directory: str) -> None:
    """The usual permissions for `directory` and all below it: some writers (safetensors) create
    their files private, 0600."""
    _usual_mode(directory, 0o777)
    for root, directories, files in os.walk(directory):
        for name in directories:
            _usual_mode(os.path.join(root, name), 0o777)
        for name in files:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                _usual_mode(path, 0o777 if os.stat(path).st_mode & 0o111 else 0o666)


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


def write_text(path: str, text: str) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)


def write_bytes(path: str, data: bytes) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)


def holds(outer: str, inner: str) -> bool:
    """Whether the real path `inner` is `outer` or lies below it."""
    return outer == inner or inner.startswith(outer.rstrip(os.sep) + os.sep)


def read_json(path: str, what: str, kind: type | None = None, within: str | None = None):
    """The JSON document at `path`, the one reader of JSON a user hands over; one line naming
    `what` where it is missing, no UTF-8 JSON, nested deeper than Python's stack, not of `kind`
    (dict: an object, list: an array), or (`within`: a directory) reached by a link out of it."""
    if within is not None:
        if os.path.lexists(path) and not holds(os.path.realpath(within), os.path.realpath(path)):
            raise UserError(f"{path}: a link out of {within} ({what}); not read")
    try:
        with open(path, encoding="utf-8") as f:
            found = json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: missing ({what})") from None
    except (OSError, ValueError, RecursionError):  # RecursionError: nested deeper than Python's stack
        raise UserError(f"{path}: not readable JSON ({what})") from None
    if kind is not None and not isinstance(found, kind):
        shape = {dict: "an object", list: "an array"}.get(kind, kind.__name__)
        raise UserError(f"{path}: not {shape} of JSON ({what})")
    return found


def user_cache_dir() -> str:
    """Where the project keeps what it makes once per machine or per read-only model:
    MT_CACHE_DIR, else $XDG_CACHE_HOME/mt_transformer, else ~/.cache/mt_transformer."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return os.environ.get("MT_CACHE_DIR") or os.path.join(home, "mt_transformer")


def file_digest(path: str) -> str:
    """The SHA-256 of a file's bytes, computed once per version of the file: remembered in the
    user's cache (digests/) under its device, inode, size and modification and change times (a
    copy or a rewrite of the file changes its change time, which no program can set back)."""
    status = os.stat(path)
    stamp = f"{os.path.realpath(path)}|{status.st_dev}|{status.st_ino}|{status.st_size}|"
    stamp += f"{status.st_mtime_ns}|{status.st_ctime_ns}"
    memo = os.path.join(user_cache_dir(), "digests", hashlib.sha256(stamp.encode()).hexdigest()[:32])
    with contextlib.suppress(OSError, UnicodeDecodeError):
        with open(memo, encoding="ascii") as f:
            remembered = f.read().strip()
        if len(remembered) == 64:
            return remembered
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs the next hash
        write_text(memo, digest.hexdigest() + "\n")
    return digest.hexdigest()


def directory_size(path: str) -> int:
    """Bytes of the files under `path`."""
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def save_png(figure, path: str) -> None:
    """A matplotlib figure written atomically to `path` as PNG."""
    with atomic_path(path) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
