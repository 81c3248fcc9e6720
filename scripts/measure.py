"""What the measuring scripts share: the machine a number came from, the clock, and the Markdown
table or JSON file it is written as. A speed means something only beside its machine (the CPU
model, family and vector extensions, cores, threads, torch), so every script records `machine()`."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence

import torch

from mt_transformer.files import write_text
from mt_transformer.host import cpu_model


def machine(device: torch.device | str = "cpu") -> dict:
    """The machine a measurement ran on: CPU (model, family, vector extensions), cores, torch's
    threads, torch and Python versions, and the GPU where `device` is one."""
    device = torch.device(device)
    described = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    if device.type == "cuda":
        described["gpu"] = torch.cuda.get_device_name(device)
    return described


def machine_line(device: torch.device | str = "cpu") -> str:
    """machine() in one line, as the scripts print it above their tables."""
    m = machine(device)
    gpu = f", GPU {m['gpu']}" if "gpu" in m else ""
    return f"{m['cpu']}, {m['cores']} cores, {m['threads']} threads, torch {m['torch']}, Python {m['python']}{gpu}"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work: a GPU's clock stops only when its kernels have run."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_memory_mb(device: torch.device) -> float:
    """On CUDA the most allocated since reset_peak_memory(); on CPU the process's peak resident size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_memory(device: torch.device) -> None:
    """Start a measured section: on CUDA, forget the peak of what ran before (the CPU's peak
    resident size cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def fastest(function: Callable, *args, rounds: int = 3) -> tuple[object, float]:
    """function(*args) `rounds` times: its last result and the fewest seconds a round took."""
    best, result = float("inf"), None
    for _ in range(rounds):
        result, seconds = timed(function, *args)
        best = min(best, seconds)
    return result, best


def timed(function: Callable, *args, **kwargs) -> tuple[object, float]:
    """function(*args, **kwargs) and the seconds it took."""
    start = time.perf_counter()
    result = function(*args, **kwargs)
    return result, time.perf_counter() - start


def timed_updates(step: Callable, groups, device: torch.device) -> tuple[float, int]:
    """(seconds, target tokens) of one update of mt-train's step (training/step.py) per group of
    batches, the device's queued work waited for before and after."""
    synchronize(device)
    start, tokens = time.perf_counter(), 0
    for group in groups:
        step([batch.to(device) for batch in group])
        tokens += sum(batch.target_tokens for batch in group)
    synchronize(device)
    return time.perf_counter() - start, tokens


def texts(translate: Callable, lines: list[str], **options) -> list[str]:
    """The best translation of each line, as text (translate: a translator, as mt.load's)."""
    return [results[0].text for results in translate(lines, **options)]


def calls_per_s(translate: Callable, lines: list[str], size: int) -> float:
    """Sentences/s of translate() on `lines` in consecutive calls of `size` lines."""
    return len(lines) / timed(lambda: [translate(lines[i : i + size]) for i in range(0, len(lines), size)])[1]


def run_process(
    command: list[str], stdin=None, cwd: str | None = None, env: dict | None = None, on_start=None
) -> tuple[float, float]:
    """Run a command to its end, its output discarded: (wall seconds, its peak RSS in MiB). A
    failure stops the script with the command's last lines of stderr. `on_start(pid)` is told
    the process's id once it runs."""
    with tempfile.TemporaryFile() as log:  # a file, not a pipe: nothing reads stderr while it runs
        start = time.perf_counter()
        process = subprocess.Popen(command, stdin=stdin, stdout=subprocess.DEVNULL, stderr=log, cwd=cwd, env=env)
        if on_start is not None:
            on_start(process.pid)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            log.seek(0)
            raise SystemExit(f"{' '.join(command)} failed:\n{log.read().decode(errors='replace')[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def peak_own_memory(command: list[str], interval: float = 0.02) -> tuple[float, float, float]:
    """run_process's (wall seconds, peak RSS in MiB) and the peak of the process's own memory
    (RSS less its file pages: what it maps from a file, such as weights in a safetensors file,
    the kernel can drop and read again), sampled every `interval` seconds from /proc."""
    own = [0.0]
    done = threading.Event()

    def sample(pid: int) -> None:
        path = f"/proc/{pid}/status"
        while not done.is_set():
            try:
                with open(path, encoding="ascii") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
                own[0] = max(own[0], (int(fields["RssAnon"].split()[0]) + int(fields["RssShmem"].split()[0])) / 1024)
            except (OSError, KeyError, ValueError):
                pass  # not started yet, or gone
            time.sleep(interval)

    started = threading.Event()
    pids: list[int] = []

    def watch() -> None:
        started.wait()
        sample(pids[0])

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    seconds, peak = run_process(command, on_start=lambda pid: (pids.append(pid), started.set()))
    done.set()
    watcher.join()
    return seconds, peak, own[0]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table: one row per sequence of cells, each cell as str() writes it."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(path: str, results: object) -> None:
    """Results written atomically as indented JSON (the numbers a docs table is made from)."""
    write_text(path, json.dumps(results, indent=2) + "\n")
