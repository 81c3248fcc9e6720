"""Reading checkpoints, safely: weights from safetensors, the trainer state with
weights_only=True, an adapter checkpoint's weights merged into the base it names (checked by
digest), and a whole model with its tokenizer and config."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from mt_transformer.checkpoint.layout import CONFIG_FILE, MODEL_FILE, TRAINER_FILE, read_config, read_metadata, resolve
from mt_transformer.checkpoint.saving import model_tensors
from mt_transformer.config import Config
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.files import file_digest
from mt_transformer.model import lora
from mt_transformer.model.transformer import Transformer

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


@dataclass
class LoadedModel:
    model: torch.nn.Module  # in eval mode, on the device asked for
    tokenizer: Tokenizer
    config: Config  # the config the model was trained with
    directory: str  # the checkpoint directory it came from
    step: int | None  # the update it was saved at (None for an average)


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
