"""Checkpoint averaging (Vaswani et al., 2017, section 6.1: the base models average the last 5
checkpoints): the element-wise mean of the weights of several checkpoints of one run.

The output is a checkpoint directory that translates like any other (weights, config, tokenizer)
but holds no optimizer state, so training cannot resume from it.
"""

from __future__ import annotations

import os

import torch

from mt_transformer import checkpoint
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.files import WRITE_ERRORS, write_error_reason
from mt_transformer.outputs import atomic_dir


def last_checkpoints(run_dir: str, count: int) -> list[str]:
    """The `count` newest checkpoints of a run, oldest first."""
    found = checkpoint.list_checkpoints(run_dir)
    if len(found) < count:
        raise UserError(
            f"{run_dir}: {len(found)} checkpoints, {count} asked for (train.keep_last decides how many a run keeps)"
        )
    return [path for _, path in found[-count:]]


def _load(directory: str) -> tuple[dict, dict]:
    if not os.path.isfile(os.path.join(directory, checkpoint.MODEL_FILE)):
        raise UserError(f"{directory}: not a checkpoint directory (no {checkpoint.MODEL_FILE})")
    # adapters (train.lora) merged into their base: the average is a whole model
    return checkpoint.merged_weights(directory), checkpoint.merged_metadata(directory)


def average_checkpoints(inputs: list[str], output: str) -> dict:
    """Write the average of `inputs` (checkpoint directories of one model) to `output`; returns its metadata."""
    if not inputs:
        raise UserError("--inputs: no checkpoints given")
    total: dict[str, torch.Tensor] = {}
    first_metadata = None
    for directory in inputs:
        weights, metadata = _load(directory)
        dtypes = {name: tensor.dtype for name, tensor in weights.items()}
        if first_metadata is None:
            first_metadata, first_dir = metadata, directory
            total = {name: tensor.to(torch.float64) for name, tensor in weights.items()}
            continue
        same_model = all(metadata.get(k) == first_metadata.get(k) for k in ("src_vocab_size", "tgt_vocab_size"))
        same_model &= metadata.get("config", {}).get("model") == first_metadata.get("config", {}).get("model")
        if not same_model or weights.keys() != total.keys():
            raise UserError(f"{directory}: a different model from {first_dir}; only checkpoints of one model average")
        if Tokenizer(directory).fingerprint() != Tokenizer(first_dir).fingerprint():
            raise UserError(f"{directory}: its tokenizer differs from {first_dir}'s")
        for name, tensor in weights.items():
            if tensor.shape != total[name].shape:
                raise UserError(
                    f"{directory}: {name} has shape {tuple(tensor.shape)}, "
                    f"not {tuple(total[name].shape)} as in {first_dir}"
                )
            total[name] += tensor.to(torch.float64)
    # summed in float64, so the average of identical checkpoints is exactly their weights
    averaged = {name: (tensor / len(inputs)).to(dtypes[name]).contiguous() for name, tensor in total.items()}

    # the last input's config and step, and where the average came from
    metadata = {**metadata, "averaged_from": [os.path.abspath(d) for d in inputs]}
    try:
        with atomic_dir(output, written_by="mt-average") as tmp:
            checkpoint.write_model_dir(tmp, averaged, metadata, inputs[-1], Tokenizer(inputs[-1]).files)
    except WRITE_ERRORS as error:
        raise UserError(
            f"{output}: the averaged checkpoint could not be written ({write_error_reason(error)})"
        ) from None
    return metadata
