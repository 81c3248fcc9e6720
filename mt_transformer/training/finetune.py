"""Fine-tuning: `train.init_from` starts a new run from a trained model's weights and tokenizer.

The new run has its own data, schedule, step count and data position (fairseq's
--reset-optimizer --reset-lr-scheduler --reset-dataloader); `train.init_from_reset: false`
keeps the parent's optimizer state. Model and tokenizer settings must be the parent's. Once the
run has checkpoints of its own, running it again resumes it, not the parent. With `train.lora`
the parent's weights stay frozen and low-rank adapters train on its linear layers
(model/lora.py); the run's checkpoints hold the adapters and name the parent as their base.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil

from mt_transformer import checkpoint
from mt_transformer.config import Config, ConfigError, config_from_dict
from mt_transformer.data.run_tokenizer import TOKENIZER_SETTINGS
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.files import write_text
from mt_transformer.model import lora

log = logging.getLogger(__name__)

# model keys a checkpoint's weights fit whatever their value: how fresh weights are drawn (the
# checkpoint's replace them) and dropout, which a resumed or fine-tuned run may change
TRAINING_ONLY_MODEL_KEYS = ("init", "dropout", "attention_dropout", "word_dropout")


def parent_checkpoint(config: Config) -> str | None:
    """The checkpoint directory train.init_from names (a run's best, else its newest), checked
    against the config; None without init_from or once the run has checkpoints of its own."""
    train = config.train
    if not train.init_from or checkpoint.list_checkpoints(train.output_dir):
        return None
    try:
        parent = checkpoint.resolve(train.init_from)
    except UserError as error:
        raise ConfigError(f"train.init_from: {error}") from None
    check_compatible(parent, config, "fine-tuning keeps the model and tokenizer of train.init_from")
    if not train.init_from_reset and not os.path.isfile(os.path.join(parent, checkpoint.TRAINER_FILE)):
        raise ConfigError(
            f"train.init_from_reset: false needs the optimizer state of {parent}, which has none "
            f"(an averaged checkpoint?); set it to true or name a checkpoint written by mt-train"
        )
    return parent


def adopt_tokenizer(parent: str, run_dir: str) -> None:
    """Put the parent's sentencepiece model(s) and their settings into the new run directory,
    where preparing the data finds and reuses them."""
    os.makedirs(run_dir, exist_ok=True)
    for name in Tokenizer(parent).files:
        shutil.copyfile(os.path.join(parent, name), os.path.join(run_dir, name))
    settings = config_from_dict(checkpoint.read_metadata(parent)["config"]).data.tokenizer_settings()
    write_text(os.path.join(run_dir, TOKENIZER_SETTINGS), json.dumps(settings, indent=2))


def add_adapters(model, config: Config, parent: str | None, resumed: str | None) -> dict:
    """With train.lora: the base's weights into `model` (the parent's, or on resume the base its
    checkpoints name), then adapters on the target layers, the only parameters left to train.
    Returns what the run's checkpoints record of the base ({} without train.lora)."""
    settings = config.train.lora
    if not settings.rank:
        return {}
    base = parent
    if resumed:
        saved = checkpoint.read_adapters(resumed)
        if saved is None or read_lora(resumed) != settings:
            raise UserError(
                f"train.lora: {settings} in the config but {read_lora(resumed)} in {resumed}; "
                f"use a new train.output_dir or restore the setting"
            )
        base = saved.base
    checkpoint.load_weights(model, base)
    adapted = lora.add_adapters(model, settings.rank, settings.alpha, settings.targets)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    log.info(
        "train.lora: rank %d adapters on %d layers of %s: %s parameters trained of %s",
        settings.rank,
        len(adapted),
        base,
        f"{trained:,}",
        f"{sum(p.numel() for p in model.parameters()):,}",
    )
    return checkpoint.adapter_record(base, settings.alpha / settings.rank)


def read_lora(directory: str):
    return checkpoint.read_config(directory).train.lora


def start_from(step, parent: str, reset: bool) -> None:
    """The parent's weights into `step`'s model (a train.lora or sharded run has them already), and its
    optimizer state unless `reset`."""
    if not lora.has_adapters(step.model) and not step.sharded:
        checkpoint.load_weights(step.model, parent)
    if not reset:
        step.load_optimizer_state(checkpoint.load_trainer_state(parent)["optimizer"])
    log.info(
        "fine-tuning from %s: its weights and tokenizer, %s, a fresh schedule and step count",
        parent,
        "a fresh optimizer" if reset else "its optimizer state",
    )


def check_compatible(
    directory: str, config: Config, hint: str = "use a new train.output_dir or restore the setting"
) -> None:
    """Refuse to resume (or fine-tune) when the model or tokenizer settings differ from the
    checkpoint's; `hint` ends the message."""
    saved = checkpoint.read_config(directory)  # a key added since the checkpoint takes its default
    for name, new in dataclasses.asdict(config.model).items():
        old = getattr(saved.model, name)
        if name not in TRAINING_ONLY_MODEL_KEYS and old != new:
            raise UserError(f"model.{name}: {new!r} in the config but {old!r} in {directory}; {hint}")
    conflict = config.data.tokenizer_conflict(saved.data.tokenizer_settings())
    if conflict:
        key, new, old = conflict
        raise UserError(f"{key}: {new!r} in the config but {old!r} in {directory}; {hint}")
