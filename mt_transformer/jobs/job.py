"""Translating (or scoring) a corpus of any length: its lines are read in windows, each window is
processed and written in input order before the next is read, so memory does not grow with the
input and a pipe sees output window by window.

With an output file the windows go to FILE.partial, and FILE.progress.json records after each
one what is done: the settings, each window's digest and the bytes written. Running the same
command again after a crash or a kill continues after the last recorded window and ends with the
same bytes as a run never interrupted; FILE.partial becomes FILE by one rename at the end.
SIGTERM and SIGINT finish the current window first.

`--shard K/N` processes windows K, K+N, K+2N, ... only; the shards' records say which output
lines belong to which window, so that records.merge_shards puts them back in input order.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tqdm import tqdm

from mt_transformer.errors import UserError
from mt_transformer.files import atomic_path, fsync_dir, write_text
from mt_transformer.jobs.records import RECORD_FORMAT, encoded, read_record, record_path
from mt_transformer.jobs.windows import Shard, Window, shard_lines
from mt_transformer.signals import stopping_signals

log = logging.getLogger(__name__)


class JobStopped(Exception):
    """SIGTERM or SIGINT arrived; the job stopped after a complete window."""

    def __init__(self, signum: int, message: str):
        super().__init__(message)
        self.signum = signum


@dataclass
class CorpusJob:
    """One command's pass over a corpus. `settings`: everything that decides the output's bytes
    (flags, the model's identity), compared when a partial output is continued."""

    output: str | None  # None or "-": standard output, written window by window
    settings: dict
    buffer_lines: int
    shard: Shard = field(default_factory=Shard)
    restart: bool = False
    received: int | None = None  # the signal that asks to stop after the current window
    fresh: bool = False  # whether this run began the partial output (rather than continuing one)

    def __post_init__(self):
        self.settings = json.loads(json.dumps(self.settings))  # as the record will hold them

    @property
    def to_file(self) -> bool:
        return self.output not in (None, "-")

    @property
    def partial(self) -> str:
        return f"{self.output}.partial"

    @property
    def record_path(self) -> str:
        return record_path(self.output)

    def run(
        self,
        windows: Iterator[Window],
        work: Callable[[Window, Callable[[int], None]], list[str]],
        total: int | None = None,
        progress: bool = True,
        label: str | None = None,
    ) -> None:
        """work(window, advance): the window's output lines (each ending in a newline); advance(n)
        moves the progress bar (named `label`) by n of its lines. Nothing is written before the
        first window is read."""
        windows = iter(windows)
        first = next(windows, None)  # an input that fails at once leaves nothing behind
        record = {"windows": []}
        try:
            record = self._begin()
            lines_done = sum(w["lines"] for w in record["windows"])
            total = shard_lines(total, self.buffer_lines, self.shard)
            with self._signals_handled(), _Progress(total, lines_done, progress, label) as bar:
                self._process(itertools.chain([first], windows) if first else iter(()), record, work, bar)
        except BaseException:
            if self.fresh and not record["windows"]:
                self._discard()
            raise
        self._finish(record)

    def _process(self, windows: Iterator[Window], record: dict, work: Callable, bar: _Progress) -> None:
        done = list(record["windows"])  # written before: checked against the input, not redone
        taken = 0  # windows of this shard read so far
        for window in windows:
            if not self.shard.takes(window.index):
                continue
            taken += 1
            if taken <= len(done):
                if done[taken - 1]["digest"] != window.digest():
                    raise UserError(
                        f"{self.partial}: the input differs from the one it was begun with (at line "
                        f"{window.first_line + 1}); run with --restart to start over"
                    )
                continue
            lines = work(window, bar.start(len(window.rows)))
            bar.end_window()
            self._write(window, lines, record)
            if self.received is not None:
                self._stop(record)

    def _discard(self) -> None:
        """Remove a partial output that holds no window yet (an error in the first window): nothing is left behind."""
        if self.to_file:
            for path in (self.partial, self.record_path):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)

    def _stop(self, record: dict) -> None:
        lines = sum(w["lines"] for w in record["windows"])
        where = "; run the same command again to continue" if self.to_file else ""
        name = signal.Signals(self.received).name
        raise JobStopped(self.received, f"stopped by {name} after {lines} lines{where}")

    def _begin(self) -> dict:
        """The record to continue (its windows done), or a new one; the partial file cut to the recorded bytes."""
        fresh = {
            "format": RECORD_FORMAT,
            "settings": self.settings,
            "buffer_lines": self.buffer_lines,
            "shard": [self.shard.index, self.shard.count],
            "windows": [],
            "done": False,
        }
        if not self.to_file:
            return fresh
        old = read_record(self.record_path)
        resumable = old is not None and not old["done"] and old["windows"] and os.path.exists(self.partial)
        if resumable and not self.restart:
            self._check_same(old, fresh)
            with open(self.partial, "rb+") as f:
                f.truncate(sum(w["bytes"] for w in old["windows"]))
            log.info("%s: continuing after line %d", self.output, sum(w["lines"] for w in old["windows"]))
            return old
        if os.path.isdir(self.output):
            raise UserError(f"{self.output}: a directory; -o names the file to write")
        self.fresh = True
        try:
            with atomic_path(self.partial) as tmp:
                open(tmp, "wb").close()
        except OSError as error:
            raise UserError(f"{self.output}: cannot be written ({error.strerror})") from None
        self._save(fresh)
        return fresh

    def _check_same(self, old: dict, new: dict) -> None:
        differences = [
            (key, old["settings"].get(key), value)
            for key, value in new["settings"].items()
            if old["settings"].get(key) != value
        ]
        differences += [
            (f"--{key.replace('_', '-')}", old[key], new[key])
            for key in ("buffer_lines", "shard")
            if old[key] != new[key]
        ]
        if differences:
            key, before, now = differences[0]
            raise UserError(
                f"{self.partial}: begun with {key} {_shown(before)}, now {_shown(now)}; run it as before "
                f"to continue, or add --restart to start over"
            )

    def _write(self, window: Window, lines: list[str], record: dict) -> None:
        if not self.to_file:
            sys.stdout.write("".join(lines))
            sys.stdout.flush()
            return
        data = encoded(lines, gz=self.output.endswith(".gz"))
        with open(self.partial, "ab") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        entry = {"index": window.index, "lines": len(window.rows), "out_lines": len(lines), "bytes": len(data)}
        record["windows"].append({**entry, "digest": window.digest()})
        self._save(record)

    def _finish(self, record: dict) -> None:
        if not self.to_file:
            return
        os.replace(self.partial, self.output)
        fsync_dir(os.path.dirname(os.path.abspath(self.output)))
        if self.shard.count > 1:  # merge_shards reads which lines belong to which window
            record["done"] = True
            self._save(record)
        else:
            os.remove(self.record_path)

    def _save(self, record: dict) -> None:
        write_text(self.record_path, json.dumps(record, indent=1) + "\n")

    @contextlib.contextmanager
    def _signals_handled(self):
        """SIGTERM and SIGINT stop the job after the current window; a second one at once."""

        def on_signal(signum, frame):
            if self.received is not None:
                raise KeyboardInterrupt
            self.received = signum
            log.warning("%s received: stopping after this window", signal.Signals(signum).name)

        with stopping_signals(on_signal):
            yield


class _Progress:
    """The job's progress bar, moved by the batches of a window but never beyond the window's lines."""

    def __init__(self, total: int | None, initial: int, shown: bool, label: str | None = None):
        self.bar = tqdm(
            total=total, initial=initial, unit="sent", desc=label, disable=not shown, leave=False, dynamic_ncols=True
        )
        self.left = 0

    def start(self, lines: int) -> Callable[[int], None]:
        self.left = lines
        return self.advance

    def advance(self, n: int) -> None:
        n = min(n, self.left)
        self.left -= n
        self.bar.update(n)

    def end_window(self) -> None:
        self.advance(self.left)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.bar.close()


def _shown(value) -> str:
    return json.dumps(value) if not isinstance(value, str) else value
