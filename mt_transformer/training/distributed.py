"""Several processes through torchrun: joining the process group, sharing out batches, the model
wrapped for them (DDP, or FSDP2 in training/sharding.py), and the few decisions every process must
take together.

torchrun starts one process per device and sets RANK, LOCAL_RANK and WORLD_SIZE; `init_group`
joins the group with NCCL on CUDA and gloo on CPU. A plain `mt-train` has world size 1 and none
of this costs anything: every collective here returns at once.
"""

from __future__ import annotations

import datetime
import gc
import inspect

import torch
import torch.distributed as dist

from mt_transformer.processes import Processes
from mt_transformer.training import sharding

# Rank 0 validates (minutes on a large valid set) while the others wait at the next collective.
TIMEOUT = datetime.timedelta(minutes=60)


def init_group(processes: Processes, device: torch.device) -> None:
    if not processes.enabled or dist.is_initialized():
        return
    if device.type == "cuda":  # NCCL bound to this rank's GPU from the start, not guessed at the first collective
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", timeout=TIMEOUT, device_id=device)
    else:
        dist.init_process_group("gloo", timeout=TIMEOUT)


def destroy_group() -> None:
    """Leaves the group. What still holds it (a sharded model's device mesh, in reference cycles)
    is collected first, while the interpreter is whole: left to its shutdown, a gloo group's threads
    could abort the process ("terminate called without an active exception")."""
    if dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()


def shard(batches: list, processes: Processes) -> list:
    """This rank's batches of an epoch: every world_size-th, starting at its rank.

    Every rank builds the same batch list (same seed, same epoch), so the shards are disjoint
    and equally long: the last `len % world_size` batches of the epoch are left out, so that all
    ranks take the same number of steps (the next epoch's shuffle leaves out others).
    """
    usable = len(batches) - len(batches) % processes.world_size
    return batches[processes.rank : usable : processes.world_size]


def sum_over_ranks(values: list[float], device: torch.device) -> list[float]:
    """The element-wise sum of `values` over all ranks, in one all-reduce."""
    if not dist.is_initialized():
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def broadcast(value, processes: Processes):
    """Rank 0's `value`, on every rank."""
    if not dist.is_initialized():
        return value
    holder = [value if processes.is_main else None]
    dist.broadcast_object_list(holder, src=0)
    return holder[0]


def gather(value, processes: Processes) -> list | None:
    """Every rank's `value` in rank order on rank 0, None elsewhere."""
    if not dist.is_initialized():
        return [value]
    gathered = [None] * processes.world_size if processes.is_main else None
    dist.gather_object(value, gathered, dst=0)
    return gathered


def all_gather(value) -> list:
    """Every rank's `value` in rank order, on every rank."""
    if not dist.is_initialized():
        return [value]
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def wrap_for_processes(model, device: torch.device, processes: Processes, compile: bool, sharded=False):
    """What runs the forward pass: the model, under torchrun its DistributedDataParallel wrapper
    (also returned, for no_sync) or, `sharded`, the model itself sharded in place (and its no_sync),
    and with train.compile all of it under torch.compile."""
    ddp = None
    if sharded:
        ddp = sharding.shard(model, device, processes.world_size)
    elif processes.enabled:
        # the only buffers are the sinusoidal position tables, equal everywhere: no syncing at each forward
        # (torch 2.13 renamed the option; older versions know only broadcast_buffers)
        parameters = inspect.signature(torch.nn.parallel.DistributedDataParallel).parameters
        no_sync = {"forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers": False}
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, **no_sync
        )
    forward = model if sharded else ddp or model
    if compile:  # checkpoints hold `model`'s own parameter names, loadable without compile
        forward = torch.compile(forward)
    return forward, ddp
