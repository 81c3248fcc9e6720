#!/usr/bin/env python3
"""Our engine (--engine torch) on the calls only it runs on a CPU: an ensemble of two checkpoints
and lexical constraints, beside its plain beam search, beam 4; each setting in a process of its
own, best of --rounds. With --trees, the package of each tree (a checkout) takes turns with the
others, so that two versions of the code are timed in one run and their outputs compared.

    python3 scripts/torch_bench.py --checkpoint RUN [--second RUN2] --src SRC --ref REF \
        [--precisions fp32 bf16] [--trees OLD_CHECKOUT NEW_CHECKOUT] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

from measure import machine, machine_line, markdown_table, per_second, write_json

CALL = 32  # lines per call
TASKS = ("one line", f"calls of {CALL}", "ensemble", "constraints")


def included_words(references: list[str]) -> list[list[str]]:
    """Per line, the phrase a constrained translation must contain: the reference's longest word."""
    return [[max(ref.split(), key=len).strip(".,;:!?\"'")] if ref.split() else [] for ref in references]


def worker(spec: dict) -> dict:
    """Time one task at one precision; the translations come back to compare trees."""
    import torch

    import mt_transformer
    from mt_transformer.decoding.engines import open_translator

    torch.set_num_threads(spec["threads"])
    paths = [spec["checkpoint"], spec["second"]] if spec["task"] == "ensemble" else spec["checkpoint"]
    needs = ("constraints",) if spec["task"] == "constraints" else ()
    translate = open_translator(paths, "torch", "cpu", needs=needs, precision=spec["precision"], beam_size=4)
    lines, refs = spec["lines"], spec["refs"]
    outputs: list[str] = []

    def run(size: int, count: int) -> None:
        for i in range(0, count, size):
            chunk = lines[i : i + size]
            constraints = None
            if spec["task"] == "constraints":
                constraints = (included_words(refs[i : i + size]), [[] for _ in chunk])
            outputs.extend(r[0].text for r in translate(chunk, constraints=constraints))

    translate(lines[:2])  # warm: the first call builds what later calls reuse
    if spec["task"] == "one line":
        value = 1000 / per_second(spec["single"], run, 1, spec["single"])
    else:
        value = per_second(len(lines), run, CALL, len(lines))
    return {"value": value, "outputs": outputs, "package": mt_transformer.__file__}


def measure(spec: dict, tree: str | None) -> dict:
    """worker(spec) in a process of its own, on `tree`'s package (None: the installed one)."""
    env = dict(os.environ, **({"PYTHONPATH": tree} if tree else {}))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        done = subprocess.run([sys.executable, __file__, "--worker", f.name], env=env, capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise SystemExit(f"{tree or 'installed'}: {spec['task']} {spec['precision']} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--second", help="the ensemble's second member (default: --checkpoint again)")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True, help="references: each constrained line must contain a word of its own")
    parser.add_argument("--lines", type=int, default=256)
    parser.add_argument("--single", type=int, default=32, help="lines translated one at a time")
    parser.add_argument("--precisions", nargs="+", default=["fp32"], choices=["fp32", "bf16"])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trees", nargs="+", default=[None], help="checkouts whose package is timed, in turns")
    parser.add_argument("--json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:  # a process measure() started
        with open(argv[1]) as f:
            print(json.dumps(worker(json.load(f))))
        return
    args = parse_args(argv)
    with open(args.src) as f, open(args.ref) as g:
        lines, refs = [x.rstrip("\n") for x in f][: args.lines], [x.rstrip("\n") for x in g][: args.lines]
    common = dict(checkpoint=args.checkpoint, second=args.second or args.checkpoint, lines=lines, refs=refs)
    common.update(single=args.single, threads=args.threads)
    found: dict[tuple, list[dict]] = {}
    for round_ in range(args.rounds):
        for task in args.tasks:
            for precision in args.precisions:
                trees = args.trees if round_ % 2 == 0 else args.trees[::-1]  # who goes first alternates
                for tree in trees:
                    spec = dict(common, task=task, precision=precision)
                    found.setdefault((task, precision, tree), []).append(measure(spec, tree))
    print(machine_line())
    packages = {t or "installed": found[args.tasks[0], args.precisions[0], t][0]["package"] for t in args.trees}
    results, rows = {"machine": machine(), "packages": packages, "rows": []}, []
    for task in args.tasks:
        for precision in args.precisions:
            pick = min if task == "one line" else max
            best = [pick(r["value"] for r in found[task, precision, t]) for t in args.trees]
            first = found[task, precision, args.trees[0]][0]["outputs"]
            equal = [sum(a == b for a, b in zip(first, found[task, precision, t][0]["outputs"])) for t in args.trees]
            ratio = best[0] / best[-1] if task == "one line" else best[-1] / best[0]
            rows.append([task, precision, *(f"{b:.1f}" for b in best), f"{ratio:.2f}x", f"{equal[-1]}/{len(first)}"])
            results["rows"].append(dict(task=task, precision=precision, best=best, ratio=ratio, equal=equal[-1]))
    unit = "ms a line (one line), sentences/s"
    trees = [t or "installed" for t in args.trees]
    print(markdown_table(["task", "precision", *trees, "last / first", "lines equal"], rows))
    print(f"({unit}; {args.threads} thread(s), beam 4, {len(lines)} lines, best of {args.rounds})")
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
