"""train.distributed: fsdp. PyTorch's FSDP2 (`fully_shard`) spreads the weights, gradients and
Adam's state over the torchrun processes: each encoder and decoder layer is a unit gathered whole
for its forward and backward passes and freed after, the embeddings, norms and output projection
the root unit. Each process keeps about 1/N of the 16 bytes a parameter that DDP keeps whole.

Checkpoints are the files DDP and one process write: every rank takes part in gathering the whole
weights and optimizer state, rank 0 writes them (the optimizer state numbered as torch numbers an
unsharded optimizer's), so a run resumes on any number of processes, sharded or not, and every
command loads its checkpoints as any other.
"""

from __future__ import annotations

import contextlib

import torch

from mt_transformer import checkpoint

# torch.distributed's fsdp, device_mesh and checkpoint modules are imported where they are used:
# their import is slow, and every mt-train without train.distributed: fsdp would pay it


class Sharded:
    """A sharded model's counterpart of DistributedDataParallel's no_sync, for TrainingStep."""

    def __init__(self, model):
        self.model = model

    @contextlib.contextmanager
    def no_sync(self):
        """The gradients of an update's earlier batches stay on each rank, reduced with the last's."""
        self.model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            self.model.set_requires_gradient_sync(True)


def shard(model, device: torch.device, world_size: int) -> Sharded:
    """Shard `model` in place over the processes: a unit per layer, then the rest. Its weights
    must be loaded before (a resumed or fine-tuned run's)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (world_size,))
    for layer in (*model.encoder, *model.decoder):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return Sharded(model)


def _numbers(model, optimizer) -> dict[str, int]:
    """Each trained parameter's name -> its number in an unsharded optimizer's state_dict: its
    place over the optimizer's groups."""
    names = {id(p): name for name, p in model.named_parameters()}
    return {names[id(p)]: i for i, p in enumerate(p for group in optimizer.param_groups for p in group["params"])}


def gathered_state(model, optimizer) -> tuple[dict, dict]:
    """(weights, optimizer state) whole on rank 0 ({} elsewhere): the weights under the model's
    first name of a tied tensor, the state numbered as an unsharded optimizer's. Every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    gathered = StateDictOptions(full_state_dict=True, cpu_offload=True)  # whole, on rank 0's CPU alone
    weights = get_model_state_dict(model, options=gathered)
    state = get_optimizer_state_dict(model, optimizer, options=gathered)
    if not weights:
        return {}, {}
    aliases, numbers = checkpoint.tied_names(model), _numbers(model, optimizer)
    groups = [{**group, "params": [numbers[name] for name in group["params"]]} for group in state["param_groups"]]
    return {name: tensor for name, tensor in weights.items() if name not in aliases}, {
        "state": {numbers[name]: s for name, s in state["state"].items()},
        "param_groups": groups,
    }


def load_optimizer_state(model, optimizer, saved: dict) -> None:
    """A checkpoint's whole optimizer state (numbered as an unsharded optimizer's) into the
    sharded optimizer, each rank keeping its shards. Every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = {i: name for name, i in _numbers(model, optimizer).items()}
    groups = [{**group, "params": [names[i] for i in group["params"]]} for group in saved["param_groups"]]
    state = {"state": {names[i]: s for i, s in saved["state"].items()}, "param_groups": groups}
    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
