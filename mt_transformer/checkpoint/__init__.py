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
    resolve,
    step_dir,
    step_name,
    write_best,
)
from mt_transformer.checkpoint.loading import (
    ADAPTERS,
    Adapters,
    LoadedModel,
    adapted_base,
    adapter_record,
    load,
    load_trainer_state,
    load_weights,
    merged_metadata,
    merged_weights,
    read_adapters,
    read_config,
    read_metadata,
    read_weights,
)
from mt_transformer.checkpoint.saving import (
    SaveError,
    checkpoint_metadata,
    model_tensors,
    save_checkpoint,
    tied_names,
    weights_of,
    write_export_settings,
    write_model_dir,
)

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
