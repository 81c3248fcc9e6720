"""SIGTERM (what clusters send before preemption) and SIGINT (Ctrl-C) handled for a while, so
that long work stops at a boundary where what is done can be kept."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable


@contextlib.contextmanager
def stopping_signals(handler: Callable[[int, object], None]):
    """`handler` receives SIGTERM and SIGINT while inside; the previous handlers come back after.
    Outside the main thread signals cannot be handled, and are left alone."""
    handled = (signal.SIGTERM, signal.SIGINT)
    try:
        previous = {s: signal.signal(s, handler) for s in handled}
    except ValueError:
        previous = {}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
