"""A run's checkpoint directories: their names and files, which of them are complete, the best
one, pruning, and which checkpoint a path stands for."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re

from mt_transformer.config import Config, ConfigError, config_from_dict
from mt_transformer.errors import UserError
from mt_transformer.files import read_json, write_text
from mt_transformer.outputs import remove_written

log = logging.getLogger(__name__)

MODEL_FILE, CONFIG_FILE, TRAINER_FILE, BEST_FILE = "model.safetensors", "config.json", "trainer.pt", "best.json"
# what an export (mt-export: CTranslate2, transformers) records of the checkpoint it came from
EXPORT_SETTINGS_FILE = "mt_transformer.json"
STEP_DIR = re.compile(r"^step_(\d+)$")
SAVING_DIR = re.compile(r"^\.step_\d+\.[a-z0-9_]{8}$")  # atomic_dir's temporary name for a checkpoint being saved
WRITER = "mt-train"  # whose marker a run and its checkpoints carry (mt-prepare prepares the same run)


def checkpoint_root(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def step_name(step: int) -> str:
    return f"step_{step:08d}"


def step_dir(run_dir: str, step: int) -> str:
    return os.path.join(checkpoint_root(run_dir), step_name(step))


def list_checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """Complete checkpoints of a run, oldest first, as (step, directory)."""
    root = checkpoint_root(run_dir)
    if not os.path.isdir(root):
        return []
    found = []
    for name in os.listdir(root):
        match = STEP_DIR.match(name)
        path = os.path.join(root, name)
        if match and all(os.path.isfile(os.path.join(path, f)) for f in (MODEL_FILE, CONFIG_FILE, TRAINER_FILE)):
            found.append((int(match.group(1)), path))
    return sorted(found)


def read_best(run_dir: str) -> dict | None:
    path = os.path.join(checkpoint_root(run_dir), BEST_FILE)
    return read_json(path, "the best checkpoint's record") if os.path.isfile(path) else None


def write_best(run_dir: str, step: int, bleu: float) -> None:
    write_text(
        os.path.join(checkpoint_root(run_dir), BEST_FILE),
        json.dumps({"step": step, "bleu": bleu, "dir": step_name(step)}),
    )


def prune(run_dir: str, keep_last: int) -> None:
    """Delete all but the newest `keep_last` checkpoints, always keeping the best (0 keeps all):
    of each, the files its marker lists as written (what else is there stays)."""
    if keep_last <= 0:
        return
    best = read_best(run_dir)
    for step, path in list_checkpoints(run_dir)[:-keep_last]:
        if (best is None or step != best["step"]) and remove_written(path):
            log.warning("%s: kept, as its marker does not list all it holds (files added, or an older save)", path)


def resolve(path: str) -> str:
    """A checkpoint directory from a checkpoint directory or a run directory (its best, else its last)."""
    if os.path.isfile(os.path.join(path, MODEL_FILE)):
        return path
    if os.path.isfile(path):
        raise UserError(
            f"{path}: a file, not a checkpoint; mt_transformer checkpoints are directories holding "
            f"{MODEL_FILE} (pickled checkpoints are never loaded)"
        )
    if not os.path.isdir(path):
        raise UserError(f"{path}: no such checkpoint or run directory")
    best = read_best(path)
    if best is not None and os.path.isdir(os.path.join(checkpoint_root(path), best["dir"])):
        return os.path.join(checkpoint_root(path), best["dir"])
    found = list_checkpoints(path)
    if not found:
        raise UserError(f"{path}: no checkpoint found (expected {MODEL_FILE} or a run directory with checkpoints/)")
    return found[-1][1]


def identity(path: str) -> str:
    """The checkpoint a path stands for and a digest of its files' names, sizes and times: a run
    whose best checkpoint changed, or a checkpoint written anew, is another model (what is made
    beside its files, such as its CTranslate2 conversion, does not count)."""
    try:
        directory = resolve(path)
    except UserError:  # an mt-export directory, or a path that loading will report
        directory = path
    files = []
    if os.path.isdir(directory):
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.is_file() and not entry.name.startswith("."):
                stat = entry.stat()
                files.append(f"{entry.name} {stat.st_size} {stat.st_mtime_ns}")
    digest = hashlib.blake2b("\n".join(files).encode(), digest_size=8).hexdigest()
    return f"{os.path.abspath(directory)} ({digest})"


def read_metadata(directory: str) -> dict:
    return read_json(os.path.join(directory, CONFIG_FILE), "the checkpoint's settings", dict)


def read_config(directory: str, metadata: dict | None = None) -> Config:
    """The config a checkpoint directory's model was trained with (from its `metadata` when the
    caller has read them already)."""
    where = os.path.join(directory, CONFIG_FILE)
    try:
        return config_from_dict((metadata if metadata is not None else read_metadata(directory))["config"])
    except (KeyError, TypeError):
        raise UserError(f"{where}: not an mt_transformer checkpoint config") from None
    except ConfigError as error:
        raise UserError(f"{where}: {error}") from None
