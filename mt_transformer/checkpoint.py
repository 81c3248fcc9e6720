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

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import re
import shutil
from dataclasses import dataclass

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from mt_transformer.config import Config, ConfigError, config_from_dict
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.files import WRITE_ERRORS, file_digest, read_json, write_error_reason, write_text
from mt_transformer.model import lora
from mt_transformer.model.transformer import Transformer
from mt_transformer.outputs import atomic_dir, remove_written

log = logging.getLogger(__name__)

MODEL_FILE, CONFIG_FILE, TRAINER_FILE, BEST_FILE = "model.safetensors", "config.json", "trainer.pt", "best.json"
# what an export (mt-export: CTranslate2, transformers) records of the checkpoint it came from
EXPORT_SETTINGS_FILE = "mt_transformer.json"
STEP_DIR = re.compile(r"^step_(\d+)$")
SAVING_DIR = re.compile(r"^\.step_\d+\.[a-z0-9_]{8}$")  # atomic_dir's temporary name for a checkpoint being saved
WRITER = "mt-train"  # whose marker a run and its checkpoints carry (mt-prepare prepares the same run)


class SaveError(UserError):
    """A checkpoint could not be written (most often: the disk is full); the earlier ones are intact."""


def checkpoint_root(run_dir: str) -> str:
    return os.path.join(run_dir, "checkpoints")


def step_name(step: int) -> str:
    return f"step_{step:08d}"


def step_dir(run_dir: str, step: int) -> str:
    return os.path.join(checkpoint_root(run_dir), step_name(step))


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


ADAPTERS = "adapters"  # the metadata key of an adapter checkpoint's record


@dataclass(frozen=True)
class Adapters:
    """What an adapter checkpoint (train.lora) records of the model it adapts: its directory, the
    SHA-256 of its weights file, and the adapters' scale (alpha / rank)."""

    base: str
    base_sha256: str
    scale: float


def adapter_record(base: str, scale: float) -> dict:
    """The metadata entry of an adapter checkpoint (train.lora) whose base is the model in `base`."""
    return {ADAPTERS: {**adapted_base(base), "scale": scale}}


def merged_metadata(directory: str) -> dict:
    """A checkpoint's metadata as a whole model's: an adapter checkpoint's less its adapter
    record (its weights merged into the base's: merged_weights)."""
    return {k: v for k, v in read_metadata(directory).items() if k != ADAPTERS}


def read_adapters(directory: str) -> Adapters | None:
    """A checkpoint's adapter record (None: its weights are whole), checked field by field."""
    found = read_metadata(directory).get(ADAPTERS)
    if not found:
        return None
    path = os.path.join(directory, CONFIG_FILE)
    if not isinstance(found, dict):
        raise UserError(f"{path}: adapters: expected an object with base, base_sha256 and scale")
    for name, kind in (("base", str), ("base_sha256", str), ("scale", (int, float))):
        value = found.get(name)
        if not isinstance(value, kind) or isinstance(value, bool) or value == "":
            raise UserError(f"{path}: adapters.{name}: missing or of another type ({value!r:.60})")
    return Adapters(found["base"], found["base_sha256"], float(found["scale"]))


def read_weights(directory: str) -> dict[str, torch.Tensor]:
    path = os.path.join(directory, MODEL_FILE)
    try:
        return load_file(path, device="cpu")
    except (SafetensorError, OSError, ValueError) as error:
        raise UserError(f"{path}: not a readable safetensors file ({error})") from None


def adapted_base(directory: str) -> dict:
    """What an adapter checkpoint records of the model it adapts (train.lora's train.init_from):
    its directory and the digest of its weights file."""
    digest = file_digest(os.path.join(directory, MODEL_FILE))  # remembered per version of the file
    return {"base": os.path.abspath(directory), "base_sha256": digest}


def merged_weights(directory: str, adapted: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    """A checkpoint's weights; an adapter checkpoint's are its base's with the adapters merged in
    (train.lora), the base checked to be the model they were trained on. `adapted`: the adapter
    checkpoints that led here, so a base that leads back to one of them is refused."""
    weights = read_weights(directory)
    adapters = read_adapters(directory)
    if adapters is None:
        return weights
    base, adapted = adapters.base, (*adapted, os.path.realpath(directory))
    if os.path.realpath(base) in adapted:
        raise UserError(f"{directory}: its adapters' base {base} leads back to an adapter checkpoint, not a model")
    if not os.path.isfile(os.path.join(base, MODEL_FILE)):
        raise UserError(f"{directory}: holds adapters of the model in {base}, which is gone; put it back there")
    if adapted_base(base)["base_sha256"] != adapters.base_sha256:
        raise UserError(f"{directory}: its adapters were trained on another model than {base} holds now")
    return lora.merged(merged_weights(base, adapted), weights, adapters.scale)


def load_weights(model: torch.nn.Module, directory: str) -> None:
    """Load a checkpoint's weights into `model`; a tied matrix may be stored under any of its names.
    Into a model with adapters (a train.lora run) go the adapters alone: its base is loaded already;
    into any other an adapter checkpoint's weights go merged."""
    apart = lora.has_adapters(model)
    weights = read_weights(directory) if apart else merged_weights(directory)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    _, aliases = model_tensors(model)
    loaded_roots = {aliases.get(name, name) for name in weights}
    missing = [name for name in missing if aliases.get(name, name) not in loaded_roots]
    if apart:
        missing = [name for name in missing if name.rsplit(".", 1)[-1] in lora.ADAPTER_NAMES]
    path = os.path.join(directory, MODEL_FILE)
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


@dataclass
class LoadedModel:
    model: torch.nn.Module  # in eval mode, on the device asked for
    tokenizer: Tokenizer
    config: Config  # the config the model was trained with
    directory: str  # the checkpoint directory it came from
    step: int | None  # the update it was saved at (None for an average)


def write_export_settings(directory: str, settings: dict) -> None:
    """An export's record of the checkpoint it came from (its config, step, format settings)."""
    write_text(os.path.join(directory, EXPORT_SETTINGS_FILE), json.dumps(settings, indent=2))


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


def load(path: str, device: torch.device) -> LoadedModel:
    """The model, tokenizer and config of a checkpoint directory, or of a run directory's best
    checkpoint (else its newest)."""
    directory = resolve(path)
    metadata = read_metadata(directory)
    config = read_config(directory, metadata)
    try:
        vocab_sizes = metadata["src_vocab_size"], metadata["tgt_vocab_size"]
        joint = metadata["joint_vocab"]
    except (KeyError, TypeError):
        raise UserError(f"{os.path.join(directory, CONFIG_FILE)}: not an mt_transformer checkpoint config") from None
    tokenizer = Tokenizer(directory)
    if (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size) != tuple(vocab_sizes):
        raise UserError(
            f"{directory}: the tokenizer has vocabularies of {tokenizer.src_vocab_size}/{tokenizer.tgt_vocab_size} "
            f"pieces but the model was built for {vocab_sizes[0]}/{vocab_sizes[1]}"
        )
    model = Transformer(config.model, *vocab_sizes, share_vocab=joint)
    load_weights(model, directory)
    return LoadedModel(model.to(device).eval(), tokenizer, config, directory, metadata.get("step"))
