"""Dynamic batching for a translation server: the lines of concurrent requests, gathered for a
few milliseconds, go to the translator in one call, so many small requests cost about what one
batch of their lines costs.

Requests with the same options (target language, beam, ...: their `key`) share a call. Calls run
one at a time in one worker thread (the model already uses every core) while the event loop keeps
accepting requests. A call that fails is retried request by request, so a failure (a line the
model cannot take, memory) fails only the request it belongs to. A request given up on (its
client left, its time ran out) is dropped from the queue, and a call whose every request was
given up on stops at its next decoder step (decoding/stopping.py). At most `max_pending`
requests wait or run at once: one more is refused with Busy.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mt_transformer.decoding.stopping import Stopped

log = logging.getLogger(__name__)


@dataclass
class _Request:
    key: Hashable
    lines: list[str]
    done: asyncio.Future = field(repr=False)


class Busy(Exception):
    """The batcher holds `max_pending` requests already: this one was not taken."""


class DynamicBatcher:
    """`translate(key, lines, given_up) -> one result per line`, called with the gathered lines of
    every waiting request of one key (`given_up()`: whether all of them were given up on); a request
    waits at most `wait` seconds for others to join it, and a call takes at most `max_lines` lines
    (a larger request is a call of its own)."""

    def __init__(
        self,
        translate: Callable[[Hashable, list[str], Callable[[], bool]], list],
        wait: float,
        max_lines: int,
        max_pending: int = 256,
    ):
        self.translate, self.wait, self.max_lines, self.max_pending = translate, wait, max_lines, max_pending
        self.pending = 0  # requests submitted and not yet answered or given up on
        self.calling = False  # whether the worker thread is in a call
        self._queue: asyncio.Queue[_Request | None] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        # One thread for every call, and for loading the models (`run_alone`): torch's CPU kernels
        # keep a thread pool per calling thread, and a second caller's pool competes with the
        # first for the cores (single-line calls ran at well under half the rate).
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="translate")

    def start(self) -> None:
        self._worker = asyncio.get_running_loop().create_task(self._run())

    async def run_alone(self, function: Callable, *args):
        """`function(*args)` on the thread the calls run on (loading the models)."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, function, *args)

    async def submit(self, key: Hashable, lines: list[str]) -> list:
        """The results of `lines`, in order; the exception of their call if it failed. Cancelled (the
        caller gave up), the request leaves the queue, or stops its call if it was alone there."""
        if self.pending >= self.max_pending:
            raise Busy(f"{self.pending} requests are waiting or running")
        self.pending += 1
        try:
            request = _Request(key, lines, asyncio.get_running_loop().create_future())
            await self._queue.put(request)
            return await request.done
        finally:
            self.pending -= 1

    async def close(self, grace: float | None = None) -> None:
        """Finish every request already submitted, then stop; a call still running `grace` seconds
        after the queue is empty is left to the worker thread (`calling` stays true)."""
        await self._queue.put(None)
        if self._worker is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._worker), grace)
            except (asyncio.TimeoutError, TimeoutError):
                log.warning("a translator call still runs %g s after the last request; not waited for", grace)
        self._thread.shutdown(wait=not self.calling, cancel_futures=True)

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            if first is None:
                return
            if first.done.cancelled():  # given up on while it waited
                continue
            group, stopping = await self._gather(first)
            await self._serve(group)
            if stopping:
                return

    async def _gather(self, first: _Request) -> tuple[list[_Request], bool]:
        """`first` and the requests that arrive within `wait` seconds of it, up to `max_lines` lines."""
        group, lines = [first], len(first.lines)
        deadline = time.monotonic() + self.wait
        while lines < self.max_lines:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                request = await asyncio.wait_for(self._queue.get(), remaining)
            except asyncio.TimeoutError:
                break
            if request is None:
                return group, True
            if request.done.cancelled():
                continue
            group.append(request)
            lines += len(request.lines)
        return group, False

    async def _serve(self, group: list[_Request]) -> None:
        """One call per key and per `max_lines` lines, each request's results handed back."""
        calls: list[list[_Request]] = []
        by_key: dict[Hashable, list[_Request]] = {}
        for request in group:
            by_key.setdefault(request.key, []).append(request)
        for requests in by_key.values():
            call, size = [], 0
            for request in requests:
                if call and size + len(request.lines) > self.max_lines:
                    calls.append(call)
                    call, size = [], 0
                call.append(request)
                size += len(request.lines)
            calls.append(call)
        for call in calls:
            live = [request for request in call if not request.done.cancelled()]
            if live:
                await self._call(live)

    async def _call(self, requests: list[_Request]) -> None:
        lines = [line for request in requests for line in request.lines]

        def given_up() -> bool:  # read on the worker thread: a future's state, not its result
            return all(request.done.cancelled() for request in requests)

        self.calling = True
        try:
            results = await self.run_alone(self.translate, requests[0].key, lines, given_up)
        except Stopped:  # every request of the call was given up on: nobody waits for an answer
            return
        except Exception as error:  # any failure belongs to the requests, not to the server
            if len(requests) == 1:
                _settle(requests[0], error=error)
                return
            log.warning("a call of %d requests failed (%s): each is tried alone", len(requests), error)
            for request in requests:
                if not request.done.cancelled():
                    await self._call([request])
            return
        finally:
            self.calling = False
        start = 0
        for request in requests:
            _settle(request, results[start : start + len(request.lines)])
            start += len(request.lines)


def _settle(request: _Request, results: list | None = None, error: BaseException | None = None) -> None:
    if request.done.cancelled():  # the client went away
        return
    if error is not None:
        request.done.set_exception(error)
    else:
        request.done.set_result(results)
