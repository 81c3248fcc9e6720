#!/usr/bin/env python3
"""Check a CUDA install of mt_transformer in one command (`make gpu-check`).

On an H200 the checks took 547 s: the gpu tests 122 s, the speed runs 162 s (torch.compile's
included), the three precisions 180 s, the resumed run 76 s, translation 5 s (one GPU, so no
two-process run).

1. The gpu-marked tests.
2. Training speed of the base and big models per precision, and bf16 under torch.compile:
   target tokens/s, MFU against the measured matrix-product ceiling, peak memory.
3. configs/base.yaml's model trained for a few hundred updates on the generated corpus in fp32
   (TF32 matrix products), bf16 and fp16, through mt-train: their logged losses are compared.
4. With two GPUs or more: the bf16 run again as two processes under torchrun (NCCL).
5. The bf16 run killed after its first checkpoint and started again: it resumes there, and its
   losses stay near the uninterrupted run's (on CUDA not bit for bit: attention's backward kernels
   are not deterministic).
6. The bf16 run's checkpoint translating the valid set with beam 4 in each decode precision:
   sentences/s and BLEU.

--checks runs some of them. The report is rewritten after each check, so a run cut short leaves
what it finished.

Prints one Markdown block to paste into an issue and writes it to --output, and a line per
finished check as it goes. On a machine without CUDA it says so in one line and exits 0; it
exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import torch

from benchmark_report import paper_configs_table
from benchmark_training import bench_paper_configs, matmul_ceiling
from benchmark_translation import bench_decode_precisions
from measure import markdown_table
from mt_transformer.devices import use_fast_matmul
from mt_transformer.files import write_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Each logged loss (the mean over log_every updates) of bf16 and fp16 within this fraction of
# fp32's. The loss falls ~25% per log here, so a run a few updates behind another differs by
# several percent (H200: bf16 5.1%, fp16 7.3% at update 250, 1.9% and 2.8% at 300); a wrong scale
# or a cast that stops learning leaves the loss several times fp32's.
LOSS_TOLERANCE = 0.10
# BLEU of bf16 and fp16 decoding within this of fp32's: rounding flips a few close choices only.
BLEU_TOLERANCE = 1.0
UPDATES, LOG_EVERY, VALID_EVERY = 300, 50, 100


def pytest_counts(output: str) -> dict[str, int]:
    """{"passed": 2, "failed": 1, ...} from pytest's last summary line."""
    summary = [line for line in output.splitlines() if re.search(r"\d+ (passed|failed|error|skipped)", line)]
    if not summary:
        return {}
    counts = re.findall(r"(\d+) (passed|failed|errors?|skipped|deselected)", summary[-1])
    return {word if word != "error" else "errors": int(n) for n, word in counts}


def loss_gap(losses: list[tuple[int, float]], reference: list[tuple[int, float]]) -> float:
    """The largest relative gap between two runs' losses logged at the same steps (inf if the
    steps differ or a loss is not finite)."""
    if not losses or [s for s, _ in losses] != [s for s, _ in reference]:
        return float("inf")
    gaps = [abs(a - b) / abs(b) for (_, a), (_, b) in zip(losses, reference)]
    return max(gaps) if all(g == g for g in gaps) else float("inf")


def logged_losses(run_dir: str) -> list[tuple[int, float]]:
    from mt_transformer.training.run_log import read_metrics

    return [(m["step"], m["loss"]) for m in read_metrics(run_dir) if "loss" in m]


MT_TRAIN = [sys.executable, "-c", "import sys; from mt_transformer.cli import train_main; train_main()"]


def mt_train_args(corpus: str, run_dir: str, precision: str, *more: str) -> list[str]:
    """mt-train's arguments for configs/base.yaml's model and schedule on the generated corpus,
    shortened to a few hundred updates."""
    settings = [
        "data.format=text",
        f"data.train={corpus}/train",
        f"data.valid={corpus}/valid",
        "data.vocab_size=1000",
        "data.max_len=64",
        "data.num_proc=1",
        f"train.output_dir={run_dir}",
        f"train.precision={precision}",
        "train.max_tokens=4096",
        "train.accumulate=2",
        f"train.max_steps={UPDATES}",
        # the paper's rate rising over 1,200 updates: 3.2e-4 at update 300. With a warmup of 400
        # all three precisions diverged together after update 200 (rate ~1.1e-3; H200, loss 3.2 at
        # update 200, 5.0 at 300), and runs that diverge compare nothing
        "train.warmup=1200",
        f"train.log_every={LOG_EVERY}",
        f"train.valid_every={VALID_EVERY}",
        "train.valid_max_sentences=200",
        *more,
    ]
    return ["--config", os.path.join(ROOT, "configs", "base.yaml"), "--set", *settings]


def run(command: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def last_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines and result.returncode != 0 else ""


def check_precisions(corpus: str, workdir: str) -> dict:
    rows = {}
    for precision in ("fp32", "bf16", "fp16"):
        run_dir = os.path.join(workdir, precision)
        started = time.monotonic()
        result = run([*MT_TRAIN, *mt_train_args(corpus, run_dir, precision, "train.device=cuda")])
        row = rows[precision] = {"ok": result.returncode == 0, "error": last_line(result), "losses": []}
        row["seconds"] = round(time.monotonic() - started)
        if result.returncode == 0:
            row["losses"] = logged_losses(run_dir)
            skipped = re.findall(r"update skipped \((\d+) so far\)", result.stderr)
            row["skipped"] = int(skipped[-1]) if skipped else 0
    for row in rows.values():
        row["gap"] = loss_gap(row["losses"], rows["fp32"]["losses"])
    return rows


def check_resume(corpus: str, workdir: str, reference: list[tuple[int, float]]) -> dict:
    """The bf16 run killed once its first checkpoint is written, then the same command again."""
    run_dir = os.path.join(workdir, "killed")
    command = [*MT_TRAIN, *mt_train_args(corpus, run_dir, "bf16", "train.device=cuda")]
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = os.path.join(run_dir, "checkpoints", f"step_{VALID_EVERY:08d}", "trainer.pt")
    deadline = time.monotonic() + 240
    while not os.path.exists(first) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)  # into the next updates
    process.send_signal(signal.SIGKILL)
    process.wait()
    result = run(command)
    resumed = re.search(r"resuming from \S+ \(step (\d+)", result.stderr)
    return {
        "ok": result.returncode == 0 and resumed is not None,
        "resumed_at": int(resumed.group(1)) if resumed else None,
        "gap": loss_gap(logged_losses(run_dir), reference) if result.returncode == 0 else float("inf"),
        "error": last_line(result),
    }


def check_two_processes(corpus: str, workdir: str, reference: list[tuple[int, float]]) -> dict:
    """bf16 on two GPUs, one batch each where one process accumulates two: the same updates."""
    if torch.cuda.device_count() < 2:
        return {"skipped": f"{torch.cuda.device_count()} GPU on this machine"}
    run_dir = os.path.join(workdir, "two")
    script = os.path.join(workdir, "mt_train.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write("from mt_transformer.cli import train_main\ntrain_main()\n")
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script]
    result = run([*torchrun, *mt_train_args(corpus, run_dir, "bf16", "train.accumulate=1")])
    return {
        "ok": result.returncode == 0 and "x 2 processes" in result.stderr,
        "gap": loss_gap(logged_losses(run_dir), reference) if result.returncode == 0 else float("inf"),
        "error": last_line(result),
    }


def translation_lines(rows: dict, verdict) -> list[str]:
    """The report's table of bench_decode_precisions' rows, each judged against fp32's BLEU."""
    title = f"translation with the bf16 run's checkpoint, beam 4, the valid set; BLEU within {BLEU_TOLERANCE} of fp32's"
    reference, cells = rows["fp32"].get("bleu", float("nan")), []
    for name, row in rows.items():
        if not row["ok"]:
            cells.append([name, verdict(False), row["error"], ""])
            continue
        ok = abs(row["bleu"] - reference) <= BLEU_TOLERANCE
        cells.append([name, verdict(ok), f"{row['per_s']:.1f}", f"{row['bleu']:.2f}"])
    table = markdown_table(["decode precision", "result", "sentences/s", "BLEU"], cells)
    return [f"- {title}:", "", *table.splitlines(), ""]


def check_speed(updates: int) -> dict:
    """The base and big models per precision, bf16 also under torch.compile (scripts/benchmark.py)."""
    device = torch.device("cuda")
    use_fast_matmul(device)
    ceilings = {
        "tf32": matmul_ceiling(device, torch.float32) / 1e9,
        "bf16": matmul_ceiling(device, torch.bfloat16) / 1e9,
    }
    runs = [(name, p, False) for name in ("base", "big") for p in ("fp32", "bf16", "fp16")]
    runs += [("base", "bf16", True), ("big", "bf16", True)]
    rows = bench_paper_configs(device, 16384, updates, runs)
    return {"ceilings": ceilings, "rows": rows, "table": paper_configs_table(rows, ceilings)}


def failure(check: dict) -> str:
    return f" ({check['error']})" if check.get("error") else ""


class Verdicts:
    """Each check's pass or FAIL, as written into the report."""

    def __init__(self):
        self.failed = 0

    def __call__(self, ok: bool) -> str:
        self.failed += not ok
        return "pass" if ok else "FAIL"


def report(
    environment: str,
    tests: dict | None,
    precisions: dict | None,
    speed: dict | None,
    two: dict | None,
    resume: dict | None,
    translation: dict | None = None,
):
    """The Markdown block to paste into an issue, and whether every check that ran passed (a check
    left out by --checks, or not reached yet, is None and reported as not run)."""
    verdict = Verdicts()
    lines = ["### mt_transformer gpu-check", "", environment, ""]
    if tests is None:
        lines.append("- gpu-marked tests: not run")
    else:
        tests_ok = bool(tests) and tests.get("passed", 0) > 0 and not tests.get("failed") and not tests.get("errors")
        summary = ", ".join(f"{n} {w}" for w, n in tests.items()) or "no summary"
        lines.append(f"- gpu-marked tests: {verdict(tests_ok)} ({summary})")
    if precisions is None:
        lines.append(f"- precisions, base model, {UPDATES} updates: not run")
    else:
        lines += precision_lines(precisions, verdict)
    if translation is not None:
        lines += translation_lines(translation, verdict)
    if speed is not None:
        ceilings = ", ".join(f"{n} {c / 1000:.0f} TFLOP/s" for n, c in speed["ceilings"].items())
        lines += [f"- training speed, 16,384 target tokens per update (matrix-product ceilings: {ceilings}):", ""]
        lines += [speed["table"], ""]
    if two is None or "skipped" in two:
        lines.append(f"- two processes (NCCL): not run{', ' + two['skipped'] if two else ''}")
    else:
        lines.append(
            f"- two processes (NCCL): {verdict(two['ok'] and two['gap'] <= LOSS_TOLERANCE)}, "
            f"largest loss gap to one process {two['gap']:.1%}{failure(two)}"
        )
    if resume is None:
        lines.append(f"- killed after the checkpoint of step {VALID_EVERY} and restarted: not run")
    else:
        lines.append(
            f"- killed after the checkpoint of step {VALID_EVERY} and restarted: "
            f"{verdict(resume['ok'] and resume['gap'] <= LOSS_TOLERANCE)}, resumed at step {resume['resumed_at']}, "
            f"largest loss gap to the uninterrupted bf16 run {resume['gap']:.1%}{failure(resume)}"
        )
    return "\n".join(lines) + "\n", verdict.failed == 0


def precision_lines(precisions: dict, verdict) -> list[str]:
    """The report's table of the precision runs, each judged against fp32's losses."""
    title = f"precisions, base model, {UPDATES} updates; each logged loss within {LOSS_TOLERANCE:.0%} of fp32's"
    columns = ["precision", "result", "largest gap to fp32", "skipped updates", "loss at each log", "seconds"]
    cells = []
    for name, row in precisions.items():
        ok = row["ok"] and row["gap"] <= LOSS_TOLERANCE
        losses = " ".join(f"{loss:.3f}" for _, loss in row["losses"]) or row["error"]
        cells.append([name, verdict(ok), f"{row['gap']:.1%}", row.get("skipped", ""), losses, row["seconds"]])
    return [f"- {title}:", "", *markdown_table(columns, cells).splitlines(), ""]


def environment() -> str:
    from mt_transformer.host import cpu_model

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    memory = torch.cuda.get_device_properties(0).total_memory / 2**30
    return (
        f"{len(gpus)} x {gpus[0]} ({memory:.0f} GiB), torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"bf16 {'supported' if torch.cuda.is_bf16_supported() else 'not supported'}; CPU {cpu_model()}"
    )


CHECKS = ("tests", "precisions", "resume", "translation", "speed")
NEEDS = "resume and translation reuse the precisions' bf16 run"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="gpu-check.md", help="where to write the report (default: gpu-check.md)")
    parser.add_argument("--speed-updates", type=int, default=10, help="timed updates per speed measurement")
    parser.add_argument(
        "--checks",
        default=",".join(CHECKS),
        help=f"which checks, comma-separated (default: all of {','.join(CHECKS)}); {NEEDS}",
    )
    args = parser.parse_args(argv)
    checks = set(args.checks.split(","))
    if checks - set(CHECKS) or ({"resume", "translation"} & checks and "precisions" not in checks):
        parser.error(f"--checks: a comma-separated subset of {','.join(CHECKS)}; {NEEDS}")
    if not torch.cuda.is_available():
        print(f"gpu-check: no CUDA device here (torch {torch.__version__}): nothing to check")
        return 0
    started = time.monotonic()
    results = dict.fromkeys(("tests", "precisions", "speed", "two", "resume", "translation"))
    machine = environment()

    def finished(what: str, result, shown=None):
        """Keeps a check's result, prints a line and rewrites the report, so a run cut short still
        leaves what it got."""
        results[what] = result
        shown = result if shown is None else shown
        print(f"gpu-check: {what} done at {time.monotonic() - started:.0f} s: {shown}", file=sys.stderr, flush=True)
        write_text(args.output, report(machine, **results)[0])

    if "tests" in checks:
        pytest_run = run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider"])
        if pytest_run.returncode != 0:
            print(pytest_run.stdout[-4000:], file=sys.stderr, flush=True)
        finished("tests", pytest_counts(pytest_run.stdout))
    if "speed" in checks:
        speed = check_speed(args.speed_updates)
        finished("speed", speed, "\n" + speed["table"])
    if "precisions" in checks:
        run_checks_on_the_generated_corpus(checks, finished)
    text, ok = report(machine, **results)
    text += f"\nall checks: {time.monotonic() - started:.0f} s\n"
    print(text)
    write_text(args.output, text)
    return 0 if ok else 1


def run_checks_on_the_generated_corpus(checks: set[str], finished) -> None:
    """The precision runs through mt-train, then those that reuse the bf16 run: two processes,
    the killed run resumed, translation in each decode precision."""
    from mt_transformer.data.demo_data import generate

    with tempfile.TemporaryDirectory() as workdir:
        corpus = os.path.join(workdir, "corpus")
        generate(corpus, train=30000, valid=500, test=10)
        precisions = check_precisions(corpus, workdir)
        summary = {n: (r["ok"], r["seconds"], [x for _, x in r["losses"]], r["error"]) for n, r in precisions.items()}
        finished("precisions", precisions, summary)
        reference = precisions["bf16"]["losses"]
        finished("two", check_two_processes(corpus, workdir, reference))
        if "resume" in checks:
            finished("resume", check_resume(corpus, workdir, reference))
        if "translation" in checks:
            bf16_run = os.path.join(workdir, "bf16")
            finished("translation", bench_decode_precisions(bf16_run, f"{corpus}/valid", torch.device("cuda")))


if __name__ == "__main__":
    sys.exit(main())
