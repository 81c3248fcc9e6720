"""Out-of-memory errors: recognising them and freeing what the failed attempt held.

Training and translation catch them around one batch and retry it in smaller pieces, so one
unusually large batch or input does not end a long job.
"""

from __future__ import annotations

import gc

import torch


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
