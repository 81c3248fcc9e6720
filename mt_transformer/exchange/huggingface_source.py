"""Where mt-import reads a transformers model: a local directory or a hub id downloaded into the
hub's cache, and its weights read without running code of the model's own (safetensors; pickles
only when allowed, through torch's weights_only)."""

from __future__ import annotations

import dataclasses
import os
import re

from mt_transformer.errors import UserError


@dataclasses.dataclass(frozen=True)
class Source:
    """Where mt-import reads a model: a directory or hub id, the hub revision, whether pickled weights may be read."""

    path: str
    revision: str | None = None
    allow_pickle: bool = False


def local_directory(source: str, revision: str | None = None) -> str:
    """SRC as a local directory: itself, or a hub id downloaded into the hub's usual cache (at
    `revision`: a branch, tag or commit), its weights as safetensors and, where that is all it
    has, as pickles (weights_files decides whether those are read)."""
    if os.path.isdir(source):
        if revision is not None:
            raise UserError(f"--revision: for a hub id, not the local directory {source}")
        return source
    if os.path.exists(source):
        raise UserError(f"{source}: not a directory (a transformers model directory or a hub id)")
    try:
        import huggingface_hub
        from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError, RevisionNotFoundError
    except ImportError:
        raise UserError(f"{source}: no such directory (huggingface_hub, to download it, is not installed)") from None
    try:
        return huggingface_hub.snapshot_download(
            source, revision=revision, allow_patterns=["*.json", "*.spm", "*.model", "*.safetensors", "*.bin"]
        )
    except RevisionNotFoundError:
        raise UserError(f"--revision: {revision!r} is not a branch, tag or commit of {source}") from None
    except RepositoryNotFoundError:
        raise UserError(f"{source}: no such directory, nor a model of that name on the Hugging Face hub") from None
    except (OSError, ValueError, HfHubHTTPError):
        raise UserError(
            f"{source}: no such directory, and the Hugging Face hub cannot be reached to download it (offline?)"
        ) from None


def weights_are_safetensors(directory: str, allow_pickle: bool) -> bool:
    """Whether the model's weights are read from safetensors; pickled weights alone (pytorch_model.bin,
    which can run code as it is read) are refused unless `allow_pickle` (then read with weights_only)."""
    names = os.listdir(directory)
    if any(name.endswith(".safetensors") for name in names):
        return True
    if not any(name.endswith(".bin") for name in names):
        raise UserError(f"{directory}: no weights (model.safetensors or pytorch_model.bin)")
    if not allow_pickle:
        raise UserError(
            f"{directory}: its weights are pickled (pytorch_model.bin), which can run code when read; "
            f"convert them to safetensors, or add --allow-pickle to read them with torch's weights_only"
        )
    return False


def read_model(transformers, directory: str, allow_pickle: bool):
    """The transformers model of `directory`, never with code of the model's own, as one line where it
    cannot be read (a payload that weights_only refuses, a truncated file)."""
    safetensors = weights_are_safetensors(directory, allow_pickle)
    try:
        model = transformers.AutoModelForSeq2SeqLM.from_pretrained(
            directory, trust_remote_code=False, use_safetensors=safetensors
        )
    except Exception as error:  # transformers wraps each reader's own error type in its own
        text = re.sub(r"\x1b\[[0-9;]*m", "", str(error)).strip()  # torch colours its advice
        reason = text.splitlines()[0][:160] if text else type(error).__name__
        if "weights only load failed" in text.lower():
            reason = "refused: the pickle holds objects other than tensors"
        raise UserError(f"{directory}: its weights cannot be read ({reason})") from None
    return model.eval()
