"""Learning-rate schedules, as LambdaLR factors of the optimizer's base lr.

noam, the paper's (section 5.3), the default:

    lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

It rises linearly for `warmup` steps, then falls with the inverse square root of the step, and
knows nothing of how long the run will be.

budget, for a run of known length (train.max_steps, or train.max_minutes):

    lrate = peak_lr * p / w                                 while p < w
    lrate = peak_lr * (1 - p) / (1 - w)                     after, decay: linear
    lrate = peak_lr * hold(p) * min(1, (1 - p) / c)         after, decay: rsqrt or constant

where p in [0, 1] is the part of the budget spent, the larger of step / max_steps and
elapsed / max_minutes, w is train.warmup_fraction and c train.cooldown_fraction; hold(p) is
sqrt(w / p) for rsqrt (Noam's inverse square root, counted in parts of the budget) and 1 for
constant. The rate reaches zero exactly when the run stops, so the last checkpoints are the
settled ones whatever the budget.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from mt_transformer.config import TrainConfig


def noam_factor(step: int, d_model: int, warmup: int) -> float:
    """The schedule's value at update `step` (1-based)."""
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def budget_factor(
    progress: float, warmup_fraction: float, decay: str = "linear", cooldown: float = TrainConfig.cooldown_fraction
) -> float:
    """The budget schedule's share of the peak rate once `progress` of the budget is spent."""
    progress = min(max(progress, 0.0), 1.0)
    if progress < warmup_fraction:
        return progress / warmup_fraction
    if decay == "linear":
        return (1.0 - progress) / (1.0 - warmup_fraction)
    hold = (warmup_fraction / progress) ** 0.5 if decay == "rsqrt" else 1.0
    return hold * min(1.0, (1.0 - progress) / cooldown)


def budget_progress(step: int, train: TrainConfig, elapsed_s: float) -> float:
    """The part of the run's budget spent at update `step` after `elapsed_s` seconds of training."""
    by_steps = step / train.max_steps
    by_time = elapsed_s / (60.0 * train.max_minutes) if train.max_minutes else 0.0
    return max(by_steps, by_time)


def base_lr(train: TrainConfig) -> float:
    """The optimizer's lr, which the factor multiplies: Noam's scale, or the budget's peak."""
    return train.peak_lr if train.schedule == "budget" else train.lr_scale


def scheduler_for(
    optimizer: torch.optim.Optimizer, train: TrainConfig, d_model: int, elapsed: Callable[[], float]
) -> torch.optim.lr_scheduler.LambdaLR:
    """train.schedule's scheduler; `elapsed` gives the seconds the run has trained so far (the
    budget schedule's clock). LambdaLR's counter starts at 0 before the first update, hence step + 1."""
    if train.schedule == "budget":
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: budget_factor(
                budget_progress(step + 1, train, elapsed()), train.warmup_fraction, train.decay, train.cooldown_fraction
            ),
        )
    return noam_scheduler(optimizer, d_model, train.warmup)


def noam_scheduler(optimizer: torch.optim.Optimizer, d_model: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR multiplies the optimizer's lr (the scale) by the factor."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: noam_factor(step + 1, d_model, warmup))
