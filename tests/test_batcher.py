"""Dynamic batching: concurrent requests share translator calls, and a failure stays with its request."""

import asyncio
import threading

import pytest

from mt_transformer.decoding.stopping import Stopped
from mt_transformer.serve.batcher import Busy, DynamicBatcher


class Recorder:
    """A translator that upper-cases lines, records its calls, and fails on a line "bad"."""

    def __init__(self):
        self.calls = []
        self.threads = set()

    def __call__(self, key, lines, given_up):
        self.calls.append((key, list(lines)))
        self.threads.add(threading.get_ident())
        if "bad" in lines:
            raise ValueError("a line the model cannot take")
        return [f"{key}:{line.upper()}" for line in lines]


def serve(requests, wait=0.05, max_lines=100):
    """Submit (key, lines) requests at once; their results (or exceptions) and the translator's calls."""
    recorder = Recorder()

    async def main():
        batcher = DynamicBatcher(recorder, wait, max_lines)
        batcher.start()
        results = await asyncio.gather(*(batcher.submit(k, lines) for k, lines in requests), return_exceptions=True)
        await batcher.close()
        return results

    return asyncio.run(main()), recorder


def test_concurrent_requests_share_one_call_and_get_their_own_results_in_order():
    results, recorder = serve([("de", ["a", "b"]), ("de", ["c"]), ("de", ["d", "e", "f"])])
    assert results == [["de:A", "de:B"], ["de:C"], ["de:D", "de:E", "de:F"]]
    assert recorder.calls == [("de", ["a", "b", "c", "d", "e", "f"])]
    assert threading.get_ident() not in recorder.threads  # the event loop never translates


def test_calls_take_one_key_and_at_most_max_lines():
    results, recorder = serve([("de", ["a"]), ("en", ["b"]), ("de", ["c", "d"]), ("de", ["e", "f"])], max_lines=3)
    assert results == [["de:A"], ["en:B"], ["de:C", "de:D"], ["de:E", "de:F"]]
    assert sorted(recorder.calls) == [("de", ["a", "c", "d"]), ("de", ["e", "f"]), ("en", ["b"])]


def test_a_failing_request_fails_alone():
    results, recorder = serve([("de", ["a"]), ("de", ["x", "bad"]), ("de", ["c"])])
    assert results[0] == ["de:A"] and results[2] == ["de:C"]
    assert isinstance(results[1], ValueError)
    assert recorder.calls[0] == ("de", ["a", "x", "bad", "c"])  # together first, then each alone
    assert sorted(recorder.calls[1:]) == [("de", ["a"]), ("de", ["c"]), ("de", ["x", "bad"])]


def test_requests_apart_in_time_are_not_held_back_for_each_other():
    recorder = Recorder()

    async def main():
        batcher = DynamicBatcher(recorder, wait=0.01, max_lines=100)
        batcher.start()
        first = await batcher.submit("de", ["a"])
        await asyncio.sleep(0.05)
        second = await batcher.submit("de", ["b"])
        await batcher.close()
        return first, second

    assert asyncio.run(main()) == (["de:A"], ["de:B"])
    assert recorder.calls == [("de", ["a"]), ("de", ["b"])]


def test_close_finishes_what_was_submitted():
    recorder = Recorder()

    async def main():
        batcher = DynamicBatcher(recorder, wait=1.0, max_lines=100)
        batcher.start()
        pending = [asyncio.ensure_future(batcher.submit("de", [str(i)])) for i in range(5)]
        await asyncio.sleep(0)  # every request queued before the close
        await asyncio.wait_for(batcher.close(), timeout=5)
        return [p.result() for p in pending]

    assert asyncio.run(main()) == [[f"de:{i}"] for i in range(5)]
    assert recorder.calls and sum(len(lines) for _, lines in recorder.calls) == 5


@pytest.mark.parametrize("wait", [0.0, 0.02])
def test_a_request_larger_than_max_lines_is_a_call_of_its_own(wait):
    results, recorder = serve([("de", [str(i) for i in range(7)])], wait=wait, max_lines=3)
    assert results == [[f"de:{i}" for i in range(7)]]
    assert recorder.calls == [("de", [str(i) for i in range(7)])]


def test_requests_given_up_on_are_dropped_or_stop_their_call_and_a_full_queue_refuses():
    calls, stopped = [], threading.Event()

    def translate(key, lines, given_up):  # runs until its requests are given up on
        calls.append(list(lines))
        for _ in range(500 if "long" in lines else 0):
            if given_up():
                stopped.set()
                raise Stopped()
            threading.Event().wait(0.01)
        return [line.upper() for line in lines]

    async def main():
        batcher = DynamicBatcher(translate, wait=0.0, max_lines=100, max_pending=2)
        batcher.start()
        running = asyncio.ensure_future(batcher.submit("de", ["long"]))
        await asyncio.sleep(0.05)  # in its call
        queued = asyncio.ensure_future(batcher.submit("de", ["queued"]))
        await asyncio.sleep(0.01)
        with pytest.raises(Busy):  # two pending already
            await batcher.submit("de", ["one more"])
        queued.cancel()  # its client left while it waited: it never reaches the translator
        running.cancel()  # its client left during the call: the call stops
        await asyncio.sleep(0.2)
        assert stopped.is_set() and batcher.pending == 0
        after = await asyncio.wait_for(batcher.submit("de", ["after"]), 1.0)
        await batcher.close()
        return after

    assert asyncio.run(main()) == ["AFTER"]
    assert calls[0] == ["long"] and ["queued"] not in calls
