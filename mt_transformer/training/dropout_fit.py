"""`train.dropout_min_epochs`, `train.long_run_dropout`, `train.dropout_from`: dropout fitted to
the run's length.

Dropout (model.dropout, model.attention_dropout, model.word_dropout) keeps a model from learning
its training data by heart, which takes many passes over it; a run that reads its data only a few
times is still underfitting, and there dropout only slows learning, while a run that reads it
many times needs more of it (docs/recipes.md, "Dropout fitted to the run's length"). With either
setting on, the run estimates how many times it will read its data, E, and trains without
dropout where E < train.dropout_min_epochs, with residual dropout `rate` (and word dropout
train.long_run_word_dropout) where long_run_dropout = (epochs, rate) and E >= epochs, and as
built otherwise:

    epochs = min(max_steps, max_epochs * U, updates the minutes hold) / U

where U is the updates in one epoch. The updates a time limit holds come from the run's own
speed: its updates so far over its elapsed time, taken once MEASURE_FRACTION of the minutes
has passed; until then the model trains with the dropout it was built with. The decision is
saved with the run's state, so that a resumed run keeps it.

With train.dropout_from = f > 0, dropout that is kept starts only once the part f of the run is
spent, the larger of step / max_steps, elapsed / max_minutes and epochs read / max_epochs: early
in a run the model underfits and learns faster without it, late in a long one it overfits
without it ("late dropout"; docs/recipes.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from torch import nn

from mt_transformer.config import TrainConfig
from mt_transformer.model.attention import MultiHeadAttention
from mt_transformer.model.dropout import Dropout, WordDropout
from mt_transformer.training.schedule import budget_progress
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


def set_dropout(model: nn.Module, keep: bool, residual: float, attention: float, word: float) -> None:
    """Every dropout of `model` at the configured rates (`keep`) or off."""
    for module in model.modules():
        if isinstance(module, Dropout):
            module.p = residual if keep else 0.0
        elif isinstance(module, WordDropout):
            module.p = word if keep else 0.0
        elif isinstance(module, MultiHeadAttention):
            module.dropout = attention if keep else 0.0


class DropoutFit:
    """Decides once per run whether dropout stays on, and at what rate; `check` after every update."""

    def __init__(self, model: nn.Module, config, state: TrainerState, epoch_updates: Callable[[], int], announce: bool):
        """`epoch_updates()`: the updates in one epoch, asked only where a setting is on."""
        self.model, self.train, self.state, self.announce = model, config.train, state, announce
        self.rates = (config.model.dropout, config.model.attention_dropout, config.model.word_dropout)
        self.long_epochs, self.long_rate = self.train.long_run_dropout
        fitted = bool(self.train.dropout_min_epochs or self.train.dropout_from) and any(self.rates)
        self.active = fitted or self.long_epochs > 0
        self.updates_per_epoch = max(epoch_updates(), 1) if self.active else 1
        self.applied = None  # whether the dropout modules are now on
        if self.active and self.train.dropout_from > 0:
            self.apply(False)
        self.check(state.step, state.elapsed)

    def decided_rates(self, residual: float | None) -> tuple[float, float, float]:
        """(residual, attention, word) dropout once decided: `residual` where long_run_dropout chose
        it, and then train.long_run_word_dropout."""
        if residual is None:
            return self.rates
        return residual, self.rates[1], self.train.long_run_word_dropout

    def apply(self, on: bool) -> None:
        if on != self.applied:
            set_dropout(self.model, on, *self.decided_rates(self.state.dropout_rate))
            self.applied = on

    def progress(self, step: int, elapsed_s: float) -> float:
        """The part of the run spent: the budget schedule's steps and minutes, and the epochs."""
        spent = budget_progress(step, self.train, elapsed_s)
        if self.train.max_epochs:
            spent = max(spent, step / (self.train.max_epochs * self.updates_per_epoch))
        return spent

    def check(self, step: int, elapsed_s: float) -> None:
        if not self.active:
            return
        if self.state.dropout_on is None and not self.decide(step, elapsed_s):
            return
        started = self.progress(step, elapsed_s) >= self.train.dropout_from
        if self.state.dropout_on and started and not self.applied and self.train.dropout_from > 0 and self.announce:
            log.info("dropout on from update %d (train.dropout_from %g)", step, self.train.dropout_from)
        self.apply(bool(self.state.dropout_on) and started)

    def decide(self, step: int, elapsed_s: float) -> bool:
        """Makes and logs the decision, once the run's length is known; False while it is not."""
        epochs = expected_epochs(self.train, self.updates_per_epoch, step, elapsed_s)
        if epochs is None:
            return False
        keep = epochs >= self.train.dropout_min_epochs
        long = keep and self.long_epochs > 0 and epochs >= self.long_epochs
        self.state.dropout_on = keep
        self.state.dropout_rate = self.long_rate if long else None
        self.applied = None  # the rate may have changed
        if self.announce:
            if long:
                decision = f"{self.long_rate:g} (train.long_run_dropout from {self.long_epochs:g} epochs)"
                if self.train.long_run_word_dropout:
                    decision += f", word dropout {self.train.long_run_word_dropout:g}"
            elif not keep:
                decision = f"off (train.dropout_min_epochs {self.train.dropout_min_epochs:g})"
            else:
                decision = f"kept at {self.rates[0]:g} (model.dropout)"
            log.info("dropout %s: the run is expected to read its training data %.1f times", decision, epochs)
        return True
