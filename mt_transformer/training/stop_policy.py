"""When a run stops: its step, epoch and time limits, early stopping on valid BLEU, too many
non-finite updates in a row, and SIGTERM/SIGINT (what clusters send before preemption, and
Ctrl-C), which save a checkpoint at the next update boundary. Under torchrun the ranks share
each decision, so all of them stop at the same update."""

from __future__ import annotations

import contextlib
import logging
import signal
import time

from mt_transformer.config import TrainConfig
from mt_transformer.errors import UserError
from mt_transformer.processes import Processes
from mt_transformer.signals import stopping_signals
from mt_transformer.training.state import TrainerState

log = logging.getLogger(__name__)


class TrainingStopped(Exception):
    """SIGTERM or SIGINT arrived: a checkpoint was saved at the next update boundary."""

    def __init__(self, signum: int, step: int, directory: str):
        super().__init__(
            f"stopped by {signal.Signals(signum).name} at step {step}: checkpoint saved in {directory}; "
            f"run the same command again to resume"
        )
        self.signum = signum


class StopPolicy:
    def __init__(self, train: TrainConfig, state: TrainerState, processes: Processes):
        self.train, self.state, self.processes = train, state, processes
        self.received = None  # the signal this process received, set by the handler at any moment
        self.agreed = None  # under torchrun: the signal all ranks agreed on at the last update
        self.clock = (time.monotonic(), state.elapsed)  # (when this process started, elapsed before it)
        self.shared_elapsed = None  # under torchrun: the ranks' mean elapsed time at the last update
        self.time_up = self.over_time()

    def elapsed(self) -> float:
        return self.clock[1] + time.monotonic() - self.clock[0]

    def elapsed_at_update(self) -> float:
        """The run's elapsed seconds as of the update just made, for the budget schedule and
        train.dropout_min_epochs. Under torchrun the value the ranks agreed on, so that every rank
        computes the same learning rate and makes the same dropout decision."""
        if self.processes.enabled and self.shared_elapsed is not None:
            return self.shared_elapsed
        return self.elapsed()

    def over_time(self) -> bool:
        return bool(self.train.max_minutes) and self.elapsed() >= 60 * self.train.max_minutes

    def out_of_patience(self) -> bool:
        """train.patience validations in a row without a better valid BLEU."""
        return self.train.patience > 0 and self.state.since_best >= self.train.patience

    def finished(self) -> bool:
        train, state = self.train, self.state
        epochs_done = bool(train.max_epochs and state.epoch >= train.max_epochs)
        return state.step >= train.max_steps or self.time_up or epochs_done or self.out_of_patience()

    def local_view(self) -> tuple[bool, bool, float]:
        """What this process knows at an update: whether its time is up, whether it received a
        signal, and its clock. Under torchrun the ranks pool these (`agree`), so that all stop at
        the same update and follow one clock."""
        self.time_up = self.over_time()
        return self.time_up, self.received is not None, self.elapsed()

    def agree(self, time_up_anywhere: bool, signalled_anywhere: bool, mean_elapsed: float) -> None:
        """Take the ranks' pooled view: time up or a signal on any rank stops all of them, and the
        mean of their clocks is the run's elapsed time."""
        self.time_up = time_up_anywhere
        self.shared_elapsed = mean_elapsed
        # another rank's signal stops this one too (torchrun sends them to all ranks anyway)
        self.agreed = (self.received or signal.SIGTERM) if signalled_anywhere else None

    def signal_to_stop(self) -> int | None:
        """The signal to stop on at this update boundary, or None."""
        return self.agreed if self.processes.enabled else self.received

    def check_divergence(self, bad_in_a_row: int, last_checkpoint: str) -> None:
        """End the run once train.max_bad_updates updates in a row had a non-finite gradient."""
        train = self.train
        if not train.max_bad_updates or bad_in_a_row < train.max_bad_updates:
            return
        cause = (
            "fp16 overflowed although the loss scale was lowered (try train.precision: bf16) or "
            if train.precision == "fp16"
            else ""
        )
        raise UserError(
            f"training diverged: {bad_in_a_row} updates in a row had a non-finite loss or gradient "
            f"(train.max_bad_updates: {train.max_bad_updates}); likely cause: {cause}a learning rate too high for "
            f"this model (try a lower train.lr_scale, a longer train.warmup or train.clip_norm: 1.0); "
            f"last good checkpoint: {last_checkpoint}"
        )

    @contextlib.contextmanager
    def signals_handled(self):
        """SIGTERM and SIGINT mark the run to stop at the next update boundary while inside."""
        with stopping_signals(self._on_signal):
            yield

    def _on_signal(self, signum, frame) -> None:
        # A second signal stops at once, without saving; not under torchrun, which passes Ctrl-C
        # on to the ranks after the terminal did, and kills them itself when they take too long.
        if self.received is not None and not self.processes.enabled:
            raise KeyboardInterrupt
        self.received = signum
        log.warning("%s received: saving a checkpoint after this update", signal.Signals(signum).name)
