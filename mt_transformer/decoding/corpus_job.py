"""Translating (or scoring) a corpus of any length: its lines are read in windows, each window is
processed and written in input order before the next is read, so memory does not grow with the
input and a pipe sees output window by window.

With an output file the windows go to FILE.partial, and FILE.progress.json records after each
one what is done: the settings, each window's digest and the bytes written. Running the same
command again after a crash or a kill continues after the last recorded window and ends with the
same bytes as a run never interrupted; FILE.partial becomes FILE by one rename at the end.
SIGTERM and SIGINT finish the current window first.

`--shard K/N` processes windows K, K+N, K+2N, ... only; the shards' records say which output
lines belong to which window, so that corpus_files.merge_shards puts them back in input order.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from tqdm import tqdm

from mt_transformer.decoding.corpus_files import RECORD_FORMAT, encoded, read_record
from mt_transformer.errors import UserError
from mt_transformer.files import atomic_path, fsync_dir, write_text
from mt_transformer.signals import stopping_signals

log = logging.getLogger(__name__)

FIRST_WINDOW = 256  # lines in the first window; each next one doubles, up to buffer_lines


@dataclass(frozen=True)
class Shard:
    index: int = 0  # K: this process takes windows K, K+N, K+2N, ...
    count: int = 1  # N

    @classmethod
    def parse(cls, text: str) -> Shard:
        """K/N as the user writes it, 0 <= K < N."""
        try:
            index, count = (int(part) for part in text.split("/"))
        except ValueError:
            raise UserError(f"--shard: expected K/N such as 0/4, got {text!r}") from None
        if not 0 <= index < count:
            raise UserError(f"--shard: K/N needs 0 <= K < N, got {text}")
        return cls(index, count)

    def takes(self, window: int) -> bool:
        return window % self.count == self.index

    def path(self, output: str) -> str:
        """The file this shard of `output` is written to: out.de -> out.de.0-of-4 (out.de.0-of-4.gz for out.de.gz)."""
        base, gz = (output[:-3], ".gz") if output.endswith(".gz") else (output, "")
        return f"{base}.{self.index}-of-{self.count}{gz}"


@dataclass
class Window:
    index: int
    first_line: int  # the 0-based input line of its first row
    rows: list[tuple[str, ...]]  # one tuple per input line: a field per input stream

    def digest(self) -> str:
        text = "\n".join("\x1f".join(row) for row in self.rows)
        return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def window_sizes(buffer_lines: int) -> Iterator[int]:
    """Lines per window: FIRST_WINDOW, doubling up to buffer_lines, so that a pipe's first lines come out soon."""
    size = min(FIRST_WINDOW, buffer_lines)
    while True:
        yield size
        size = min(2 * size, buffer_lines)


def read_windows(streams: list[Iterator[str]], names: list[str], buffer_lines: int) -> Iterator[Window]:
    """Windows of rows read from line streams in lockstep. Streams of different lengths are a
    one-line error that names each by names[i] (the first as the reference)."""
    rows = _rows(streams, names)
    first_line = 0
    for index, size in enumerate(window_sizes(buffer_lines)):
        window = list(itertools.islice(rows, size))
        if window:
            yield Window(index, first_line, window)
            first_line += len(window)
        if len(window) < size:
            return


def _rows(streams: list[Iterator[str]], names: list[str]) -> Iterator[tuple[str, ...]]:
    for count in itertools.count():
        row = tuple(next(stream, None) for stream in streams)
        if None in row:
            if any(field is not None for field in row):  # count what is left, to name both lengths
                counts = [count + (field is not None) + sum(1 for _ in s) for field, s in zip(row, streams)]
                i = next(i for i, n in enumerate(counts) if n != counts[0])
                raise UserError(f"{names[i]} has {counts[i]} lines, {names[0]} {counts[0]}")
            return
        yield row


def shard_lines(total: int | None, buffer_lines: int, shard: Shard) -> int | None:
    """How many of `total` input lines the windows of `shard` hold."""
    if total is None:
        return None
    taken, start = 0, 0
    for index, size in enumerate(window_sizes(buffer_lines)):
        if start >= total:
            return taken
        taken += min(size, total - start) if shard.takes(index) else 0
        start += size


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
        return f"{self.output}.progress.json"

    def run(
        self,
        windows: Iterator[Window],
        work: Callable[[Window, Callable[[int], None]], list[str]],
        total: int | None = None,
        progress: bool = True,
    ) -> None:
        """work(window, advance): the window's output lines (each ending in a newline); advance(n)
        moves the progress bar by n of its lines. Nothing is written before the first window is read."""
        windows = iter(windows)
        first = next(windows, None)  # an input that fails at once leaves nothing behind
        record = {"windows": []}
        try:
            record = self._begin()
            lines_done = sum(w["lines"] for w in record["windows"])
            total = shard_lines(total, self.buffer_lines, self.shard)
            with self._signals_handled(), _Progress(total, lines_done, progress) as bar:
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
        self.fresh = True
        with atomic_path(self.partial) as tmp:
            open(tmp, "wb").close()
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

    def __init__(self, total: int | None, initial: int, shown: bool):
        self.bar = tqdm(total=total, initial=initial, unit="sent", disable=not shown, leave=False, dynamic_ncols=True)
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
