"""`train.sampling_min_epochs`: data.spm_alpha's sampled segmentations fitted to the run's length.

Subword sampling is a regularizer, like dropout: each epoch reads its pairs cut into other pieces,
which a run that reads its data many times learns from, and a short one pays for twice, in
updates (longer segmentations, drawn anew each epoch) and on clean text (docs/recipes.md, "Input
as people type it"). With N = train.sampling_min_epochs, each epoch is drawn with sampled
segmentations only where the run is expected to read its data at least N times
(dropout_fit.expected_epochs: its limits and, under train.max_minutes, its speed); its pairs
changed by data.augment are changed all the same. A timed run's epochs drawn before its speed
is known (its first 5% of minutes) are drawn without sampling. Each epoch's decision is logged
and saved with the run's state, so a resumed run draws the same pairs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from mt_transformer.config import Config
from mt_transformer.training.dropout_fit import expected_epochs
from mt_transformer.training.state import TrainerState

log = logging.getLogger(__name__)


class SamplingFit:
    """Whether each epoch samples segmentations, decided when the epoch is first drawn."""

    def __init__(self, config: Config, state: TrainerState, epoch_updates: Callable[[], int], announce: bool):
        """`epoch_updates()`: the updates in one epoch of the prepared pairs."""
        self.train, self.state, self.epoch_updates, self.announce = config.train, state, epoch_updates, announce
        self.active = bool(config.data.spm_alpha and self.train.sampling_min_epochs)

    def sampled(self, epoch: int) -> bool:
        """Whether `epoch` samples: always where the setting is off; its saved decision where it
        was drawn before; else decided now, from the run's state."""
        if not self.active:
            return True
        decided = self.state.sampled_epochs
        while len(decided) <= epoch:
            epochs = expected_epochs(self.train, max(self.epoch_updates(), 1), self.state.step, self.state.elapsed)
            decided.append(epochs is not None and epochs >= self.train.sampling_min_epochs)
            if self.announce:
                self._say(len(decided) - 1, epochs)
        return decided[epoch]

    def _say(self, epoch: int, epochs: float | None) -> None:
        what = "sampled" if self.state.sampled_epochs[epoch] else "not sampled"
        if epochs is None:
            why = "the run's length is not known yet"
        else:
            why = f"~{epochs:.1f} epochs expected, train.sampling_min_epochs {self.train.sampling_min_epochs:g}"
        log.info("epoch %d: segmentations %s (%s)", epoch, what, why)
