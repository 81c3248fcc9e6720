"""Fine-tuning: `train.init_from` starts a new run from a trained model's weights and tokenizer.

The new run has its own data, schedule, step count and data position (fairseq's
--reset-optimizer --reset-lr-scheduler --reset-dataloader); `train.init_from_reset: false`
keeps the parent's optimizer state. Model and tokenizer settings must be the parent's. Once the
run has checkpoints of its own, running it again resumes it, not the parent.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil

from mt_transformer import checkpoint
from mt_transformer.config import Config, ConfigError, TrainConfig, config_from_dict, to_yaml
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.files import write_text

log = logging.getLogger(__name__)


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
    checkpoint.check_compatible(parent, config, "fine-tuning keeps the model and tokenizer of train.init_from")
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
    write_text(os.path.join(run_dir, "tokenizer.json"), json.dumps(settings, indent=2))


def start_from(step, parent: str, reset: bool) -> None:
    """The parent's weights into `step`'s model, and its optimizer state unless `reset`."""
    checkpoint.load_weights(step.model, parent)
    if not reset:
        step.load_optimizer_state(checkpoint.load_trainer_state(parent)["optimizer"])
    log.info(
        "fine-tuning from %s: its weights and tokenizer, %s, a fresh schedule and step count",
        parent,
        "a fresh optimizer" if reset else "its optimizer state",
    )


def finetune_yaml(config: Config, parent: str, output_dir: str) -> str:
    """A config that fine-tunes the checkpoint `parent` (trained with `config`) into `output_dir`:
    its model and tokenizer settings and languages, the training defaults, and data splits for
    the user to give."""
    splits = dict(format="text", train=None, valid=None, test=None, hub_name=None, hub_config=None, cache_dir=None)
    data = dataclasses.replace(config.data, **splits)
    train = TrainConfig(output_dir=output_dir, init_from=parent)
    example = "data.train=corpus/train data.valid=corpus/valid"
    if data.corpora:
        example = "data.corpora (one entry per language pair; edit this file)"
    return (
        f"# Fine-tune {parent} on your data (text files {{prefix}}.{{src_lang}}, {{prefix}}.{{tgt_lang}}):\n"
        f"#   mt-train --config THIS_FILE --set {example}\n"
        f"# The model and tokenizer settings below must stay as they are.\n"
    ) + to_yaml(dataclasses.replace(config, data=data, train=train))
