#!/usr/bin/env python3
"""The default engine (mt.load of a checkpoint: --engine auto), CTranslate2 given an export,
and our engine alone, each in a process of its own, on one checkpoint.

Every engine runs in a process of its own, loaded once, the engines taking turns at every
measurement and the best round of each counting (engine_turns.py). Per precision (fp32 against
CTranslate2's float32, int8 against its int8): one sentence at a time (median ms), calls of 32
lines and all lines in one call (sentences/s), the share of lines equal to CTranslate2's, and
with --ref BLEU. CTranslate2 runs as N workers of one thread for each N of --threads (as
mt-translate runs it) and as one worker on the most threads (as it is usually run); the ratios
are against the fastest of these per column.

    python3 scripts/engine_bench.py --checkpoint runs/demo --src data/demo/test.en --ref data/demo/test.de
"""

from __future__ import annotations

import argparse
import os
import tempfile

from engine_turns import CALL, TASKS, paired, take_turns
from measure import machine, machine_line, markdown_table, write_json

PAIRS = {"fp32": "float32", "int8": "int8"}  # our --precision: CTranslate2's compute type


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
            rows = take_turns(specs, args.rounds)
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
    columns = tuple(TASKS.values())
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
