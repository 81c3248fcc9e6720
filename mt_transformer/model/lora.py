"""Low-rank adapters (LoRA; Hu et al., 2021): a frozen linear layer W x + b plus a trained update
of rank r,

    h = W x + b + (alpha / r) B A x,   A: (r, d_in), B: (d_out, r), B = 0 at the start,

so training starts from the base model exactly and trains r (d_in + d_out) numbers per layer in
place of d_in d_out. Merged, W' = W + (alpha / r) B A is a plain linear layer again: every command
that loads an adapter checkpoint translates with the merged weights (checkpoint/loading.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

ADAPTER_NAMES = ("lora_a", "lora_b")


class LoRALinear(nn.Linear):
    """`base`'s own weight and bias (the same Parameters, frozen) with an adapter of `rank`."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__(base.in_features, base.out_features, bias=base.bias is not None, device="meta")
        self.weight, self.bias = base.weight, base.bias
        self.scale = alpha / rank
        like = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, **like))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, **like))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as nn.Linear draws its weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(x, self.lora_a), self.lora_b)  # (..., rank) -> (..., d_out)
        return F.linear(x, self.weight, self.bias) + self.scale * update


def add_adapters(model: nn.Module, rank: int, alpha: float, targets: tuple[str, ...]) -> list[str]:
    """Freeze every parameter of `model` and give each nn.Linear whose own name is in `targets`
    an adapter (the only parameters left to train); returns the adapted layers' names."""
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    adapted = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in targets and type(child) is nn.Linear:
                setattr(module, child_name, LoRALinear(child, rank, alpha))
                adapted.append(f"{name}.{child_name}" if name else child_name)
    if not adapted:
        raise ValueError(f"no linear layer is named any of {', '.join(targets)}")
    return adapted


def has_adapters(model: nn.Module) -> bool:
    return any(isinstance(module, LoRALinear) for module in model.modules())


def adapter_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors by their state_dict names ({} for a model without adapters)."""
    return {
        name: tensor.detach().contiguous()
        for name, tensor in model.state_dict().items()
        if name.rsplit(".", 1)[-1] in ADAPTER_NAMES
    }


def merged(weights: dict[str, torch.Tensor], adapters: dict[str, torch.Tensor], scale: float) -> dict:
    """The base's `weights` with each adapter merged in, W' = W + scale B A (in float32 at least,
    stored in W's dtype): plain weights of the same model without adapters."""
    out = dict(weights)
    for name in adapters:
        layer, kind = name.rsplit(".", 1)
        if kind != "lora_a":
            continue
        a, b, w = adapters[name], adapters[f"{layer}.lora_b"], weights[f"{layer}.weight"]
        wide = torch.promote_types(w.dtype, torch.float32)
        out[f"{layer}.weight"] = (w.to(wide) + scale * (b.to(wide) @ a.to(wide))).to(w.dtype)
    return out
