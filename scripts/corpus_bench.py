"""mt-translate on corpora: peak memory against the input's length, throughput against
translating the whole file in one call, the first line through a pipe, and a killed run
continued. Every run is a process of its own, timed from its start to its exit.

    python3 scripts/corpus_bench.py --checkpoint runs/demo --source data/demo/train.en

The corpus is made from --source: --lines lines drawn from it at random (seeded), written to
--workdir. Measured, for each --beam:
  - peak RSS and sentences/s of mt-translate on --small lines and on all --lines;
  - streamed against whole-file on --compare lines, alternating for --rounds rounds: whole-file
    reads every line, translates them in one call (sorted by length over the whole file, as
    mt-translate did before it streamed) and writes them at the end;
  - the time until the first line comes out of `mt-translate < FILE | ...`;
  - a run SIGKILLed at 60% of its windows, then run again: the second run's time against a
    fresh run's, and whether the output is byte-identical.
--buffer-sizes times the streamed run at several --buffer-lines on --compare lines instead.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

from measure import machine, run_process

TRANSLATE = "import sys; from mt_transformer.cli import translate_main; sys.argv[0] = 'mt-translate'; translate_main()"
WHOLE_FILE = """
import sys
from mt_transformer.data.text import read_lines
from mt_transformer.decoding.engines import open_translator
from mt_transformer.files import write_text
checkpoint, source, output, beam = sys.argv[1:5]
translator = open_translator(checkpoint, "torch", "cpu", beam_size=int(beam))
write_text(output, "".join(r[0].text + "\\n" for r in translator(read_lines(source))))
"""


def make_corpus(source: str, lines: int, path: str, seed: int = 1) -> str:
    if not os.path.exists(path):
        pool = open(source, encoding="utf-8").read().splitlines()
        draw = random.Random(seed)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(pool[draw.randrange(len(pool))] + "\n" for _ in range(lines))
    return path


def timed(command: list[str], stdin=None) -> dict:
    """Run a process to its end: seconds and peak RSS (MB)."""
    seconds, peak_mb = run_process(command, stdin)
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(peak_mb)}


def translate_command(args, source: str, output: str, beam: int, *extra: str) -> list[str]:
    options = ["--checkpoint", args.checkpoint, "-i", source, "-o", output, "--beam", str(beam), "--device", "cpu"]
    return [sys.executable, "-c", TRANSLATE, *options, *extra]


def first_line_seconds(args, source: str, beam: int) -> float:
    """From the start of `mt-translate < FILE` until its first output line arrives through the pipe."""
    command = [sys.executable, "-c", TRANSLATE, "--checkpoint", args.checkpoint, "--beam", str(beam), "--device", "cpu"]
    start = time.perf_counter()
    with open(source, "rb") as stdin:
        process = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        process.stdout.readline()
        seconds = time.perf_counter() - start
        process.stdout.close()  # the reader goes away, as `| head -1` does
        process.wait()
    return round(seconds, 2)


def killed_and_continued(args, source: str, beam: int, fresh: dict, fresh_out: str) -> dict:
    """A run SIGKILLed once 60% of its lines are recorded, then the same command: times and identity
    against `fresh`, the same command run to its end into `fresh_out`."""
    out = os.path.join(args.workdir, "killed.de")
    for path in (out, out + ".partial", out + ".progress.json"):
        if os.path.exists(path):
            os.remove(path)
    total = sum(1 for _ in open(source, "rb"))
    start = time.perf_counter()
    process = subprocess.Popen(translate_command(args, source, out, beam), stderr=subprocess.DEVNULL)
    while process.poll() is None and _lines_recorded(out + ".progress.json") < 0.6 * total:
        time.sleep(0.05)
    killed = process.poll() is None  # a corpus of one window can end before 60% is recorded
    process.send_signal(signal.SIGKILL)
    process.wait()
    before_kill = time.perf_counter() - start
    again = timed(translate_command(args, source, out, beam))
    identical = open(out, "rb").read() == open(fresh_out, "rb").read()
    return {"fresh_s": fresh["seconds"], "killed": killed, "killed_after_s": round(before_kill, 2),
            "rerun_s": again["seconds"], "identical": identical}  # fmt: skip


def _lines_recorded(path: str) -> int:
    try:
        return sum(w["lines"] for w in json.load(open(path))["windows"])
    except (FileNotFoundError, json.JSONDecodeError):
        return 0


def measure_beam(args, beam: int) -> dict:
    work = args.workdir
    small = make_corpus(args.source, args.small, os.path.join(work, f"{args.small}.en"))
    large = make_corpus(args.source, args.lines, os.path.join(work, f"{args.lines}.en"))
    middle = make_corpus(args.source, args.compare, os.path.join(work, f"{args.compare}.en"))
    result = {"beam": beam}
    for name, path, lines in (("small", small, args.small), ("large", large, args.lines)):
        run = timed(translate_command(args, path, os.path.join(work, "out.de"), beam))
        result[name] = {"lines": lines, **run, "sent_per_s": round(lines / run["seconds"], 1)}
    result["rss_large_over_small"] = round(result["large"]["peak_rss_mb"] / result["small"]["peak_rss_mb"], 3)
    rounds = {"streamed": [], "whole_file": []}
    streamed = os.path.join(work, "s.de")
    for _ in range(args.rounds):  # alternating, so that a host's drift falls on both
        rounds["streamed"].append(timed(translate_command(args, middle, streamed, beam)))
        whole = [sys.executable, "-c", WHOLE_FILE, args.checkpoint, middle, os.path.join(work, "w.de"), str(beam)]
        rounds["whole_file"].append(timed(whole))
    for name, runs in rounds.items():
        best = min(r["seconds"] for r in runs)
        result[name] = {"lines": args.compare, "best_s": best, "sent_per_s": round(args.compare / best, 1),
                        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs)}  # fmt: skip
    result["streamed_over_whole_file"] = round(result["whole_file"]["best_s"] / result["streamed"]["best_s"], 3)
    result["identical_to_whole_file"] = open(streamed, "rb").read() == open(os.path.join(work, "w.de"), "rb").read()
    result["first_line_s"] = first_line_seconds(args, middle, beam)
    # the last streamed round is the uninterrupted run the killed one is measured against
    result["killed_at_60_percent"] = killed_and_continued(args, middle, beam, rounds["streamed"][-1], streamed)
    return result


def buffer_sizes(args, beam: int) -> list[dict]:
    middle = make_corpus(args.source, args.compare, os.path.join(args.workdir, f"{args.compare}.en"))
    found = {size: [] for size in args.buffer_sizes}
    for _ in range(args.rounds):
        for size in args.buffer_sizes:
            out = os.path.join(args.workdir, "b.de")
            found[size].append(timed(translate_command(args, middle, out, beam, "--buffer-lines", str(size))))
    return [{"buffer_lines": size, "best_s": min(r["seconds"] for r in runs),
             "peak_rss_mb": max(r["peak_rss_mb"] for r in runs)} for size, runs in found.items()]  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--source", required=True, help="lines to draw the corpus from")
    parser.add_argument("--workdir", default="/tmp/corpus_bench")
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--compare", type=int, default=120_000)
    parser.add_argument("--beam", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--buffer-sizes", type=int, nargs="+")
    args = parser.parse_args(argv)
    os.makedirs(args.workdir, exist_ok=True)
    print(json.dumps({"host": machine()}), flush=True)
    for beam in args.beam:
        if args.buffer_sizes:
            print(json.dumps({"beam": beam, "buffer_sizes": buffer_sizes(args, beam)}), flush=True)
        else:
            print(json.dumps(measure_beam(args, beam)), flush=True)


if __name__ == "__main__":
    main()
