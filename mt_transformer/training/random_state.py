"""The random generators of a training process, saved with each checkpoint and restored on
resume, so that a resumed run draws the same dropout masks as one never stopped."""

from __future__ import annotations

import random

import numpy as np
import torch


def rng_state(device: torch.device) -> dict:
    """This process's random generators (Python, numpy, torch CPU and, on a GPU, the training
    device's), saved with each checkpoint so that a resumed run draws the same dropout masks as an
    uninterrupted one. Only the process's own GPU: a run may resume with fewer GPUs visible."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    numpy_state = np.random.get_state()
    state["numpy"] = [numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]]
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state: dict, device: torch.device) -> None:
    """Restore what rng_state() saved; the GPU generator only on a GPU (a GPU run resumed on the
    CPU keeps the CPU generators). Older checkpoints hold every GPU's state: the device's own is
    taken when it is there."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    saved = state.get("cuda")
    if saved is None or device.type != "cuda":
        return
    index = device.index or 0
    if isinstance(saved, (list, tuple)):
        saved = saved[index] if index < len(saved) else None
    if saved is not None:
        torch.cuda.set_rng_state(saved, device)


def restore_rng(saved: dict, device: torch.device, rank: int, world_size: int, seed: int) -> None:
    """Each rank takes back its own random state, so dropout continues as if never stopped; after
    a change of world size the new ranks start fresh streams."""
    per_rank = saved.get("rng_ranks") or [saved["rng"]]
    if len(per_rank) == world_size or rank == 0:
        set_rng_state(per_rank[rank] if len(per_rank) == world_size else per_rank[0], device)
    else:
        torch.manual_seed(seed + rank + 1_000_003 * saved["step"])
