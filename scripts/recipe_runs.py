#!/usr/bin/env python3
"""One recipe experiment: train a config with overrides, then score it the way docs/recipes.md reports.

Trains with `mt-train --config CONFIG --set ...` into RUNS_DIR/NAME (unless --eval-only), then
scores on the valid set with beam 4 (the run's decode settings): the best checkpoint, the
averages of the last 3 and last 5 checkpoints, and the best checkpoint greedy. With --test,
the same four on the test set (BLEU and chrF). Appends one
JSON line per run to RUNS_DIR/results.jsonl and prints it as a markdown row.

A machine's speed drifts (by a quarter within an hour, seen here), so with --probe N the
run is preceded by N updates of the same settings without validation, in a scratch directory,
whose training tokens/s is recorded as `probe_tokens_per_s`: runs whose probes differ did not
get the same amount of computation from their minutes. The row also names the CPU the run
trained on (`cpu`): the host behind a virtual machine can change from one day to the next.

    python3 scripts/recipe_runs.py --config configs/recipes/small_cpu.yaml --name dropout0.3 \\
        --set model.dropout=0.3 train.max_minutes=30

Without hub access, the recipe's data from local line-aligned files (DIR/train.de, ...):
    --set data.format=text data.train=DIR/train data.valid=DIR/valid data.test=DIR/test
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time

from measure import machine
from mt_transformer import checkpoint
from mt_transformer.cli import eval_main
from mt_transformer.config import load_config
from mt_transformer.evaluation.average import average_checkpoints, last_checkpoints
from mt_transformer.training.run_log import read_metrics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def evaluate(model: str, split: str, *options: str) -> dict:
    """mt-eval's scores of `model` on a split of the data its run trained with, run in this process:
    scoring needs no process of its own (training does: its own thread pool, timed from its start),
    and each start costs seconds of imports."""
    argv = ["--checkpoint", model, "--split", split, "--json", *options]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            eval_main(argv)
        except SystemExit as exit:
            if exit.code:
                raise SystemExit(f"mt-eval {' '.join(argv)} failed (exit code {exit.code})") from None
    return json.loads(out.getvalue())


def probe_speed(config: str, overrides: list[str], steps: int) -> float:
    """Training tokens/s of `steps` updates with these settings (no validation), leaving out the
    first log interval (start-up)."""
    with tempfile.TemporaryDirectory() as scratch:
        run(
            "mt-train",
            "--config",
            config,
            "--set",
            *overrides,
            f"train.output_dir={scratch}",
            f"train.max_steps={steps}",
            f"train.log_every={max(steps // 3, 1)}",
            f"train.valid_every={10 * steps}",
            "train.max_minutes=0",
            "train.keep_last=1",
            "data.valid=null",
            "data.test=null",
        )
        rates = [e["tokens_per_s"] for e in read_metrics(scratch) if "tokens_per_s" in e]
    return round(sum(rates[1:]) / (len(rates) - 1), 1) if len(rates) > 1 else rates[0]


def score_last(out: str) -> dict:
    """Test BLEU and chrF of the last checkpoint and of the average of the last 3 (written to
    avg3/): the cells of docs/recipes.md's budget table."""
    kept = checkpoint.list_checkpoints(out)
    average = os.path.join(out, "avg3")
    average_checkpoints(last_checkpoints(out, 3), average)
    row = {"last_step": kept[-1][0], "avg3_steps": [step for step, _ in kept[-3:]]}
    for label, model in (("last", kept[-1][1]), ("avg3", average)):
        scores = evaluate(model, "test")
        row[f"test_{label}"] = {"bleu": scores["bleu"], "chrf": scores["chrf"]}
        row["signatures"] = scores["signature"]
    return row


def score_run(out: str, best_name: str, has_test: bool) -> dict:
    """Valid BLEU of the best checkpoint (beam and greedy) and of the averages of the last 3 and 5
    kept checkpoints (written to avg3/, avg5/); with `has_test`, test BLEU and chrF of each."""
    best_dir = os.path.join(checkpoint.checkpoint_root(out), best_name)
    row = {}
    row["valid_best"] = evaluate(best_dir, "valid", "--metrics", "bleu")["bleu"]
    row["valid_best_greedy"] = evaluate(best_dir, "valid", "--metrics", "bleu", "--beam", "1")["bleu"]
    kept = checkpoint.list_checkpoints(out)
    averages = {}
    for n in (3, 5):
        if len(kept) >= n:
            averages[n] = os.path.join(out, f"avg{n}")
            average_checkpoints(last_checkpoints(out, n), averages[n])
            row[f"valid_avg{n}"] = evaluate(averages[n], "valid", "--metrics", "bleu")["bleu"]
            row[f"avg{n}_steps"] = [step for step, _ in kept[-n:]]
    if has_test:
        models = (
            ("best", best_dir, ()),
            ("best_greedy", best_dir, ("--beam", "1")),
            ("avg3", averages.get(3), ()),
            ("avg5", averages.get(5), ()),
        )
        for label, model, options in models:
            if model:
                scores = evaluate(model, "test", *options)
                row[f"test_{label}"] = {"bleu": scores["bleu"], "chrf": scores["chrf"]}
                row["signatures"] = scores["signature"]
    return row


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--name", required=True, help="the run's name (its directory under --runs-dir)")
    parser.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument("--runs-dir", default="runs/recipes")
    parser.add_argument("--eval-only", action="store_true", help="score an existing run")
    parser.add_argument("--test", action="store_true", help="also score on data.test")
    parser.add_argument(
        "--brief", action="store_true", help="score only the last checkpoint and the last-3 average, on data.test"
    )
    parser.add_argument(
        "--probe",
        type=int,
        default=0,
        metavar="N",
        help="first time N updates of the same settings (this machine's speed now)",
    )
    args = parser.parse_args(argv)

    out = os.path.join(args.runs_dir, args.name)
    overrides = [*args.set, f"train.output_dir={out}"]
    config = load_config(args.config, overrides)
    wall = probe = None
    if args.probe and not args.eval_only:
        probe = probe_speed(args.config, args.set, args.probe)
        print(f"speed probe: {probe} target tokens/s", file=sys.stderr)
    if not args.eval_only:
        start = time.monotonic()
        run("mt-train", "--config", args.config, "--set", *overrides)
        wall = round(time.monotonic() - start)

    entries = read_metrics(out)
    steps = [e["step"] for e in entries if "valid_bleu" in e]
    best = checkpoint.read_best(out)
    row = {
        "name": args.name,
        "config": args.config,
        "set": args.set,
        "wall_s": wall,
        "updates": steps[-1],
        "train_minutes": round(entries[-1]["elapsed_s"] / 60, 1),
        "best_step": best["step"],
    }
    if probe is not None:
        row["probe_tokens_per_s"] = probe
    if not args.eval_only:
        row["cpu"] = machine()["cpu"]
    if args.brief:
        row.update(score_last(out))
    else:
        row.update(score_run(out, best["dir"], args.test and config.data.test is not None))
    with open(os.path.join(args.runs_dir, "results.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row))
    if not args.brief:  # the valid-set row of docs/recipes.md's tables
        print(
            f"| {args.name} | {' '.join(args.set) or '-'} | {row['train_minutes']} min | {row['updates']} | "
            f"{row['valid_best']} (step {row['best_step']}; greedy {row['valid_best_greedy']}) | "
            f"{row.get('valid_avg3', '-')} | {row.get('valid_avg5', '-')} |"
        )
    return row


if __name__ == "__main__":
    main()
