"""What a run reports as it goes: metrics.jsonl (one JSON object per logged step or validation),
TensorBoard when asked for, and curves.png redrawn after validations (at most once a minute, and
at the end) unless train.curves is off. Only rank 0 writes."""

from __future__ import annotations

import json
import logging
import os
import time

from mt_transformer.errors import UserError
from mt_transformer.files import write_text

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
# Drawing the figure takes a noticeable share of a small CPU; validations minutes apart redraw every time.
CURVES_EVERY_S = 60.0


def read_metrics(run_dir: str) -> list[dict]:
    """The JSON lines of a run's metrics.jsonl (a line cut short by a crash is skipped)."""
    rows = []
    with open(os.path.join(run_dir, METRICS_FILE), encoding="utf-8") as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return rows


def metrics_up_to(run_dir: str, step: int) -> list[dict]:
    """The logged rows of steps up to `step`: a resumed run logs the later ones again."""
    if not os.path.isfile(os.path.join(run_dir, METRICS_FILE)):
        return []
    return [row for row in read_metrics(run_dir) if isinstance(row, dict) and row.get("step", step + 1) <= step]


def tensorboard_writer(run_dir: str | None = None):
    """A SummaryWriter logging to {run_dir}/tensorboard (None: only check that tensorboard is installed)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UserError("train.tensorboard: true needs the tensorboard package (pip install tensorboard)") from None
    return SummaryWriter(os.path.join(run_dir, "tensorboard")) if run_dir else None


class RunLog:
    def __init__(self, run_dir: str, step: int, writes: bool, tensorboard: bool, curves: bool = True):
        self.run_dir, self.writes, self.curves = run_dir, writes, curves
        # a run that starts afresh drops what an earlier start, stopped before its first checkpoint, logged
        self.rows = metrics_up_to(run_dir, step) if writes and step > 0 else []
        self.tensorboard = tensorboard_writer(run_dir) if tensorboard and writes else None
        self.drawn_at, self.drawn_rows = time.monotonic(), len(self.rows)

    def write(self, entry: dict) -> None:
        """Add a row to metrics.jsonl, rewriting the small file atomically, and to
        TensorBoard when it is on."""
        if not self.writes:
            return
        self.rows.append(entry)
        write_text(os.path.join(self.run_dir, METRICS_FILE), "".join(json.dumps(row) + "\n" for row in self.rows))
        if self.tensorboard is not None:
            for key, value in entry.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.tensorboard.add_scalar(key, value, entry["step"])
            self.tensorboard.flush()

    def refresh_curves(self, final: bool = False) -> None:
        """Redraw curves.png from the rows so far if a minute has passed since the last drawing, or
        at the end (`final`) if rows came since. A failure to draw is a warning: it must not end a
        long run."""
        if not (self.writes and self.curves) or len(self.rows) == self.drawn_rows:
            return
        if not final and time.monotonic() - self.drawn_at < CURVES_EVERY_S:
            return
        self.drawn_at, self.drawn_rows = time.monotonic(), len(self.rows)
        from mt_transformer.training.curves import plot_curves  # matplotlib, only in a run that draws

        try:
            plot_curves([("", self.rows)], os.path.join(self.run_dir, "curves.png"))
        except (OSError, RuntimeError, ValueError) as error:
            log.warning("curves.png not refreshed: %s", error)
