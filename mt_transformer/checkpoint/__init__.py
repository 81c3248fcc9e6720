"""Checkpoints: one directory per save, self-contained and safe to load. This module alone writes
and reads them: the training checkpoints, averaged models, and the whole state a resumed run
takes back.

    checkpoints/step_00001000/
        model.safetensors   weights (no pickle); a train.lora run's: its adapters alone,
                            config.json naming the base they adapt (merged in at load)
        config.json         the run's config, vocabulary sizes, step
        trainer.pt          optimizer, scheduler, scaler, data position, RNG states
                            (tensors and plain containers, loaded with weights_only=True)
        spm*.model          the tokenizer, so the directory translates on its own
    checkpoints/best.json   which checkpoint has the best valid BLEU

A directory is written under a temporary name and renamed into place, so a crash leaves the
previous checkpoints intact.
"""

import importlib

from mt_transformer.checkpoint.layout import (
    BEST_FILE,
    CONFIG_FILE,
    EXPORT_SETTINGS_FILE,
    MODEL_FILE,
    SAVING_DIR,
    STEP_DIR,
    TRAINER_FILE,
    WRITER,
    checkpoint_root,
    identity,
    list_checkpoints,
    prune,
    read_best,
    read_config,
    read_metadata,
    resolve,
    step_dir,
    step_name,
    write_best,
)

# loading and saving import torch (about 2 s): they are imported when one of their names is first
# asked for, so that a command that only reads a checkpoint's files (mt-translate on CTranslate2)
# starts without torch
_IN_MODULE = {
    "ADAPTERS": "loading",
    "Adapters": "loading",
    "LoadedModel": "loading",
    "adapted_base": "loading",
    "adapter_record": "loading",
    "load": "loading",
    "load_trainer_state": "loading",
    "load_weights": "loading",
    "merged_metadata": "loading",
    "merged_weights": "loading",
    "read_adapters": "loading",
    "read_weights": "loading",
    "SaveError": "saving",
    "checkpoint_metadata": "saving",
    "model_tensors": "saving",
    "save_checkpoint": "saving",
    "tied_names": "saving",
    "weights_of": "saving",
    "write_export_settings": "saving",
    "write_model_dir": "saving",
}


def __getattr__(name: str):
    if name not in _IN_MODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_IN_MODULE[name]}"), name)


__all__ = [
    "ADAPTERS",
    "Adapters",
    "BEST_FILE",
    "CONFIG_FILE",
    "EXPORT_SETTINGS_FILE",
    "LoadedModel",
    "MODEL_FILE",
    "SAVING_DIR",
    "STEP_DIR",
    "SaveError",
    "TRAINER_FILE",
    "WRITER",
    "adapted_base",
    "adapter_record",
    "checkpoint_metadata",
    "checkpoint_root",
    "identity",
    "list_checkpoints",
    "load",
    "load_trainer_state",
    "load_weights",
    "merged_metadata",
    "merged_weights",
    "model_tensors",
    "prune",
    "read_adapters",
    "read_best",
    "read_config",
    "read_metadata",
    "read_weights",
    "resolve",
    "save_checkpoint",
    "step_dir",
    "step_name",
    "tied_names",
    "weights_of",
    "write_best",
    "write_export_settings",
    "write_model_dir",
]
