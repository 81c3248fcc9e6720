"""Text as every command sees it: one normalization for training and translation, the lines of
a text file, and where a file stops being UTF-8. Kept apart from corpus.py and the scores so that
translating imports neither `datasets` nor sacreBLEU."""

from __future__ import annotations

import unicodedata

from mt_transformer.errors import UserError


def normalize(line: str) -> str:
    """Strip surrounding whitespace and a byte-order mark, and apply Unicode NFC, the same for
    training and translation."""
    return unicodedata.normalize("NFC", line.strip().lstrip("\ufeff").strip())


def invalid_utf8_line(path: str) -> int | None:
    """The 1-based number of the first line that is not valid UTF-8, or None."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return number
    return None


def read_lines(path: str) -> list[str]:
    """Lines of a UTF-8 file without their line endings (a final newline adds no line)."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: line {invalid_utf8_line(path)} is not valid UTF-8") from None
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]
