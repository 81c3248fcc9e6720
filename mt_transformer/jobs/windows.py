"""A corpus read in windows: each window a list of rows, one field per input stream, read in
lockstep; the first windows small so that a pipe's first lines come out soon. A shard K/N takes
windows K, K+N, K+2N, ... of the same sequence.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from mt_transformer.errors import UserError

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
