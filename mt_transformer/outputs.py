"""What a command may write over: the one check every output goes through, and the atomic swap.

A directory a command writes for the user carries a marker (OUTPUT_MARKER) naming the command
and listing every file and directory it wrote, with each file's size. An output is replaced
only where it is recognisably an earlier one: an empty directory, a directory whose every entry
its marker lists (another command's only with --force), or, for a command that writes a file,
a file of that format with --force. Some paths are never replaced: the file system's root, the
home directory and what holds it, the current directory and what holds it, a mount point, and
whatever is or holds one of the command's inputs, nor a symbolic link (to them or anything).
A replaced output is swapped whole, and of the old one only the files its marker lists are
removed. A directory a command writes its files into and keeps (a run, a cache entry being
filled) is claimed with a marker that lists nothing: such a directory is never replaced.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import shutil
import stat
import tempfile
import uuid

from mt_transformer.errors import UserError
from mt_transformer.files import fsync_dir, holds, usual_modes, write_text

log = logging.getLogger(__name__)

OUTPUT_MARKER = ".mt_transformer"  # {"written_by": COMMAND, "files": {PATH: SIZE}, "directories": [PATH]}


def _read_marker(directory: str) -> dict:
    try:
        with open(os.path.join(directory, OUTPUT_MARKER), encoding="utf-8") as f:
            found = json.load(f)
    except (OSError, ValueError, RecursionError):
        return {}
    return found if isinstance(found, dict) else {}


def written_by(directory: str) -> str | None:
    """The command whose marker `directory` carries, or None."""
    command = _read_marker(directory).get("written_by")
    return command if isinstance(command, str) else None


def _listing(directory: str) -> tuple[dict[str, int], list[str]]:
    """Every file under `directory` with its size, and every directory, as paths relative to it."""
    files, directories = {}, []
    for root, subdirectories, names in os.walk(directory):
        for name in subdirectories:
            directories.append(os.path.relpath(os.path.join(root, name), directory))
        for name in names:
            path = os.path.join(root, name)
            files[os.path.relpath(path, directory)] = os.lstat(path).st_size
    files.pop(OUTPUT_MARKER, None)
    return files, sorted(directories)


def mark_output(directory: str, command: str, listed: bool = True) -> None:
    """Record in `directory` that `command` wrote it and, `listed`, each file and directory it holds
    now (the only ones a later replacement removes); unlisted: a directory that is written into
    and kept, never replaced."""
    marker = {"written_by": command}
    if listed:
        files, directories = _listing(directory)
        marker.update(files=files, directories=directories)
    write_text(os.path.join(directory, OUTPUT_MARKER), json.dumps(marker) + "\n")


def _entries(directory: str) -> tuple[list[str], list[str], list[str]]:
    """`directory`'s files and directories that its marker lists as written (a file by its size),
    and what else it holds (a file of another size, a link, anything added): the entries a
    replacement would lose. An unlisted directory counts once, unread. All as relative paths."""
    marker = _read_marker(directory)
    files, directories = marker.get("files"), marker.get("directories")
    if not (isinstance(files, dict) and isinstance(directories, list)):
        files, directories = {}, []
    written_files, written_directories, unrelated = [], [], []
    for root, subdirectories, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            status = os.lstat(path)
            if relative == OUTPUT_MARKER:
                continue
            listed = stat.S_ISREG(status.st_mode) and files.get(relative) == status.st_size
            (written_files if listed else unrelated).append(relative)
        known = []
        for name in subdirectories:
            relative = os.path.relpath(os.path.join(root, name), directory)
            if relative in directories and not os.path.islink(os.path.join(root, name)):
                known.append(name)
                written_directories.append(relative)
            else:
                unrelated.append(relative)
        subdirectories[:] = known
    return written_files, written_directories, sorted(unrelated)


def unrelated_entries(directory: str) -> list[str]:
    """What `directory` holds that its marker does not list as written (_entries)."""
    return _entries(directory)[2]


def _homes() -> set[str]:
    homes = {os.path.expanduser("~")}
    with contextlib.suppress(KeyError, OSError):
        homes.add(pwd.getpwuid(os.getuid()).pw_dir)
    return {os.path.realpath(home) for home in homes if home}


def protected(path: str, replaced: bool = True) -> str | None:
    """Why `path` (through any symbolic links) is never an output, or None: the root, the home
    directory or what holds it; to be `replaced`, also the current directory or what holds it,
    and a mount point (a run is written into them, never replacing them)."""
    real = os.path.realpath(path)
    if real == os.path.realpath(os.sep):
        return "the file system's root"
    for home in _homes():
        if holds(real, home):
            return "the home directory" if real == home else "it holds the home directory"
    if not replaced:
        return None
    with contextlib.suppress(OSError):
        cwd = os.path.realpath(os.getcwd())
        if holds(real, cwd):
            return "the current directory" if real == cwd else "it holds the current directory"
    if os.path.isdir(real) and os.path.ismount(real):
        return "a mount point"
    return None


def check_output(path: str, command: str, inputs=(), force: bool = False, file_format=None) -> None:
    """Refuse, before any work, an output whose replacement could lose what the user has.

    Never, even with `force`: a protected path (protected()), a symbolic link, an output that is
    or holds one of `inputs`, a directory holding anything its marker does not list. Replaced: a
    new path, an empty directory, an earlier output of `command` (of another command's only with
    `force`). `file_format`: for a command that writes a file, a test of whether a file is of its
    format; such a file is replaced with `force` (any other file or directory is refused)."""
    real = os.path.realpath(path)
    for given in inputs:
        if holds(real, os.path.realpath(given)):
            raise UserError(f"{path}: the output would replace the input {given}; write it elsewhere")
    reason = protected(path)
    if reason:
        raise UserError(f"{path}: {reason}; {command} never replaces it, even with --force: name a new path")
    if not os.path.lexists(path):
        return
    if os.path.islink(path):
        raise UserError(f"{path}: a symbolic link (to {os.readlink(path)}); name a new path or the link's target")
    if file_format is not None:
        if os.path.isdir(path):
            raise UserError(f"{path}: a directory is there; {command} writes a file here")
        if not (force and file_format(path)):
            what = "add --force to replace it" if file_format(path) else "it is not one to replace"
            raise UserError(f"{path}: a file is there; choose another output ({what})")
        return
    if not os.path.isdir(path):
        raise UserError(f"{path}: a file is there, and {command} writes a directory; choose another output")
    unrelated = unrelated_entries(path)
    if unrelated:
        count = f"{len(unrelated)} entr{'y' if len(unrelated) == 1 else 'ies'}"
        raise UserError(
            f"{path}: holds {count} that no earlier output of {command} wrote ({unrelated[0]!r}); "
            "choose a new or empty directory (--force replaces only earlier outputs)"
        )
    writer = written_by(path)
    if writer not in (None, command) and not force:
        raise UserError(f"{path}: an output of {writer}, not of {command}; add --force to replace it")


def claim_dir(path: str, command: str, also_ours=lambda path: False) -> None:
    """Make `path` a directory `command` writes its files into and keeps, marked unlisted (never
    replaced whole); refused where it is protected, a file, or a non-empty directory that has no
    marker of `command`'s and fails `also_ours` (earlier outputs known by their contents)."""
    reason = protected(path, replaced=False)
    if reason:
        raise UserError(f"{path}: {reason}; {command} writes into a directory of its own: name a new one")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise UserError(f"{path} is a file; name a directory")
    if os.path.isdir(path) and os.listdir(path) and written_by(path) != command and not also_ours(path):
        raise UserError(f"{path} holds files {command} did not write; choose a new or empty directory")
    try:
        os.makedirs(path, exist_ok=True)
        mark_output(path, command, listed=False)  # written each time: it also shows the directory is writable
    except OSError as error:
        raise UserError(f"cannot write to {path} ({error.strerror})") from None


def remove_written(directory: str) -> list[str]:
    """Remove from `directory` the files and directories its marker lists as written (a file
    whose size changed is kept), then the directory if nothing else is left; returns what is."""
    written_files, written_directories, kept = _entries(directory)
    for name in written_files:
        os.remove(os.path.join(directory, name))
    for name in reversed(written_directories):  # the deepest first
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(directory, name))
    if not kept:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(directory, OUTPUT_MARKER))
        with contextlib.suppress(OSError):
            os.rmdir(directory)
    return kept


def replace_dir(tmp_dir: str, final_dir: str) -> None:
    """Move a fully written directory into place. What stood there must still be what may be
    replaced (check_output: empty, or all listed by its marker); it is renamed to a hidden name
    beside the new one, and of it only what its marker lists is removed."""
    for name in os.listdir(tmp_dir):
        path = os.path.join(tmp_dir, name)
        if os.path.isfile(path):
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
    parent = os.path.dirname(os.path.abspath(final_dir))
    if not os.path.lexists(final_dir):
        os.replace(tmp_dir, final_dir)
    elif os.path.islink(final_dir) or not os.path.isdir(final_dir) or unrelated_entries(final_dir):
        raise UserError(f"{final_dir}: changed while the new output was written; nothing was replaced")
    else:
        trash = os.path.join(parent, f".{os.path.basename(os.path.abspath(final_dir))}.replaced-{uuid.uuid4().hex[:8]}")
        os.replace(final_dir, trash)
        try:
            os.replace(tmp_dir, final_dir)
        except OSError:
            os.replace(trash, final_dir)  # the earlier output back under its name
            raise
        kept = remove_written(trash)
        if kept:  # what appeared in the old output while it was being swapped
            log.warning("%s: kept %d entries the earlier output did not hold, in %s", final_dir, len(kept), trash)
    fsync_dir(parent)


@contextlib.contextmanager
def atomic_dir(final_dir: str, written_by: str | None):
    """Yield a new temporary directory beside `final_dir`; on success it replaces `final_dir`
    (replace_dir) marked as `written_by`'s, listing what it holds (None: no marker, for a part of
    another program's output), and on any error it is removed, leaving `final_dir` as it was."""
    parent = os.path.dirname(os.path.abspath(final_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(final_dir))}.", dir=parent)
    try:
        yield tmp
        if written_by is not None:
            mark_output(tmp, written_by)
        usual_modes(tmp)
        replace_dir(tmp, final_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the temporary directory made above, if still there
