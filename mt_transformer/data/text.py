"""Text as every command sees it: one normalization for training and translation, and where a
file stops being UTF-8. Kept apart from corpus.py so that translating does not import `datasets`."""

from __future__ import annotations

import unicodedata


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
