"""Writing checkpoints: a model's tensors (each once; an adapter run's adapters alone), its
metadata, the trainer state and the tokenizer, into a directory that appears whole or not at all."""

from __future__ import annotations

import json
import os
import shutil

import torch
from safetensors.torch import save_file

from mt_transformer.checkpoint.layout import (
    CONFIG_FILE,
    EXPORT_SETTINGS_FILE,
    MODEL_FILE,
    SAVING_DIR,
    TRAINER_FILE,
    WRITER,
    checkpoint_root,
    step_dir,
)
from mt_transformer.errors import UserError
from mt_transformer.files import WRITE_ERRORS, write_error_reason, write_text
from mt_transformer.model import lora
from mt_transformer.outputs import atomic_dir


class SaveError(UserError):
    """A checkpoint could not be written (most often: the disk is full); the earlier ones are intact."""


def weights_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What a checkpoint of `model` holds: its adapters alone where it has some (train.lora), else
    each of its tensors once (model_tensors)."""
    return lora.adapter_tensors(model) or model_tensors(model)[0]


def save_checkpoint(
    run_dir: str,
    step: int,
    weights: dict[str, torch.Tensor],
    metadata: dict,
    trainer_state: dict,
    tokenizer_dir: str,
    tokenizer_files: list[str],
) -> str:
    """Write checkpoint `step` atomically; returns its directory."""
    root = checkpoint_root(run_dir)
    os.makedirs(root, exist_ok=True)
    for name in os.listdir(root):  # what a killed save left behind
        if SAVING_DIR.match(name):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    final = step_dir(run_dir, step)
    try:
        with atomic_dir(final, written_by=WRITER) as tmp:
            write_model_dir(tmp, weights, {**metadata, "step": step}, tokenizer_dir, tokenizer_files, trainer_state)
    except WRITE_ERRORS as error:
        reason = write_error_reason(error)
        free = shutil.disk_usage(root).free / 2**20
        raise SaveError(
            f"{final}: the checkpoint could not be written ({reason}; {free:.0f} MB free on its disk)"
        ) from None
    return final


def checkpoint_metadata(config, tokenizer) -> dict:
    """What a checkpoint's config.json holds besides the weights: enough to rebuild model and tokenizer."""
    return {
        "config": config.to_dict(),
        "src_vocab_size": tokenizer.src_vocab_size,
        "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "joint_vocab": tokenizer.joint,
        "tokenizer_files": tokenizer.files,
    }


def tied_names(model: torch.nn.Module) -> dict[str, str]:
    """{alias: first name} of each parameter known under several names (tied embeddings)."""
    first, aliases = {}, {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        aliases.update({name: first[id(parameter)]} if id(parameter) in first else {})
        first.setdefault(id(parameter), name)
    return aliases


def model_tensors(model: torch.nn.Module) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """Each distinct tensor of the model once, under its first name in state_dict order, and the
    other names of tied tensors ({alias: kept name}): the same weights always give the same file."""
    aliases = tied_names(model)
    tensors = {name: t.detach().contiguous() for name, t in model.state_dict().items() if name not in aliases}
    return tensors, aliases


def write_model_dir(
    directory: str,
    tensors: dict,
    metadata: dict,
    tokenizer_dir: str,
    tokenizer_files: list[str],
    trainer_state: dict | None = None,
) -> None:
    """Fill `directory` (a fresh temporary one) with a model: weights, config.json, the tokenizer,
    and for a training checkpoint the trainer state."""
    # one metadata key only: safetensors writes the metadata map in a different order in each
    # process; load_weights finds the other names of tied tensors from the model itself
    save_file(tensors, os.path.join(directory, MODEL_FILE), metadata={"format": "pt"})
    with open(os.path.join(directory, CONFIG_FILE), "w", encoding="utf-8") as f:
        json.dump(metadata, f, indent=2)
    if trainer_state is not None:
        torch.save(trainer_state, os.path.join(directory, TRAINER_FILE))
    for name in tokenizer_files:
        shutil.copyfile(os.path.join(tokenizer_dir, name), os.path.join(directory, name))


def write_export_settings(directory: str, settings: dict) -> None:
    """An export's record of the checkpoint it came from (its config, step, format settings)."""
    write_text(os.path.join(directory, EXPORT_SETTINGS_FILE), json.dumps(settings, indent=2))
