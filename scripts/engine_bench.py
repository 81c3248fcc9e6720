#!/usr/bin/env python3
"""The default engine (mt.load of a checkpoint: --engine auto), CTranslate2 given an export,
and our engine alone, each in a process of its own, on one checkpoint.

Two OpenMP pools in one process slow each other (CTranslate2's and torch's), so every engine
runs in a process of its own, loaded once; the engines take turns at every measurement (in
reversed order every other round), so that the host's drift reaches them alike, and the best
round of each counts. Per precision (fp32 against CTranslate2's float32, int8 against its int8): one sentence
at a time (median ms), calls of 32 lines and all lines in one call (sentences/s), the share of
lines equal to CTranslate2's, and with --ref BLEU. CTranslate2 runs as N workers of one thread
for each N of --threads (as mt-translate runs it) and as one worker on the most threads (as it
is usually run); the ratios are against the fastest of these per column.

    python3 scripts/engine_bench.py --checkpoint runs/demo --src data/demo/test.en --ref data/demo/test.de
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from measure import calls_per_s, machine, machine_line, markdown_table, timed, write_json

PAIRS = {"fp32": "float32", "int8": "int8"}  # our --precision: CTranslate2's compute type
CALL = 32  # lines per call in the middle column


def single_ms(translate, lines: list[str]) -> float:
    """Median milliseconds of one line per call."""
    return 1000 * statistics.median(timed(translate, [line])[1] for line in lines)


def worker(spec: dict) -> None:
    """One engine, loaded once in this process, measuring what the parent asks on stdin (a JSON
    line each: single, calls or whole) and answering on stdout. spec names the model, how mt.load
    opens it, the lines and where to write the whole call's translations."""
    import torch

    import mt_transformer as mt
    from mt_transformer.data.text import read_lines
    from mt_transformer.decoding.engines import describe

    torch.set_num_threads(spec["torch_threads"])
    lines = read_lines(spec["src"])[: spec["lines"]]
    model = mt.load(spec["path"], device="cpu", beam_size=spec["beam"], **spec["load"])
    engine = describe(model.translator)
    translate = model.translate
    translate(lines[:8])  # warm-up
    print(json.dumps({"engine": engine}), flush=True)
    for task in map(json.loads, sys.stdin):
        if task == "single":
            value = single_ms(translate, lines[: spec["single"]])
        elif task == "calls":
            value = calls_per_s(translate, lines[: max(4 * CALL, min(len(lines), 256))], CALL)
        else:
            texts, seconds = timed(translate, lines)
            value = len(lines) / seconds
            with open(spec["out"], "w", encoding="utf-8") as f:
                f.write("".join(t + "\n" for t in texts))
        print(json.dumps(value), flush=True)


class Worker:
    """A worker process of one engine spec: started once, asked for one measurement at a time."""

    def __init__(self, spec: dict):
        self.spec = spec
        command = [sys.executable, __file__, "--worker", json.dumps(spec)]
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.engine = self._answer()["engine"]

    def measure(self, task: str) -> float:
        self.process.stdin.write(json.dumps(task) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def _answer(self):
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"engine_bench worker failed: {self.spec['name']} (its stderr is above)")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


TASKS = {"single": "single_ms", "calls": f"calls_{CALL}", "whole": "whole"}


def measure_all(specs: list[dict], rounds: int, tasks: dict[str, str] = TASKS) -> dict[str, dict]:
    """Each measurement of `tasks` of each engine `rounds` times, the engines taking turns at
    every measurement (in reversed order every other round), all of them loaded in their
    processes meanwhile: the host's drift reaches every engine alike. The best of the rounds counts."""
    workers = [Worker(spec) for spec in specs]
    try:
        found = {w.spec["name"]: {column: [] for column in tasks.values()} for w in workers}
        for r in range(rounds):
            for task, column in tasks.items():
                for w in workers if r % 2 == 0 else workers[::-1]:
                    found[w.spec["name"]][column].append(w.measure(task))
    finally:
        for w in workers:
            w.close()
    rows = {}
    for w in workers:
        values = found[w.spec["name"]]
        rows[w.spec["name"]] = {c: (min if c == "single_ms" else max)(v) for c, v in values.items()}
        rows[w.spec["name"]].update(engine=w.engine, rounds=values)
    return rows


def paired(default: dict, reference: dict) -> list[float]:
    """Per column, the median over rounds of the default's speed over the reference's in the same
    round (measured one after the other, so that the host's drift divides out)."""
    found = []
    for column in TASKS.values():
        ratios = [
            (b / a if column == "single_ms" else a / b)
            for a, b in zip(default["rounds"][column], reference["rounds"][column])
        ]
        found.append(statistics.median(ratios))
    return found


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint")
    parser.add_argument("--src", help="source lines (the first --lines are translated)")
    parser.add_argument("--ref", help="references for BLEU")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--single", type=int, default=100, help="lines translated one at a time")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="CTranslate2's thread counts")
    parser.add_argument("--no-ours", action="store_true", help="leave out our engine alone (--engine torch)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def engines(args, exported: str, precision: str, workdir: str) -> list[dict]:
    """The processes to time for one precision."""
    torch_threads = max(args.threads)
    common = dict(src=args.src, lines=args.lines, single=args.single, beam=args.beam, torch_threads=torch_threads)
    specs = [dict(name="default", path=args.checkpoint, load=dict(precision=precision), **common)]
    for threads in args.threads:
        load = dict(engine="ctranslate2", compute_type=PAIRS[precision], threads=threads)
        specs.append(dict(name=f"ct2 {threads}", path=exported, load=load, **common))
    if max(args.threads) > 1:  # and on intra-op threads, CTranslate2's usual layout (--worker-threads)
        most = max(args.threads)
        load = dict(engine="ctranslate2", compute_type=PAIRS[precision], threads=most, worker_threads=most)
        specs.append(dict(name="ct2 intra", path=exported, load=load, **common))
    if not args.no_ours and precision != "int8":  # ours computes int8 calls in fp32
        specs.append(dict(name="ours", path=args.checkpoint, load=dict(engine="torch", precision=precision), **common))
    for spec in specs:
        spec["out"] = os.path.join(workdir, f"{spec['name']} {precision}.txt".replace(" ", "_"))
    return specs


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        return worker(json.loads(args.worker))
    if not (args.checkpoint and args.src):
        raise SystemExit("engine_bench.py: --checkpoint and --src are required")
    import torch

    from mt_transformer import checkpoint
    from mt_transformer.data.text import read_lines
    from mt_transformer.decoding import ctranslate2_export
    from mt_transformer.decoding.ctranslate2_cache import cached_conversion
    from mt_transformer.evaluation.scores import score

    refs = read_lines(args.ref)[: args.lines] if args.ref else None
    results = {**machine(), "checkpoint": args.checkpoint, "beam": args.beam}
    print(f"{machine_line()}; beam {args.beam}, {args.lines} lines, each engine in its process")
    cached_conversion(args.checkpoint)  # made once, before the default path is timed
    with tempfile.TemporaryDirectory() as workdir:
        exported = os.path.join(workdir, "ct2")
        ctranslate2_export.export(checkpoint.load(args.checkpoint, torch.device("cpu")), exported)
        for precision in args.precisions:
            specs = engines(args, exported, precision, workdir)
            rows = measure_all(specs, args.rounds)
            texts = {spec["name"]: read_lines(spec["out"]) for spec in specs}
            reference = texts[f"ct2 {args.threads[0]}"]
            for spec in specs:
                row = rows[spec["name"]]
                row["equal_to_ct2"] = sum(a == b for a, b in zip(texts[spec["name"]], reference)) / len(reference)
                if refs:
                    row["bleu"] = score(texts[spec["name"]], refs, ("bleu",))["bleu"]
                results[f"{spec['name']} {precision}"] = row
    print(table(results, args))
    if max(args.threads) > 1:
        found = layout(results, args)
        print("faster: " + ", ".join(f"{kind} --worker-threads {n}" for kind, n in found.items()))
    if args.json:
        write_json(args.json, results)


def layout(results: dict, args) -> dict[str, int]:
    """Per CTranslate2 compute type, the threads of each worker that measured faster: the most
    threads in one worker, or one thread in each of that many workers, by the geometric mean of
    the three columns' speed ratios."""
    most, found = max(args.threads), {}
    for precision in args.precisions:
        workers, intra = results[f"ct2 {most} {precision}"], results[f"ct2 intra {precision}"]
        ratio = workers["single_ms"] / intra["single_ms"] * intra[f"calls_{CALL}"] / workers[f"calls_{CALL}"]
        ratio *= intra["whole"] / workers["whole"]
        found[PAIRS[precision]] = most if ratio > 1 else 1
    return found


def table(results: dict, args) -> str:
    columns = ("single_ms", f"calls_{CALL}", "whole")
    header = ["engine", "1 line, ms", f"calls of {CALL}, sent/s", "all in one call, sent/s"]
    header += ["equal to CTranslate2", "BLEU"]
    rows = []
    for precision in args.precisions:
        layouts = [f"ct2 {t}" for t in args.threads] + (["ct2 intra"] if max(args.threads) > 1 else [])
        ct2 = [results[f"{name} {precision}"] for name in layouts]
        fastest = {c: (min if c == "single_ms" else max)(r[c] for r in ct2) for c in columns}
        names = ["default"] + layouts + ([] if args.no_ours or precision == "int8" else ["ours"])
        for name in names:
            r = results[f"{name} {precision}"]
            labels = {"default": f"default, {precision}", "ours": f"ours (--engine torch), {precision}"}
            intra = f"one worker of {max(args.threads)} threads"
            workers = f"{name.split()[-1]} worker(s) of 1 thread"
            label = labels.get(name) or f"CTranslate2 {PAIRS[precision]}, {intra if 'intra' in name else workers}"
            bleu = f"{r['bleu']:.2f}" if "bleu" in r else ""
            rows.append([label, f"{r['single_ms']:.1f}", f"{r[columns[1]]:.0f}", f"{r['whole']:.0f}",
                         f"{r['equal_to_ct2']:.1%}", bleu])  # fmt: skip
            if name in ("default", "ours"):
                ratios = [fastest["single_ms"] / r["single_ms"]] + [r[c] / fastest[c] for c in columns[1:]]
                rows.append([f"{name} / fastest CTranslate2", *(f"{x:.2f}x" for x in ratios), "", ""])
            if name == "default":
                same = results[f"ct2 {max(args.threads)} {precision}"]  # the layout the default runs
                label = f"default / CTranslate2 {max(args.threads)} workers, paired rounds (median)"
                rows.append([label, *(f"{x:.2f}x" for x in paired(r, same)), "", ""])
    engines = sorted({f"{k}: {v['engine']}" for k, v in results.items() if isinstance(v, dict) and "engine" in v})
    return "\n".join([markdown_table(header, rows), "", *engines])


if __name__ == "__main__":
    main()
