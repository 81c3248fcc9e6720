"""The device to run on, and its out-of-memory errors: recognising them and freeing what the
failed attempt held.

Training and translation catch out-of-memory errors around one batch and retry it in smaller
pieces, so one unusually large batch or input does not end a long job.
"""

from __future__ import annotations

import gc

import torch

from mt_transformer.errors import UserError


def select_device(name: str, local_rank: int | None = None, key: str = "train.device") -> torch.device:
    """The device `name` (auto, cpu, cuda or cuda:N) names; with CUDA under torchrun (`local_rank`
    given), the GPU of this process's local rank. `key` names the setting in error messages."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if not name.startswith("cuda"):
        return torch.device(name)
    if not torch.cuda.is_available():
        raise UserError(f"{key}: {name} asked for, but CUDA is not available")
    count = torch.cuda.device_count()
    if local_rank is not None:
        if local_rank >= count:
            raise UserError(
                f"local rank {local_rank} has no GPU: this machine has {count}; lower torchrun's --nproc-per-node"
            )
        return torch.device("cuda", local_rank)
    device = torch.device(name)
    if device.index is not None and device.index >= count:
        raise UserError(f"{key}: {name} asked for, but this machine has {count} GPU(s) (cuda:0 to cuda:{count - 1})")
    return device


def is_out_of_memory(error: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the CPU allocator's failure (a plain RuntimeError)."""
    return isinstance(error, torch.OutOfMemoryError) or (
        isinstance(error, RuntimeError) and "can't allocate memory" in str(error)
    )


def release_memory(device: torch.device) -> None:
    """Call after leaving the `except` block, once the failed attempt's tensors are unreachable.

    On CUDA: collect reference cycles that may still hold tensors, then return the cached blocks
    to the driver. On CPU freed memory goes back at once, and a collection (~0.2 s with a
    dataset loaded) would only slow the retries.
    """
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def use_fast_matmul(device: torch.device) -> None:
    """On CUDA, let float32 matrix products and convolutions run on TF32 tensor cores (10-bit
    mantissa inputs, float32 accumulation), as mt-train and the benchmark both do."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


SIMD_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")  # what decides fp32 and bf16 matrix speed on x86


def cpu_model() -> str:
    """The CPU's model name and its vector extensions ("AMD EPYC [avx2]"): speeds are comparable
    only between runs on the same kind of host."""
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.machine())
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    present = [flag for flag in SIMD_FLAGS if flag in flags]
    return f"{name} [{', '.join(present)}]" if present else name
