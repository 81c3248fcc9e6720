#!/usr/bin/env python3
"""Our engine (--engine torch) on the calls only it runs on a CPU: an ensemble of two checkpoints
and lexical constraints, beside its plain beam search, beam 4; each setting in a process of its
own, the settings taking turns, best of --rounds (engine_turns.py). With --trees, the package of
each tree (a checkout) takes its turn beside the others, so that two versions of the code are
timed in one run and their outputs compared.

    python3 scripts/torch_bench.py --checkpoint RUN [--second RUN2] --src SRC --ref REF \
        [--precisions fp32 bf16] [--trees OLD_CHECKOUT NEW_CHECKOUT] [--json out.json]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from engine_turns import CALL, TASKS, take_turns
from measure import machine, machine_line, markdown_table, write_json

# each task: the engine_turns measurement it is, and whether it runs an ensemble or constraints
KINDS = {
    "one line": ("single", {}),
    f"calls of {CALL}": ("calls", {}),
    "ensemble": ("calls", {"ensemble": True}),
    "constraints": ("calls", {"constraints": True}),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--second", help="the ensemble's second member (default: --checkpoint again)")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True, help="references: each constrained line must contain a word of its own")
    parser.add_argument("--lines", type=int, default=256)
    parser.add_argument("--single", type=int, default=32, help="lines translated one at a time")
    parser.add_argument("--precisions", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    parser.add_argument("--tasks", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trees", nargs="+", default=[None], help="checkouts whose package is timed, in turns")
    parser.add_argument("--json")
    return parser.parse_args(argv)


def specs_of(args, workdir: str) -> list[dict]:
    """One engine per task, precision and tree."""
    specs = []
    for task in args.tasks:
        measurement, kind = KINDS[task]
        path = [args.checkpoint, args.second or args.checkpoint] if kind.get("ensemble") else args.checkpoint
        for precision in args.precisions:
            for tree in args.trees:
                name = f"{task} | {precision} | {tree or 'installed'}"
                specs.append(
                    dict(name=name, path=path, load=dict(engine="torch", precision=precision), beam=4, src=args.src,
                         lines=args.lines, single=args.single, torch_threads=args.threads, ref=args.ref,
                         constraints=bool(kind.get("constraints")), tasks=[measurement],
                         out=os.path.join(workdir, f"{len(specs)}.txt"), env={"PYTHONPATH": tree} if tree else {})
                )  # fmt: skip
    return specs


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir:
        specs = specs_of(args, workdir)
        found = take_turns(specs, args.rounds, tuple(dict.fromkeys(KINDS[t][0] for t in args.tasks)))
        outputs = {spec["name"]: open(spec["out"], encoding="utf-8").read().splitlines() for spec in specs}
    print(machine_line())
    trees = [t or "installed" for t in args.trees]
    packages = {tree: found[f"{args.tasks[0]} | {args.precisions[0]} | {tree}"]["package"] for tree in trees}
    results, rows = {"machine": machine(), "packages": packages, "rows": []}, []
    for task in args.tasks:
        column = TASKS[KINDS[task][0]]
        for precision in args.precisions:
            names = [f"{task} | {precision} | {tree}" for tree in trees]
            best = [found[name][column] for name in names]
            first = outputs[names[0]]
            equal = sum(a == b for a, b in zip(first, outputs[names[-1]]))
            ratio = best[0] / best[-1] if column == "single_ms" else best[-1] / best[0]
            rows.append([task, precision, *(f"{b:.1f}" for b in best), f"{ratio:.2f}x", f"{equal}/{len(first)}"])
            results["rows"].append(dict(task=task, precision=precision, best=best, ratio=ratio, equal=equal))
    print(markdown_table(["task", "precision", *trees, "last / first", "lines equal"], rows))
    unit = "ms a line (one line), sentences/s"
    print(f"({unit}; {args.threads} thread(s), beam 4, {args.lines} lines, best of {args.rounds})")
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
