"""mt-serve soaked: many clients on 127.0.0.1, each sending in turn a mix of requests to one real
mt-serve process for a bounded time: plain lines, HTML, alternatives (LibreTranslate's
/translate) and attention maps (/v1/translate); with --long html also 100 lines of 833
`<s>a. ` each, past the server's bounds (a 413 that must stall no one), and with --long text
as many bytes of plain text, each line a character past --max-chars (the same 413 without HTML,
to tell the cost of the bytes from that of the HTML). Per kind of request
the p50 and p99 latency, the answers by status code, and the server's resident memory after a
warm-up and at the end.

    python3 scripts/serve_soak.py --checkpoint runs/demo --src data/demo/test.en --clients 32 --seconds 60

Bounded: each client stops after --seconds or --requests requests, whichever comes first; the
server runs with its default limits (docs/serving.md#bounds), so what it refuses shows as 4xx/5xx.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import time

from measure import machine, machine_line, markdown_table, write_json
from mt_transformer.data.text import read_lines
from serve_bench import request
from serve_process import ServerProcess, get

KINDS = ("plain", "html", "alternatives", "attention")
LONG = {  # 500 KB: each HTML line under --max-chars, the whole far past the sentences allowed
    "html": {"q": ["<s>a. " * 833] * 100, "format": "html"},
    "text": {"q": ["a" * 5001] * 100},  # each line past --max-chars 5000
}


def body(kind: str, line: str, pair: tuple[str, str]) -> tuple[str, bytes]:
    """(path, JSON body) of one request of `kind` on `line`."""
    languages = {"source": pair[0], "target": pair[1]}
    if kind == "plain":
        return "/translate", json.dumps({"q": [line], **languages}).encode()
    if kind == "html":
        first, _, rest = line.partition(" ")
        fragment = f"<p><b>{first}</b> {rest} <a href='https://example.org'>{first}</a></p>"
        return "/translate", json.dumps({"q": fragment, "format": "html", **languages}).encode()
    if kind.startswith("long "):
        return "/translate", _long(kind.split()[1], *pair)
    if kind == "alternatives":
        return "/translate", json.dumps({"q": line, "alternatives": 3, **languages}).encode()
    return "/v1/translate", json.dumps({"q": [line], "attention": True, **languages}).encode()


@functools.cache
def _long(kind: str, source: str, target: str) -> bytes:
    """A long body, encoded once: the clients' own work stays that of the other kinds."""
    return json.dumps({**LONG[kind], "source": source, "target": target}).encode()


async def soak(port: int, lines: list[str], clients: int, seconds: float, most: int, pair, kinds=KINDS) -> dict:
    """Every client sends the kinds in turn (each client starting at another) until the time or its count runs out."""
    latencies: dict[str, list[float]] = collections.defaultdict(list)
    statuses: collections.Counter = collections.Counter()
    deadline = time.monotonic() + seconds

    async def client(number: int):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for sent in range(most):
                if time.monotonic() >= deadline:
                    return
                kind = kinds[(number + sent) % len(kinds)]
                path, payload = body(kind, lines[(number * most + sent) % len(lines)], pair)
                began = time.perf_counter()
                status, _ = await request(reader, writer, f"127.0.0.1:{port}", payload, path)
                latencies[kind].append(time.perf_counter() - began)
                statuses[status] += 1
        finally:
            writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    return {"seconds": time.perf_counter() - began, "latencies": latencies, "statuses": dict(statuses)}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a run directory or checkpoint")
    parser.add_argument("--src", required=True, help="source lines to send (e.g. a test set)")
    parser.add_argument("--engine", default="auto", choices=["auto", "torch", "ctranslate2"])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the clients send, at most")
    parser.add_argument("--requests", type=int, default=10_000, help="requests per client, at most")
    parser.add_argument("--long", choices=sorted(LONG), help="add requests of 500 KB of long lines to the mix")
    parser.add_argument("--json", help="write the result here as well")
    args = parser.parse_args(argv)
    lines = [line for line in read_lines(args.src) if line.strip()][:1000]
    with ServerProcess(["--checkpoint", args.checkpoint, "--engine", args.engine, "--device", "cpu"]) as server:
        entry = next(entry for entry in get(server.url + "/languages")[1] if entry["targets"])
        pair = (entry["code"], entry["targets"][0])
        asyncio.run(soak(server.port, lines, len(KINDS), 30.0, 2, pair))  # warm-up: each kind loaded
        start_mb = server.rss_mb()
        kinds = (*KINDS, f"long {args.long}") if args.long else KINDS
        result = asyncio.run(soak(server.port, lines, args.clients, args.seconds, args.requests, pair, kinds))
        end_mb, peak_mb = server.rss_mb(), server.peak_rss_mb()
    kinds = {
        kind: {
            "requests": len(times),
            "p50_ms": 1000 * percentile(times, 0.5),
            "p99_ms": 1000 * percentile(times, 0.99),
        }
        for kind, times in sorted(result["latencies"].items())
    }
    summary = {
        "clients": args.clients,
        "long": args.long,
        "seconds": result["seconds"],
        "statuses": result["statuses"],
        "kinds": kinds,
        "rss_mb": {"start": start_mb, "end": end_mb, "peak": peak_mb},
    }
    print(f"# {machine_line()}")
    mix = f" with long {args.long} requests" if args.long else ""
    print(f"# {args.checkpoint}, engine {args.engine}: {args.clients} clients for {result['seconds']:.0f} s{mix}")
    rows = [[kind, k["requests"], f"{k['p50_ms']:.0f}", f"{k['p99_ms']:.0f}"] for kind, k in kinds.items()]
    print(markdown_table(["kind", "requests", "p50 ms", "p99 ms"], rows))
    print("answers by status:", ", ".join(f"{code}: {n}" for code, n in sorted(result["statuses"].items())))
    print(f"resident memory: {start_mb:.0f} MB after the warm-up, {end_mb:.0f} MB at the end, {peak_mb:.0f} MB at most")
    if args.json:
        write_json(args.json, {**machine(), "checkpoint": args.checkpoint, "engine": args.engine, **summary})
    return summary


if __name__ == "__main__":
    main()
