"""SIGTERM (what clusters send before preemption) and SIGINT (Ctrl-C) handled for a while, so
that long work stops at a boundary where what is done can be kept."""

from __future__ import annotations

import contextlib
import os
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


class Terminated(BaseException):
    """SIGTERM where no stretch of work handles it: raised where the command is, so that what it
    holds open is closed and its temporary files are removed on the way out, as after Ctrl-C."""


def terminate_by_exception() -> None:
    """From here on SIGTERM raises Terminated in this process's main thread (a command's entry
    point sets it; `stopping_signals` takes SIGTERM over where work can stop at a boundary). A
    forked worker (a DataLoader's, a pool's) that inherits it still ends at once, as by default."""
    owner = os.getpid()

    def handler(signum, frame) -> None:
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated()

    with contextlib.suppress(ValueError):  # not the main thread: signals cannot be handled there
        signal.signal(signal.SIGTERM, handler)
