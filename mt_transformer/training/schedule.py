"""The learning-rate schedule of the paper (section 5.3), as a LambdaLR factor:

    lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

It rises linearly for `warmup` steps, then falls with the inverse square root of the step.
"""

from __future__ import annotations

import torch


def noam_factor(step: int, d_model: int, warmup: int) -> float:
    """The schedule's value at update `step` (1-based)."""
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def noam_scheduler(optimizer: torch.optim.Optimizer, d_model: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR multiplies the optimizer's lr (the scale) by the factor; its internal counter
    starts at 0 before the first update, hence step + 1."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: noam_factor(step + 1, d_model, warmup))
