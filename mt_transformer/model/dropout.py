"""Dropout (paper section 5.4): during training each element is zeroed with probability p and
the others scaled by 1 / (1 - p), so the expectation is unchanged.

On the CPU, PyTorch's dropout draws its mask with `bernoulli_`, one random number per element
and slow enough to be 8% of a small model's training update; here one 64-bit draw makes
the mask of four elements (a 16-bit slice each), which runs forward and backward 2.5 times as
fast (docs/benchmarks.md). Elsewhere it is `F.dropout`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_LEVELS = 1 << 16  # a mask element is one 16-bit slice of a random word


def cpu_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """x with elements zeroed with probability round(p * 2^16) / 2^16 (within 2^-17 of p) and the
    rest scaled by the inverse of the kept fraction, which keeps the expectation exact."""
    dropped_levels = round(p * _LEVELS)
    if dropped_levels == 0:
        return x
    if dropped_levels == _LEVELS:
        return x * 0.0
    n = x.numel()
    # the full 64-bit range, four uniform int16 values per word
    words = torch.empty((n + 3) // 4, dtype=torch.int64, device=x.device).random_(-(1 << 63), None)
    slices = words.view(torch.int16)[:n].view(x.shape)
    keep = slices >= dropped_levels - _LEVELS // 2  # true for (2^16 - dropped_levels) of the 2^16 values
    return x * (keep.to(x.dtype) * (_LEVELS / (_LEVELS - dropped_levels)))


def apply_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-time dropout of x: `cpu_dropout` on the CPU, `F.dropout` elsewhere."""
    if p == 0.0:
        return x
    return cpu_dropout(x, p) if x.device.type == "cpu" else F.dropout(x, p, training=True)


class Dropout(nn.Module):
    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return apply_dropout(x, self.p) if self.training else x

    def extra_repr(self) -> str:
        return f"p={self.p}"


class WordDropout(nn.Module):
    """Word dropout (Gal and Ghahramani, 2016; Sennrich and Zhang, 2019): during training each
    token's embedding is zeroed with probability p, so that the position encoding alone stands
    where the word was, as an unknown word would. Not rescaled: a dropped word is absent, not
    weaker. A regulariser for runs that read small data many times."""

    def __init__(self, p: float):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"word dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (batch, len, d_model) embeddings -> the same, some rows zeroed."""
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand(x.shape[:2], device=x.device) >= self.p  # (batch, len)
        return x * keep.unsqueeze(-1).to(x.dtype)

    def extra_repr(self) -> str:
        return f"p={self.p}"
