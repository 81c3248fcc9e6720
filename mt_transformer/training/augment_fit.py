"""`train.augment_full_epochs`: data.augment and data.spm_alpha fitted to the run's length.

The changed pairs that teach a model input as people type it (typos, a missing final stop,
noise, inline tags, capitals) and sampled segmentations take the place of clean pairs: a run that
reads its data many times can spare them, a short one pays for them on clean text
(docs/recipes.md, "Input as people type it"). With N = train.augment_full_epochs, a run expected
to read E epochs (dropout_fit.expected_epochs, from its limits and its speed) draws each epoch
with every modifier's share times min(1, E / N), and samples segmentations (data.spm_alpha) only
where E >= N. A timed run's epochs drawn before its speed is known (its first 5% of minutes)
are drawn clean. Each epoch's scale is saved with the run's state, so a resumed run draws the
same pairs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mt_transformer.config import TrainConfig
from mt_transformer.training.dropout_fit import expected_epochs
from mt_transformer.training.state import TrainerState

log = logging.getLogger(__name__)


class AugmentFit:
    """Each epoch's scale of data.augment's shares, decided when the epoch is first drawn."""

    def __init__(self, train: TrainConfig, state: TrainerState, epoch_updates: Callable[[], int], announce: bool):
        """`epoch_updates()`: the updates in one epoch of the unchanged pairs."""
        self.train, self.state, self.epoch_updates, self.announce = train, state, epoch_updates, announce

    def scale(self, epoch: int) -> float:
        """The scale of `epoch`'s shares: 1 without train.augment_full_epochs; its saved scale
        where it was drawn before; else decided now, from the run's state."""
        full = self.train.augment_full_epochs
        if not full:
            return 1.0
        scales = self.state.augment_scales
        while len(scales) <= epoch:
            epochs = expected_epochs(self.train, max(self.epoch_updates(), 1), self.state.step, self.state.elapsed)
            scales.append(0.0 if epochs is None else round(min(1.0, epochs / full), 4))
            if self.announce:
                self._say(len(scales) - 1, epochs)
        return scales[epoch]

    def _say(self, epoch: int, epochs: float | None) -> None:
        scale = self.state.augment_scales[epoch]
        if epochs is None:
            why = "the run's length is not known yet"
        else:
            why = f"~{epochs:.1f} epochs expected, train.augment_full_epochs {self.train.augment_full_epochs:g}"
        sampling = "" if scale == 1 else ", no sampled segmentations"
        log.info("epoch %d: data.augment's shares x %.2f%s (%s)", epoch, scale, sampling, why)
