"""Requests a minute per client, as LibreTranslate's --req-limit: a client is its API key where it
gives one, else its address. A sliding window of the last minute's request times per client;
clients idle for a minute are forgotten, so the table stays as small as the last minute's
clients."""

from __future__ import annotations

import collections
import math
import time

from mt_transformer.serve.api import ApiError

WINDOW = 60.0  # seconds


class RequestQuota:
    """`take(client)`: counts one request of `client`, or raises ApiError 429 past `per_minute`."""

    def __init__(self, per_minute: int, clock=time.monotonic):
        self.per_minute, self.clock = per_minute, clock
        self._times: dict[str, collections.deque] = {}
        self._next_sweep = 0.0

    def take(self, client: str) -> None:
        now = self.clock()
        if now >= self._next_sweep:  # forget clients with no request in the window
            self._times = {c: t for c, t in self._times.items() if t and t[-1] > now - WINDOW}
            self._next_sweep = now + WINDOW
        times = self._times.setdefault(client, collections.deque())
        while times and times[0] <= now - WINDOW:
            times.popleft()
        if len(times) >= self.per_minute:
            wait = math.ceil(times[0] + WINDOW - now)
            raise ApiError(
                429,
                f"Too many requests: {self.per_minute} a minute from one client (try again in {wait} s)",
                {"Retry-After": str(wait)},
            )
        times.append(now)
