"""Where a run stands: the counters a checkpoint saves and a resumed run takes back."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field


@dataclass
class TrainerState:
    step: int = 0  # optimizer updates applied
    epoch: int = 0  # from 0
    batch_in_epoch: int = 0  # this rank's batches of the epoch already consumed
    best_bleu: float | None = None  # the best valid BLEU so far, and its step
    best_step: int | None = None
    since_best: int = 0  # validations in a row without a better BLEU (early stopping)
    elapsed: float = 0.0  # seconds of training, over all the run's processes' lifetimes
    skipped: int = 0  # updates skipped for a non-finite loss or gradient
    out_of_memory: int = 0  # updates redone in smaller pieces for lack of memory
    oom_dropped: int = 0  # updates dropped: single sentences did not fit
    world_size: int = 1  # processes that trained it
    dropout_on: bool | None = None  # train.dropout_min_epochs's decision; None: not (yet) made
    dropout_rate: float | None = None  # the residual dropout it chose (train.long_run_dropout)
    sampled_epochs: list[bool] = field(default_factory=list)  # whether each epoch, from 0, sampled (sampling_fit.py)

    def record_validation(self, bleu: float | None) -> bool:
        """Count a validation's BLEU (None: the run has no valid set) against the best so far;
        returns whether it is the new best."""
        if bleu is None:
            return False
        if self.best_bleu is None or bleu > self.best_bleu:
            self.best_bleu, self.best_step, self.since_best = bleu, self.step, 0
            return True
        self.since_best += 1
        return False

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def saved_with(self, optimizer_state: dict, scheduler, scaler, rng_ranks: list, all_ranks: bool) -> dict:
        """What a checkpoint's trainer file holds, for a resumed run to continue exactly: the optimizer,
        schedule and gradient scaler, these counters, rank 0's random generators, and under torchrun
        (`all_ranks`) every rank's."""
        state = {
            "optimizer": optimizer_state,
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "rng": rng_ranks[0],
            **self.to_dict(),
        }
        if all_ranks:
            state["rng_ranks"] = rng_ranks
        return state

    @classmethod
    def from_dict(cls, saved: dict) -> TrainerState:
        """The state in a checkpoint's trainer file (keys it lacks keep their defaults)."""
        return cls(**{f.name: saved[f.name] for f in dataclasses.fields(cls) if f.name in saved})
