"""Engines timed in turns: the engine comparison of engine_bench.py, student_bench.py and
torch_bench.py.

Each engine is loaded once in a process of its own: two OpenMP pools in one process slow each
other (CTranslate2's and torch's). The engines take turns at every measurement, in reversed order
every other round, so that the host's drift reaches them alike; the best round of each counts.

An engine is a spec, a dict sent to its process as JSON:
    name           the row it measures
    path           what mt.load opens (a list: an ensemble)
    load           mt.load's settings (engine, precision, compute_type, threads, worker_threads)
    beam           the beam size
    src, lines     the source file and how many of its lines are translated
    single         how many of them are translated one at a time
    torch_threads  torch's threads in the process
    out            where a measurement writes the translations of the lines it translated
    tasks          the measurements it takes part in (default: all that are asked)
    constraints    each translation must contain its reference's longest word (from `ref`)
    env            more environment variables (torch_bench.py --trees: a checkout's PYTHONPATH)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from measure import timed

CALL = 32  # lines per call of the "calls" measurement
TASKS = {"single": "single_ms", "calls": f"calls_{CALL}", "whole": "whole"}  # measurement: its column


def included_words(references: list[str]) -> list[list[str]]:
    """Per line, the phrase a constrained translation must contain: the reference's longest word."""
    return [[max(ref.split(), key=len).strip(".,;:!?\"'")] if ref.split() else [] for ref in references]


def _mt_engine(spec: dict, lines: list[str]):
    """(translate(start, stop) -> texts, the engine's description) of a model mt.load opens."""
    import mt_transformer as mt
    from mt_transformer.data.text import read_lines
    from mt_transformer.decoding.engines import describe, open_translator

    load = dict(device="cpu", beam_size=spec["beam"], **spec.get("load", {}))
    if spec.get("constraints"):  # what mt.load does, with a need it does not take
        translator = open_translator(spec["path"], needs=("constraints",), **load)
        phrases = included_words(read_lines(spec["ref"])[: len(lines)])
    else:
        translator, phrases = mt.load(spec["path"], **load).translator, None

    def translate(start: int, stop: int) -> list[str]:
        chunk = lines[start:stop]
        constraints = (phrases[start:stop], [[] for _ in chunk]) if phrases else None
        return [r[0].text for r in translator(chunk, constraints=constraints)]

    return translate, describe(translator)


def _in_calls(translate, count: int, size: int) -> list[str]:
    """The first `count` lines' translations, translate(start, stop) called on `size` at a time."""
    return [text for first in range(0, count, size) for text in translate(first, min(first + size, count))]


def worker(spec: dict) -> None:
    """One engine, loaded once in this process, measuring what the parent asks on stdin (a JSON
    task name a line) and answering on stdout."""
    import torch

    import mt_transformer
    from mt_transformer.data.text import read_lines
    from mt_transformer.files import write_text

    torch.set_num_threads(spec["torch_threads"])
    lines = read_lines(spec["src"])[: spec["lines"]]
    translate, engine = _mt_engine(spec, lines)
    translate(0, min(8, len(lines)))  # warm-up: the first call builds what later calls reuse
    print(json.dumps({"engine": engine, "package": mt_transformer.__file__}), flush=True)
    for task in map(json.loads, sys.stdin):
        if task == "single":
            found = [timed(translate, i, i + 1) for i in range(min(spec["single"], len(lines)))]
            texts = [text for chunk, _ in found for text in chunk]
            value = 1000 * statistics.median(seconds for _, seconds in found)
        else:
            count = len(lines) if task == "whole" else min(len(lines), 8 * CALL)
            step = count if task == "whole" else CALL
            texts, seconds = timed(_in_calls, translate, count, step)
            value = len(texts) / seconds
        write_text(spec["out"], "".join(t + "\n" for t in texts))
        print(json.dumps(value), flush=True)


class Engine:
    """The process of one spec: started once, asked for one measurement at a time."""

    def __init__(self, spec: dict):
        self.spec = spec
        command = [sys.executable, __file__, json.dumps(spec)]
        env = {**os.environ, **spec.get("env", {})}
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        hello = self._answer()
        self.engine, self.package = hello["engine"], hello["package"]

    def measure(self, task: str) -> float:
        self.process.stdin.write(json.dumps(task) + "\n")
        self.process.stdin.flush()
        return self._answer()

    def _answer(self):
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"engine_turns: the engine {self.spec['name']!r} failed (its stderr is above)")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def take_turns(specs: list[dict], rounds: int, tasks=tuple(TASKS)) -> dict[str, dict]:
    """Per spec name: each of its `tasks`' column, the best of `rounds` (the fewest ms for
    single_ms, else the most sentences/s), every round's value under "rounds", and the engine's
    description and package."""
    engines = [Engine(spec) for spec in specs]
    try:
        found = {e.spec["name"]: {TASKS[t]: [] for t in e.spec.get("tasks", tasks)} for e in engines}
        for r in range(rounds):
            for task in tasks:
                for e in engines if r % 2 == 0 else engines[::-1]:
                    if task in e.spec.get("tasks", tasks):
                        found[e.spec["name"]][TASKS[task]].append(e.measure(task))
    finally:
        for e in engines:
            e.close()
    rows = {}
    for e in engines:
        values = found[e.spec["name"]]
        rows[e.spec["name"]] = {c: (min if c == "single_ms" else max)(v) for c, v in values.items()}
        rows[e.spec["name"]].update(engine=e.engine, package=e.package, rounds=values)
    return rows


def paired(row: dict, reference: dict) -> list[float]:
    """Per column of TASKS, the median over rounds of `row`'s speed over `reference`'s in the same
    round (measured one after the other, so that the host's drift divides out)."""
    found = []
    for column in TASKS.values():
        pairs = zip(row["rounds"][column], reference["rounds"][column])
        found.append(statistics.median((b / a if column == "single_ms" else a / b) for a, b in pairs))
    return found


if __name__ == "__main__":
    worker(json.loads(sys.argv[1]))
