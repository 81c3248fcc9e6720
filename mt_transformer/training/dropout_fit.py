"""`train.dropout_min_epochs`, `train.long_run_dropout`: dropout fitted to the run's length.

Dropout (model.dropout, model.attention_dropout) keeps a model from learning its training data
by heart, which takes many passes over it; a run that reads its data only a few times is still
underfitting, and there dropout only slows learning, while a run that reads it many times needs
more of it (docs/recipes.md, "Dropout fitted to the run's length"). With either setting on, the
run estimates how many times it will read its data, E, and trains without dropout where
E < train.dropout_min_epochs, with residual dropout `rate` where long_run_dropout = (epochs,
rate) and E >= epochs, and as built otherwise:

    epochs = min(max_steps, max_epochs * U, updates the minutes hold) / U

where U is the updates in one epoch. The updates a time limit holds come from the run's own
speed: its updates so far over its elapsed time, taken once MEASURE_FRACTION of the minutes
has passed; until then the model trains with the dropout it was built with. The decision is
saved with the run's state, so that a resumed run keeps it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from torch import nn

from mt_transformer.config import TrainConfig
from mt_transformer.model.attention import MultiHeadAttention
from mt_transformer.model.dropout import Dropout
from mt_transformer.training.state import TrainerState

log = logging.getLogger(__name__)

MEASURE_FRACTION = 0.05  # of train.max_minutes, before the run's speed is taken as known


def expected_epochs(train: TrainConfig, updates_per_epoch: int, step: int, elapsed_s: float) -> float | None:
    """The epochs the run will read, from its limits and, under train.max_minutes, its speed after
    `step` updates in `elapsed_s` seconds; None while it is too early to measure that speed."""
    limits = [train.max_steps]
    if train.max_epochs:
        limits.append(train.max_epochs * updates_per_epoch)
    if train.max_minutes:
        if step == 0 or elapsed_s < MEASURE_FRACTION * 60 * train.max_minutes:
            return None
        limits.append(step / elapsed_s * 60 * train.max_minutes)
    return min(limits) / updates_per_epoch


def set_dropout(model: nn.Module, keep: bool, residual: float, attention: float) -> None:
    """Every dropout of `model` at the configured rates (`keep`) or off."""
    for module in model.modules():
        if isinstance(module, Dropout):
            module.p = residual if keep else 0.0
        elif isinstance(module, MultiHeadAttention):
            module.dropout = attention if keep else 0.0


class DropoutFit:
    """Decides once per run whether dropout stays on; `check` after every update."""

    def __init__(self, model: nn.Module, config, state: TrainerState, epoch_updates: Callable[[], int], announce: bool):
        """`epoch_updates()`: the updates in one epoch, asked only where the setting is on."""
        self.model, self.train, self.state, self.announce = model, config.train, state, announce
        self.rates = (config.model.dropout, config.model.attention_dropout)
        self.long_epochs, self.long_rate = self.train.long_run_dropout
        self.active = (bool(self.train.dropout_min_epochs) and any(self.rates)) or self.long_epochs > 0
        self.updates_per_epoch = max(epoch_updates(), 1) if self.active else 1
        if self.active and state.dropout_on is not None:  # a resumed run keeps its decision
            set_dropout(model, state.dropout_on, *self.decided_rates(state.dropout_rate))
        self.check(state.step, state.elapsed)

    def decided_rates(self, residual: float | None) -> tuple[float, float]:
        """(residual, attention) dropout once decided: `residual` where long_run_dropout chose it."""
        return (self.rates[0] if residual is None else residual), self.rates[1]

    def check(self, step: int, elapsed_s: float) -> None:
        if not self.active or self.state.dropout_on is not None:
            return
        epochs = expected_epochs(self.train, self.updates_per_epoch, step, elapsed_s)
        if epochs is None:
            return
        keep = epochs >= self.train.dropout_min_epochs
        long = keep and self.long_epochs > 0 and epochs >= self.long_epochs
        self.state.dropout_on = keep
        self.state.dropout_rate = self.long_rate if long else None
        set_dropout(self.model, keep, *self.decided_rates(self.state.dropout_rate))
        if self.announce:
            if long:
                decision = f"{self.long_rate:g} (train.long_run_dropout from {self.long_epochs:g} epochs)"
            elif not keep:
                decision = f"off (train.dropout_min_epochs {self.train.dropout_min_epochs:g})"
            else:
                decision = f"kept at {self.rates[0]:g} (model.dropout)"
            log.info("dropout %s: the run is expected to read its training data %.1f times", decision, epochs)
