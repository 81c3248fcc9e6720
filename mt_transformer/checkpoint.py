"""Checkpoints: one directory per save, self-contained and safe to load.

    checkpoints/step_00001000/
        model.safetensors   weights (no pickle)
        config.json         the run's config, vocabulary sizes, step
        trainer.pt          optimizer, scheduler, scaler, data position, RNG states
                            (tensors and plain containers, loaded with weights_only=True)
        spm*.model          the tokenizer, so the directory translates on its own
    checkpoints/best.json   which checkpoint has the best valid BLEU

A directory is written under a temporary name and renamed into place, so a crash leaves the
previous checkpoints intact.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_model, save_model

from mt_transformer.errors import UserError
from mt_transformer.files import atomic_dir, write_text

MODEL_FILE, CONFIG_FILE, TRAINER_FILE, BEST_FILE = "model.safetensors", "config.json", "trainer.pt", "best.json"
STEP_DIR = re.compile(r"^step_(\d+)$")


class SaveError(UserError):
    """A checkpoint could not be written (most often: the disk is full); the earlier ones are intact."""


def estimated_size(parameters: int) -> int:
    """Bytes of one checkpoint: fp32 weights and Adam's two moment estimates, plus ~2 MB for the
    tokenizer, config and scheduler state."""
    return 12 * parameters + (2 << 20)


def checkpoint_root(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def step_name(step: int) -> str:
    return f"step_{step:08d}"


def step_dir(run_dir: str, step: int) -> str:
    return os.path.join(checkpoint_root(run_dir), step_name(step))


def save_checkpoint(
    run_dir: str,
    step: int,
    model: torch.nn.Module,
    metadata: dict,
    trainer_state: dict,
    tokenizer_dir: str,
    tokenizer_files: list[str],
) -> str:
    """Write checkpoint `step` atomically; returns its directory."""
    root = checkpoint_root(run_dir)
    os.makedirs(root, exist_ok=True)
    for name in os.listdir(root):  # what a killed save left behind
        if name.startswith(".step_") or name.endswith(".old"):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    final = step_dir(run_dir, step)
    try:
        with atomic_dir(final) as tmp:
            save_model(model, os.path.join(tmp, MODEL_FILE))
            with open(os.path.join(tmp, CONFIG_FILE), "w", encoding="utf-8") as f:
                json.dump({**metadata, "step": step}, f, indent=2)
            torch.save(trainer_state, os.path.join(tmp, TRAINER_FILE))
            for name in tokenizer_files:
                shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(tmp, name))
    except (OSError, RuntimeError, SafetensorError) as error:  # torch.save reports a full disk as a RuntimeError
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error).splitlines()[0][:200]
        free = shutil.disk_usage(root).free / 2**20
        raise SaveError(
            f"{final}: the checkpoint could not be written ({reason}; {free:.0f} MB free on its disk)"
        ) from None
    return final


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
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_best(run_dir: str, step: int, bleu: float) -> None:
    write_text(
        os.path.join(checkpoint_root(run_dir), BEST_FILE),
        json.dumps({"step": step, "bleu": bleu, "dir": step_name(step)}),
    )


def prune(run_dir: str, keep_last: int) -> None:
    """Delete all but the newest `keep_last` checkpoints, always keeping the best (0 keeps all)."""
    if keep_last <= 0:
        return
    best = read_best(run_dir)
    for step, path in list_checkpoints(run_dir)[:-keep_last]:
        if best is None or step != best["step"]:
            shutil.rmtree(path, ignore_errors=True)


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


def read_metadata(directory: str) -> dict:
    path = os.path.join(directory, CONFIG_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: missing from the checkpoint") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{path}: not valid JSON") from None


def load_weights(model: torch.nn.Module, directory: str) -> None:
    path = os.path.join(directory, MODEL_FILE)
    try:
        missing, unexpected = load_model(model, path, strict=False, device="cpu")
    except (SafetensorError, OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable safetensors file ({error})") from None
    if missing or unexpected:
        what = f"missing {sorted(missing)[:3]}" if missing else f"unexpected {sorted(unexpected)[:3]}"
        raise UserError(f"{path}: weights do not match the model ({what})")


def load_trainer_state(directory: str) -> dict:
    path = os.path.join(directory, TRAINER_FILE)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise UserError(
            f"{path}: refused: it holds objects other than tensors and plain data, which could run code when loaded"
        ) from None
    except (RuntimeError, EOFError, OSError) as error:
        raise UserError(f"{path}: not a readable trainer state ({type(error).__name__})") from None


def rng_state() -> dict:
    """This process's random generators (Python, numpy, torch CPU and CUDA), saved with each
    checkpoint so that a resumed run draws the same dropout masks as an uninterrupted one."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    numpy_state = np.random.get_state()
    state["numpy"] = [numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what rng_state() saved."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_metadata(config, tokenizer) -> dict:
    """What a checkpoint's config.json holds besides the weights: enough to rebuild model and tokenizer."""
    return {
        "config": config.to_dict(),
        "src_vocab_size": tokenizer.src_vocab_size,
        "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "joint_vocab": tokenizer.joint,
        "tokenizer_files": tokenizer.files,
    }
