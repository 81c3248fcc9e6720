"""Text as every command sees it: one normalization for training and translation, the lines of
a text file, and where a file stops being UTF-8. Kept apart from corpus.py and the scores so that
translating imports neither `datasets` nor sacreBLEU."""

from __future__ import annotations

import gzip
import sys
import unicodedata
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from mt_transformer.errors import UserError

# what ends a line in some programs but not here, where a line ends at "\n": white space inside one
LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})


def normalize(line: str) -> str:
    """Strip surrounding whitespace and a byte-order mark, make the line breaks a line may hold
    spaces, and apply Unicode NFC, the same for training and translation."""
    return unicodedata.normalize("NFC", line.strip().lstrip("\ufeff").strip().translate(LINE_BREAKS))


def in_capitals(text: str) -> bool:
    """Written in capitals throughout (a heading, a shout): two cased letters or more, none lower-case."""
    cased = [c for c in text if c.isupper() or c.islower()]
    return len(cased) >= 2 and not any(c.islower() for c in cased)


def with_case_of(source: str, translation: str) -> str:
    """The translation in capitals where the source is: a model that reads capitals but writes in
    its usual case (data.augment.case_target false) answers a heading with a heading."""
    return translation.upper() if in_capitals(source) else translation


def open_binary(path: str) -> BinaryIO:
    """A file to read bytes from; a name ending in .gz is decompressed."""
    try:
        return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise UserError(f"{path}: a directory, not a text file") from None


def _raw_lines(path: str) -> Iterator[bytes]:
    if path != "-":
        with open_binary(path) as f:
            yield from f
    elif hasattr(sys.stdin, "buffer"):
        yield from sys.stdin.buffer
    else:  # a text stream put in place of stdin
        for line in sys.stdin:
            yield line.encode("utf-8")


def stream_lines(path: str, replace_invalid: bool = False) -> Iterator[str]:
    """The lines of a UTF-8 file (`-`: standard input; .gz: decompressed) without their line
    endings, read as they are needed. A byte-order mark at the start is dropped. A line that is
    not valid UTF-8 is a one-line error, or with `replace_invalid` read with U+FFFD for each
    invalid byte (what data.clean drops, counted)."""
    try:
        for number, raw in enumerate(_raw_lines(path), start=1):
            try:
                line = raw.decode("utf-8", errors="replace" if replace_invalid else "strict")
            except UnicodeDecodeError:
                raise UserError(f"{path}: line {number} is not valid UTF-8") from None
            if number == 1:
                line = line.removeprefix("\ufeff")
            yield line.removesuffix("\n").removesuffix("\r")
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise UserError(f"{path}: not a complete gzip file ({error})") from None


def count_lines(path: str) -> int | None:
    """How many lines stream_lines will give, counted in large blocks (None for standard input)."""
    if path == "-":
        return None
    count, last = 0, b"\n"
    try:
        with open_binary(path) as f:
            while block := f.read(1 << 22):
                count += block.count(b"\n")
                last = block[-1:]
    except (gzip.BadGzipFile, EOFError, zlib.error) as error:
        raise UserError(f"{path}: not a complete gzip file ({error})") from None
    return count + (last != b"\n")


def read_lines(path: str) -> list[str]:
    """Lines of a UTF-8 file without their line endings (a final newline adds no line)."""
    return list(stream_lines(path))
