#!/usr/bin/env python3
"""The default engine (mt.load of a checkpoint: --engine auto), CTranslate2 given an export,
and our engine alone, each in a process of its own, on one checkpoint.

Two OpenMP pools in one process slow each other (CTranslate2's and torch's), so every engine
runs in a fresh process; the rounds alternate the order of the processes (the best round of each
counts). Per precision (fp32 against CTranslate2's float32, int8 against its int8): one sentence
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
import time

PAIRS = {"fp32": "float32", "int8": "int8"}  # our --precision: CTranslate2's compute type
CALL = 32  # lines per call in the middle column


def single_ms(translate, lines: list[str]) -> float:
    """Median milliseconds of one line per call."""
    times = []
    for line in lines:
        start = time.perf_counter()
        translate([line])
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def calls_per_s(translate, lines: list[str], size: int) -> float:
    """Sentences/s translating `lines` in consecutive calls of `size` lines."""
    start = time.perf_counter()
    for i in range(0, len(lines), size):
        translate(lines[i : i + size])
    return len(lines) / (time.perf_counter() - start)


def worker(spec: dict) -> dict:
    """One engine's measurements, in this process: spec names the model, how mt.load opens it, the
    lines and where to write the whole call's translations."""
    import torch

    import mt_transformer as mt
    from mt_transformer.data.text import read_lines
    from mt_transformer.exchange.engine_choice import describe

    torch.set_num_threads(spec["torch_threads"])
    lines = read_lines(spec["src"])[: spec["lines"]]
    start = time.perf_counter()
    model = mt.load(spec["path"], device="cpu", beam_size=spec["beam"], **spec["load"])
    if spec.get("intra"):  # CTranslate2 as it is usually run: one worker, its threads inside each product
        import ctranslate2

        compute_type = spec["load"]["compute_type"]
        model.translator.search.translator.unload_model()
        model.translator.search.translator = ctranslate2.Translator(
            spec["path"], device="cpu", compute_type=compute_type, intra_threads=spec["intra"]
        )
    row = {"load_s": time.perf_counter() - start, "engine": describe(model.translator)}
    if spec.get("intra"):
        row["engine"] += f" (intra_threads {spec['intra']})"
    translate = model.translate
    translate(lines[:8])  # warm-up
    row["single_ms"] = single_ms(translate, lines[: spec["single"]])
    row[f"calls_{CALL}"] = calls_per_s(translate, lines[: max(4 * CALL, min(len(lines), 256))], CALL)
    start = time.perf_counter()
    texts = translate(lines)
    row["whole"] = len(lines) / (time.perf_counter() - start)
    with open(spec["out"], "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in texts))
    return row


def run_worker(spec: dict) -> dict:
    result = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"engine_bench worker failed: {spec['name']}\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.splitlines()[-1])


def best(rows: list[dict]) -> dict:
    """Per measurement, the best round: the lowest latency, the highest speeds."""
    fastest = {k: (min if k in ("single_ms", "load_s") else max)(r[k] for r in rows) for k in rows[0] if k != "engine"}
    return {**fastest, "engine": rows[0]["engine"]}


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
    if max(args.threads) > 1:  # and on intra-op threads, CTranslate2's usual layout
        load = dict(engine="ctranslate2", compute_type=PAIRS[precision], threads=1)
        specs.append(dict(name="ct2 intra", path=exported, load=load, intra=max(args.threads), **common))
    if not args.no_ours:
        specs.append(dict(name="ours", path=args.checkpoint, load=dict(engine="torch", precision=precision), **common))
    for spec in specs:
        spec["out"] = os.path.join(workdir, f"{spec['name']} {precision}.txt".replace(" ", "_"))
    return specs


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    if not (args.checkpoint and args.src):
        raise SystemExit("engine_bench.py: --checkpoint and --src are required")
    import torch

    from mt_transformer import checkpoint
    from mt_transformer.data.text import read_lines
    from mt_transformer.devices import cpu_model
    from mt_transformer.evaluation.scores import score
    from mt_transformer.exchange import ctranslate2_export
    from mt_transformer.exchange.ctranslate2_cache import cached_conversion

    refs = read_lines(args.ref)[: args.lines] if args.ref else None
    results = {"cpu": cpu_model(), "torch": torch.__version__, "checkpoint": args.checkpoint, "beam": args.beam}
    print(f"{results['cpu']}, {os.cpu_count()} cores, beam {args.beam}, {args.lines} lines, each engine in its process")
    cached_conversion(args.checkpoint)  # made once, before the default path is timed
    with tempfile.TemporaryDirectory() as workdir:
        exported = os.path.join(workdir, "ct2")
        ctranslate2_export.export(checkpoint.load(args.checkpoint, torch.device("cpu")), exported)
        for precision in args.precisions:
            specs = engines(args, exported, precision, workdir)
            rounds: dict[str, list] = {spec["name"]: [] for spec in specs}
            for r in range(args.rounds):
                for spec in specs if r % 2 == 0 else specs[::-1]:
                    rounds[spec["name"]].append(run_worker(spec))
            texts = {spec["name"]: read_lines(spec["out"]) for spec in specs}
            reference = texts[f"ct2 {args.threads[0]}"]
            for spec in specs:
                row = best(rounds[spec["name"]])
                row["equal_to_ct2"] = sum(a == b for a, b in zip(texts[spec["name"]], reference)) / len(reference)
                if refs:
                    row["bleu"] = score(texts[spec["name"]], refs, ("bleu",))["bleu"]
                results[f"{spec['name']} {precision}"] = row
    print(table(results, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def table(results: dict, args) -> str:
    columns = ("single_ms", f"calls_{CALL}", "whole")
    head = f"| engine | 1 line, ms | calls of {CALL}, sent/s | all in one call, sent/s | equal to CTranslate2 | BLEU |"
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for precision in args.precisions:
        layouts = [f"ct2 {t}" for t in args.threads] + (["ct2 intra"] if max(args.threads) > 1 else [])
        ct2 = [results[f"{name} {precision}"] for name in layouts]
        fastest = {c: (min if c == "single_ms" else max)(r[c] for r in ct2) for c in columns}
        names = ["default"] + layouts + ([] if args.no_ours else ["ours"])
        for name in names:
            r = results[f"{name} {precision}"]
            labels = {"default": f"default, {precision}", "ours": f"ours (--engine torch), {precision}"}
            intra = f"one worker of {max(args.threads)} threads"
            workers = f"{name.split()[-1]} worker(s) of 1 thread"
            label = labels.get(name) or f"CTranslate2 {PAIRS[precision]}, {intra if 'intra' in name else workers}"
            bleu = f"{r['bleu']:.2f}" if "bleu" in r else ""
            out.append(
                f"| {label} | {r['single_ms']:.1f} | {r[columns[1]]:.0f} | {r['whole']:.0f} | "
                f"{r['equal_to_ct2']:.1%} | {bleu} |"
            )
            if name in ("default", "ours"):
                ratios = [fastest["single_ms"] / r["single_ms"]] + [r[c] / fastest[c] for c in columns[1:]]
                out.append(f"| {name} / fastest CTranslate2 | " + " | ".join(f"{x:.2f}x" for x in ratios) + " | | |")
    engines = sorted({f"{k}: {v['engine']}" for k, v in results.items() if isinstance(v, dict) and "engine" in v})
    return "\n".join(out + [""] + engines)


if __name__ == "__main__":
    main()
