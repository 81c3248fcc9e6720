"""mt-serve under load, on 127.0.0.1: 1, 8 and 32 concurrent clients each sending requests of 1 or
16 lines, one after another, to a real mt-serve process; requests/s, sentences/s, p50/p99
latency and the server's peak memory, against an offline translation of the same lines with
the same model and settings (what mt-translate does, without its start-up), and against the
translator alone on calls of as many lines as the clients keep in flight (clients x lines per
request, up to the server's --batch-lines): the most a server could reach, whatever its own costs.

    python3 scripts/serve_bench.py --checkpoint runs/demo --src test.en --compare-unbatched

Every run is bounded: --max-lines distinct lines, sent in at least --rounds requests per client
(the lines again where they run out) for at most --seconds seconds per client count and
request size. --compare-unbatched runs everything again with a server that translates each
request alone (--batch-lines 1), to show what dynamic batching buys.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from measure import calls_per_s, machine, machine_line, markdown_table, write_json
from mt_transformer.data.text import read_lines
from mt_transformer.decoding.engines import open_translator
from mt_transformer.serve.app import ServerSettings
from serve_process import ServerProcess, get


async def request(reader, writer, host: str, body: bytes, path: str = "/translate") -> tuple[int, bytes]:
    """One JSON POST on a kept-alive connection; (status, body)."""
    writer.write(
        b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + host.encode() + b"\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def load(port: int, requests: list[list[str]], clients: int, pair: tuple[str, str], seconds: float) -> dict:
    """`clients` connections send the requests in turn until none are left or `seconds` pass."""
    queue = list(reversed(requests))
    latencies, failures, lines_done = [], 0, 0
    deadline = time.monotonic() + seconds

    async def client():
        nonlocal failures, lines_done
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while queue and time.monotonic() < deadline:
                lines = queue.pop()
                body = json.dumps({"q": lines, "source": pair[0], "target": pair[1]}).encode()
                began = time.perf_counter()
                status, answer = await request(reader, writer, f"127.0.0.1:{port}", body)
                latencies.append(time.perf_counter() - began)
                if status != 200 or len(json.loads(answer)["translatedText"]) != len(lines):
                    failures += 1
                else:
                    lines_done += len(lines)
        finally:
            writer.close()

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - began
    latencies.sort()
    return {
        "requests": len(latencies),
        "failures": failures,
        "requests_per_s": len(latencies) / elapsed,
        "sentences_per_s": lines_done / elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2],
        "p99_ms": 1000 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
    }


def call_size(clients: int, lines_per_request: int, batching: bool = True) -> int:
    """The lines of a call when every client's request is in it: the lines in flight, up to the
    server's --batch-lines; without batching, one request's lines."""
    return min(clients * lines_per_request, ServerSettings.batch_lines) if batching else lines_per_request


def engine_speeds(
    checkpoint: str, engine: str, lines: list[str], call_sizes: set[int], rounds: int = 3, precision: str | None = None
) -> tuple[float, dict[int, float]]:
    """The offline speed (all lines in one call, as mt-translate runs it) and, for each call size,
    the speed of the translator alone on calls of that many lines: what a server whose clients
    keep that many lines in flight could reach with no cost of its own. Each is the best of
    `rounds` rounds that measure every size in turn, so a slow spell of the machine weighs on
    all alike. Small calls run over a part of the lines (8 calls, at least 128 lines)."""
    translator = open_translator(checkpoint, engine, "cpu", precision=precision)
    translator(lines)  # warm-up
    sizes = [len(lines)] + sorted(n for n in call_sizes if n < len(lines))
    best = dict.fromkeys(sizes, 0.0)
    for _ in range(rounds):
        for n in sizes:
            best[n] = max(best[n], calls_per_s(translator, lines[: max(8 * n, 128)], n))
    offline = best.pop(len(lines))
    return offline, best


def measure(args, lines: list[str], offline: float, bounds: dict[int, float], unbatched: bool) -> list[dict]:
    server_args = ["--checkpoint", args.checkpoint, "--engine", args.engine, "--device", "cpu", "--timeout", "600"]
    if unbatched:
        server_args += ["--batch-lines", "1", "--batch-wait-ms", "0"]
    if args.precision:
        server_args += ["--precision", args.precision]
    rows = []
    with ServerProcess(server_args) as server:
        source = next(entry for entry in get(server.url + "/languages")[1] if entry["targets"])
        pair = (source["code"], source["targets"][0])
        warm = [[line] for line in lines[:32]]
        asyncio.run(load(server.port, warm, 8, pair, 60))
        for size in args.lines_per_request:
            requests = [lines[i : i + size] for i in range(0, len(lines), size)]
            for clients in args.clients:
                # at least --rounds requests per client, so start and end (clients waiting on
                # the last few) weigh little: the lines are sent again where they run out
                rounds = -(-args.rounds * clients // len(requests))
                result = asyncio.run(load(server.port, requests * rounds, clients, pair, args.seconds))
                result.update(
                    clients=clients,
                    lines_per_request=size,
                    batching=not unbatched,
                    vs_offline=result["sentences_per_s"] / offline,
                    engine_alone_vs_offline=bounds.get(call_size(clients, size, not unbatched), offline) / offline,
                    peak_rss_mb=server.peak_rss_mb(),
                )
                rows.append(result)
                print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}))
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="a run directory or checkpoint")
    parser.add_argument("--engine", default="auto", choices=["auto", "torch", "ctranslate2"])
    parser.add_argument("--src", required=True, help="source lines to send (e.g. a test set)")
    parser.add_argument("--precision", help="decode.precision (default: the checkpoint's)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--lines-per-request", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--max-lines", type=int, default=1000, help="lines sent per measurement, at most")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds per measurement, at most")
    parser.add_argument("--rounds", type=int, default=8, help="requests per client per measurement, at least")
    parser.add_argument("--compare-unbatched", action="store_true", help="also a server without batching")
    parser.add_argument("--json", help="write the rows here as well")
    args = parser.parse_args(argv)
    lines = [line for line in read_lines(args.src) if line.strip()][: args.max_lines]
    call_sizes = {
        call_size(clients, size, batching)
        for clients in args.clients
        for size in args.lines_per_request
        for batching in ([True, False] if args.compare_unbatched else [True])
    }
    offline, bounds = engine_speeds(args.checkpoint, args.engine, lines, call_sizes, precision=args.precision)
    print(f"# {machine_line()}")
    print(f"# {args.checkpoint}, engine {args.engine}: {len(lines)} lines of {args.src}")
    print(f"# offline: {offline:.1f} sentences/s")
    for n, speed in bounds.items():
        print(f"# the translator alone on calls of {n} lines: {speed:.1f} sentences/s, {speed / offline:.2f}x offline")
    rows = measure(args, lines, offline, bounds, unbatched=False)
    if args.compare_unbatched:
        rows += measure(args, lines, offline, bounds, unbatched=True)
    header = ["batching", "lines/request", "clients", "req/s", "sent/s", "x offline", "engine alone, x offline"]
    header += ["p50 ms", "p99 ms", "peak RSS MB"]
    cells = [
        [
            "yes" if r["batching"] else "no",
            r["lines_per_request"],
            r["clients"],
            f"{r['requests_per_s']:.1f}",
            f"{r['sentences_per_s']:.1f}",
            f"{r['vs_offline']:.2f}",
            f"{r['engine_alone_vs_offline']:.2f}",
            f"{r['p50_ms']:.0f}",
            f"{r['p99_ms']:.0f}",
            f"{r['peak_rss_mb']:.0f}",
        ]
        for r in rows
    ]
    print("\n" + markdown_table(header, cells))
    if args.json:
        speeds = {"offline_sentences_per_s": offline, "engine_alone_sentences_per_s": bounds}
        write_json(args.json, {**machine(), "checkpoint": args.checkpoint, "engine": args.engine,
                               "precision": args.precision, **speeds, "rows": rows})  # fmt: skip
    return rows


if __name__ == "__main__":
    main()
