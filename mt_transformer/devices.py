"""The device to run on, its precisions, and its out-of-memory errors: recognising them and
freeing what the failed attempt held.

Training and translation catch out-of-memory errors around one batch and retry it in smaller
pieces, so one unusually large batch or input does not end a long job.
"""

from __future__ import annotations

import gc
import os

import torch

from mt_transformer.errors import UserError
from mt_transformer.host import cpu_info

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(device: torch.device, precision: str) -> torch.autocast:
    """Mixed precision: matrix products in `precision`, reductions such as softmax and layer norm
    in float32 (a no-op context for fp32, and for decoding's int8, whose activations stay float32).
    Training's forward pass and decoding both use it."""
    half = precision in ("bf16", "fp16")
    return torch.autocast(device.type, dtype=PRECISIONS[precision] if half else torch.float32, enabled=half)


def select_device(name: str, local_rank: int | None = None, key: str = "train.device") -> torch.device:
    """The device `name` (auto, cpu, cuda or cuda:N) names; with CUDA under torchrun (`local_rank`
    given), the GPU of this process's local rank. A GPU named by its index becomes the current
    CUDA device. `key` names the setting in error messages."""
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
    if device.index is not None:  # what runs on "the current device" (library workspaces, streams) goes there too
        torch.cuda.set_device(device)
    return device


# torch.OutOfMemoryError is torch >= 2.5's name for the class that older versions call
# torch.cuda.OutOfMemoryError; other failures to allocate come as plain RuntimeErrors.
OUT_OF_MEMORY = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
OUT_OF_MEMORY_MESSAGES = (
    "can't allocate memory",  # the CPU allocator
    "CUDA error: out of memory",  # a kernel launch or the CUDA runtime
    "CUBLAS_STATUS_ALLOC_FAILED",  # cuBLAS creating its workspace
    "CUDNN_STATUS_ALLOC_FAILED",
)


def is_out_of_memory(error: BaseException) -> bool:
    """An out-of-memory error of CUDA, cuBLAS, cuDNN or the CPU allocator."""
    if isinstance(error, OUT_OF_MEMORY):
        return True
    return isinstance(error, RuntimeError) and any(m in str(error) for m in OUT_OF_MEMORY_MESSAGES)


def release_memory(device: torch.device) -> None:
    """Call after leaving the `except` block, once the failed attempt's tensors are unreachable.

    On CUDA: collect reference cycles that may still hold tensors, then return the cached blocks
    to the driver. On CPU freed memory goes back at once, and a collection (slow with a
    dataset loaded) would only slow the retries.
    """
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


# oneDNN builds a kernel for every shape of bf16/fp16 matrix product on the CPU and caches 1,024
# of them. A search's shrinking rows and growing keys bring new shapes all the time, and so do
# training's batches, so on most CPUs a full cache only holds memory: 64 (an update's worth) trains
# as fast or faster in less memory. With AMX a new shape costs several times its product, and
# training's shapes recur (its loss pads its blocks to a few row counts), so training there keeps
# oneDNN's 1,024 (docs/benchmarks.md, "Performance decisions", measures both).
ONEDNN_KERNEL_CACHE = 64
AMX_TRAINING_KERNEL_CACHE = 1024


def limit_kernel_cache(device: torch.device, capacity: int = ONEDNN_KERNEL_CACHE) -> None:
    """On the CPU, oneDNN's kernel cache holds `capacity` kernels unless
    ONEDNN_PRIMITIVE_CACHE_CAPACITY says otherwise. oneDNN reads it at the process's first
    bf16/fp16 matrix product, so this must come before."""
    if device.type == "cpu":
        os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(capacity))


def training_kernel_cache() -> int:
    """The kernel cache for training on this CPU: AMX_TRAINING_KERNEL_CACHE with AMX, else
    ONEDNN_KERNEL_CACHE."""
    return AMX_TRAINING_KERNEL_CACHE if "amx_bf16" in (cpu_info()[1] or []) else ONEDNN_KERNEL_CACHE


def kernel_cache_in_effect() -> int:
    """The kernels oneDNN keeps in this process: ONEDNN_PRIMITIVE_CACHE_CAPACITY where it is set
    (by the user, or by `limit_kernel_cache`), else `training_kernel_cache`."""
    value = os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "").strip()
    return int(value) if value.isdigit() else training_kernel_cache()


def use_fast_matmul(device: torch.device) -> None:
    """On CUDA, let float32 matrix products and convolutions run on TF32 tensor cores (10-bit
    mantissa inputs, float32 accumulation), as mt-train and the benchmark both do; on the CPU,
    `limit_kernel_cache` to training's size. Call it before the first matrix product."""
    limit_kernel_cache(device, training_kernel_cache())
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


# the x86 flags of matrix units for each half precision
CPU_UNITS = {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16")}


def decode_precision(device: torch.device, setting: str) -> str:
    """decode.precision as the search runs it: auto is bf16 on an x86 CPU with bf16 matrix units
    (avx512_bf16 or amx_bf16), else fp32. On a GPU fp32 (TF32 products), where bf16 beam search measured
    slower (docs/benchmarks.md, "Performance decisions")."""
    if setting != "auto":
        return setting
    if device.type == "cuda":
        return "fp32"
    flags = cpu_info()[1] if device.type == "cpu" else None
    return "bf16" if set(CPU_UNITS["bf16"]) & set(flags or ()) else "fp32"


def slow_precision(device: torch.device, precision: str) -> str | None:
    """Why `precision` would be slow on `device`, or None: bf16 on hardware without bf16 matrix
    units is emulated (a GPU before compute capability 8.0, an x86 CPU without avx512_bf16 or
    amx_bf16), often slower than fp32; so is fp16 on an x86 CPU without avx512_fp16 or amx_fp16."""
    if precision in ("fp32", "int8"):
        return None
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if precision == "bf16" and major < 8:
            return (
                f"{torch.cuda.get_device_name(device)} (compute capability {major}.{minor}) has no bf16 units: "
                f"bf16 is emulated and slow there; fp16 is this GPU's fast precision"
            )
        return None
    name, flags = cpu_info()
    units = CPU_UNITS[precision]
    if flags and "avx2" in flags and not set(units) & set(flags):
        return f"{name} has no {precision} units (no {units[0]} or {units[1]}): {precision} runs slower than fp32 here"
    return None
