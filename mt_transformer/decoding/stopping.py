"""Stopping a translation in progress. A caller that may give up on its work (the server, for a
request whose client disconnected or whose time ran out) names a test with `stop_when`; our
searches ask it at every decoder step and the translator between batches (CTranslate2's too),
and a translation asked to stop raises Stopped there. The test belongs to the calling thread."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

_current = threading.local()


class Stopped(Exception):
    """The caller asked the translation to stop; nothing it computed is returned."""


@contextlib.contextmanager
def stop_when(test: Callable[[], bool]):
    """Within the block, translations on this thread stop at their next step once `test()` is true."""
    previous = getattr(_current, "test", None)
    _current.test = test
    try:
        yield
    finally:
        _current.test = previous


def check() -> None:
    """Raise Stopped where the caller asked for it (a cheap call when it did not)."""
    test = getattr(_current, "test", None)
    if test is not None and test():
        raise Stopped("the caller stopped the translation")
