"""The CTranslate2 conversion of a checkpoint, made the first time --engine auto needs it and
reused by every later process. Conversions live in the user's cache (MT_CACHE_DIR, else
$XDG_CACHE_HOME/mt_transformer, else ~/.cache/mt_transformer), never in the checkpoint, which
may be read-only or shared, under a key made of the contents they were converted from:

    ctranslate2/<key>/       mt-export --format ctranslate2 (float32) of the checkpoint whose
                             weights, settings and tokenizer files hash (SHA-256) to <key>, with
                             our converter's and CTranslate2's versions
    ctranslate2/.<key>.lock  held while one process converts; the others wait, then reuse it
    digests/<name>           one file's SHA-256, remembered under its device, inode, size and
                             modification and change times: a copy or a rewrite of the file
                             changes its change time, which no program can set back

Only a conversion made here is used: a ctranslate2/ directory that arrived inside a checkpoint
is never read, and a checkpoint whose files changed gets a conversion of its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time

from mt_transformer import checkpoint
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.decoding.ctranslate2_engine import import_ctranslate2
from mt_transformer.errors import UserError
from mt_transformer.files import directory_size, file_digest, read_json, user_cache_dir

log = logging.getLogger(__name__)

CONVERSION_DIR = "ctranslate2"
CONVERTER_VERSION = 4  # raised when the conversion itself changes, so older ones are made again


def source_signature(directory: str) -> dict:
    """What a conversion of checkpoint `directory` is made from: the SHA-256 of its weights,
    settings and tokenizer files, our converter's version and CTranslate2's."""
    names = [checkpoint.MODEL_FILE, checkpoint.CONFIG_FILE, *Tokenizer(directory).files]
    files = {name: file_digest(os.path.join(directory, name)) for name in names}
    return {"files": files, "converter": CONVERTER_VERSION, "ctranslate2": import_ctranslate2().__version__}


def conversion_dir(signature: dict) -> str:
    """Where the conversion of the checkpoint of `signature` lives in the user's cache."""
    key = hashlib.sha256(json.dumps(signature, sort_keys=True).encode()).hexdigest()[:32]
    return os.path.join(user_cache_dir(), CONVERSION_DIR, key)


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
    there is none of its present files; several processes asking at once make it once."""
    directory = checkpoint.resolve(path)
    signature = source_signature(directory)
    target = conversion_dir(signature)
    if _is_current(target, signature):
        return target
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
    except OSError as error:
        raise UserError(f"{os.path.dirname(target)}: the conversion cache cannot be made ({error.strerror})") from None
    with _exclusive(os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.lock")):
        if _is_current(target, signature):  # another process made it while this one waited
            return target
        from mt_transformer.decoding.ctranslate2_export import export  # torch: only to convert

        start = time.perf_counter()
        gap = export(checkpoint.load(directory, "cpu"), target, extra={"source": signature})
        log.info(
            "converted %s for CTranslate2 in %.1f s (%.1f MB, log-probabilities within %.1g of ours): %s",
            directory,
            time.perf_counter() - start,
            directory_size(target) / 1e6,
            gap,
            target,
        )
    return target
