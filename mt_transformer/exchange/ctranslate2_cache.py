"""The CTranslate2 conversion of a checkpoint, made the first time --engine auto needs it and
reused by every later process:

    checkpoints/step_00001000/
        ctranslate2/        mt-export --format ctranslate2 of this checkpoint (float32), with the
                            size and modification time of each file it was made from
        .ctranslate2.lock   held while one process converts; the others wait, then reuse it

A checkpoint directory that cannot be written (a shared, read-only model) keeps its conversion
in the user's cache instead (MT_CACHE_DIR, else $XDG_CACHE_HOME/mt_transformer, else
~/.cache/mt_transformer), under a name made from the checkpoint's path. A conversion whose
files, our converter or the installed CTranslate2 changed since it was made is made again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import time

import torch

from mt_transformer import checkpoint
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.decoding.ctranslate2_engine import import_ctranslate2
from mt_transformer.errors import UserError
from mt_transformer.exchange.ctranslate2_export import export
from mt_transformer.files import directory_size, read_json, user_cache_dir

log = logging.getLogger(__name__)

CONVERSION_DIR = "ctranslate2"
CONVERTER_VERSION = 2  # raised when the conversion itself changes, so older ones are made again


def source_signature(directory: str) -> dict:
    """What a conversion of checkpoint `directory` was made from: the size and modification time
    of its weights, settings and tokenizer files, our converter's version and CTranslate2's."""
    names = [checkpoint.MODEL_FILE, checkpoint.CONFIG_FILE, *Tokenizer(directory).files]
    files = {}
    for name in names:
        status = os.stat(os.path.join(directory, name))
        files[name] = [status.st_size, status.st_mtime_ns]
    return {"files": files, "converter": CONVERTER_VERSION, "ctranslate2": import_ctranslate2().__version__}


def conversion_dir(directory: str) -> str:
    """Where checkpoint `directory`'s conversion lives: inside it where it can be written, else in
    the user's cache."""
    if _writable(directory):
        return os.path.join(directory, CONVERSION_DIR)
    key = hashlib.sha256(os.path.realpath(directory).encode()).hexdigest()[:16]
    return os.path.join(user_cache_dir(), CONVERSION_DIR, f"{os.path.basename(directory)}-{key}")


def _writable(directory: str) -> bool:
    """Whether files can be made in `directory` (tried: permissions alone miss read-only mounts)."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


def _is_current(target: str, signature: dict) -> bool:
    settings_path = os.path.join(target, checkpoint.EXPORT_SETTINGS_FILE)
    if not os.path.isfile(os.path.join(target, "model.bin")) or not os.path.isfile(settings_path):
        return False
    try:
        return read_json(settings_path, "the conversion's settings").get("source") == signature
    except (UserError, AttributeError):  # a damaged record: made again
        return False


@contextlib.contextmanager
def _exclusive(lock_path: str):
    """Held by one process at a time (an advisory lock, released when the process ends, even
    killed); where there is no fcntl, the atomic rename of the conversion alone keeps it whole."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock_path, "a") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def cached_conversion(path: str) -> str:
    """The directory of the CTranslate2 conversion of checkpoint (or run) `path`, made now if
    there is none or its checkpoint changed since; several processes asking at once make it once."""
    directory = checkpoint.resolve(path)
    target = conversion_dir(directory)
    signature = source_signature(directory)
    if _is_current(target, signature):
        return target
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with _exclusive(os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.lock")):
        if _is_current(target, signature):  # another process made it while this one waited
            return target
        start = time.perf_counter()
        gap = export(checkpoint.load(directory, torch.device("cpu")), target, extra={"source": signature})
        log.info(
            "converted %s for CTranslate2 in %.1f s (%.1f MB, log-probabilities within %.1g of ours): %s",
            directory,
            time.perf_counter() - start,
            directory_size(target) / 1e6,
            gap,
            target,
        )
    return target
