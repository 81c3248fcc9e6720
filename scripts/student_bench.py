#!/usr/bin/env python3
"""Teachers and students side by side: BLEU and chrF on a test set, size on disk, and speed one
line at a time and all lines in one call with the default engine (--engine auto), ours in fp32
and int8 (--engine torch) and a CTranslate2 int8 export. Every engine of every model runs in a
process of its own, loaded once, and they take turns at every measurement (engine_turns.py);
each model decodes with its own config's settings (beam, length penalty).

    python3 scripts/student_bench.py --model teacher=runs/small_cpu/avg3 \\
        --model student=runs/student_cpu/avg3 --src test.de --ref test.en
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from engine_turns import take_turns  # noqa: E402
from measure import machine, machine_line, markdown_table, write_json  # noqa: E402

# the engines timed, as mt.load opens each (the int8 export is made here, as mt-export makes it)
ENGINES = {
    "default": dict(precision="fp32"),
    "ours fp32": dict(engine="torch", precision="fp32"),
    "CTranslate2 int8": dict(engine="ctranslate2", compute_type="int8"),
}
TASKS = ("single", "whole")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", required=True, metavar="NAME=CHECKPOINT")
    parser.add_argument("--beam", action="append", default=[], metavar="NAME=K", help="a beam other than its config's")
    parser.add_argument("--src", required=True, help="source lines (the first --lines are translated)")
    parser.add_argument("--ref", required=True, help="their references")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--single", type=int, default=100, help="lines translated one at a time")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    parser.add_argument("--json", help="also write the results here")
    return parser.parse_args(argv)


def training_minutes(path: str) -> float | None:
    """The training minutes of the run a checkpoint belongs to (its metrics.jsonl), if found."""
    from mt_transformer.training.run_log import METRICS_FILE, read_metrics

    for directory in (path, os.path.dirname(os.path.normpath(path))):
        if os.path.isfile(os.path.join(directory, METRICS_FILE)):
            return max(e["elapsed_s"] for e in read_metrics(directory) if "elapsed_s" in e) / 60
    return None


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch

    from mt_transformer import checkpoint
    from mt_transformer.data.text import read_lines
    from mt_transformer.decoding import ctranslate2_export
    from mt_transformer.decoding.ctranslate2_cache import cached_conversion
    from mt_transformer.evaluation.scores import score

    models = dict(item.split("=", 1) for item in args.model)
    beams = {name: int(k) for name, k in (item.split("=", 1) for item in args.beam)}
    refs = read_lines(args.ref)[: args.lines]
    results = {**machine(), "models": {}}
    print(f"{machine_line()}; {args.lines} lines, each engine in its process")
    with tempfile.TemporaryDirectory() as workdir:
        specs = []
        for name, path in models.items():
            directory = checkpoint.resolve(path)
            config = checkpoint.read_config(directory)
            cached_conversion(path)  # made once, before the default path is timed
            exported = os.path.join(workdir, f"{name}-int8")
            ctranslate2_export.export(checkpoint.load(path, torch.device("cpu")), exported, quantization="int8")
            results["models"][name] = {
                "checkpoint": path,
                "layers": f"{config.model.encoder_layers}+{config.model.decoder_layers}",
                "d_model": config.model.d_model,
                "beam": beams.get(name, config.decode.beam_size),
                "checkpoint_mb": os.path.getsize(os.path.join(directory, checkpoint.MODEL_FILE)) / 2**20,
                "int8_export_mb": os.path.getsize(os.path.join(exported, "model.bin")) / 2**20,
                "training_minutes": training_minutes(path),
            }
            for engine in args.engines:
                load = ENGINES[engine]
                common = dict(src=args.src, lines=args.lines, single=args.single, torch_threads=args.threads)
                specs.append(
                    dict(
                        name=f"{name} | {engine}",
                        path=exported if "CTranslate2" in engine else path,
                        load={**load, "threads": args.threads} if "CTranslate2" in engine else load,
                        beam=beams.get(name, config.decode.beam_size),
                        out=os.path.join(workdir, f"{name}-{engine}.txt".replace(" ", "_")),
                        **common,
                    )
                )
        rows = take_turns(specs, args.rounds, TASKS)
        for spec in specs:
            row = rows[spec["name"]]
            row.update(score(read_lines(spec["out"]), refs, ("bleu", "chrf")))
            model, engine = spec["name"].split(" | ")
            results["models"][model][engine] = {k: v for k, v in row.items() if k != "signature"}
    print(table(results, args.engines))
    if args.json:
        write_json(args.json, results)


def table(results: dict, engines: list[str]) -> str:
    header = ["model", "layers, d_model, beam", "BLEU", "chrF", "checkpoint MB", "int8 export MB", "training min"]
    rows = []
    for name, m in results["models"].items():
        d = m[engines[0]]  # BLEU and chrF of the first engine timed (the default engine unless --engines)
        minutes = f"{m['training_minutes']:.0f}" if m["training_minutes"] else ""
        rows.append([name, f"{m['layers']}, {m['d_model']}, {m['beam']}", f"{d['bleu']:.2f}", f"{d['chrf']:.2f}",
                     f"{m['checkpoint_mb']:.1f}", f"{m['int8_export_mb']:.1f}", minutes])  # fmt: skip
    first = next(iter(results["models"]))
    speeds = []
    for name, m in results["models"].items():
        cells = []
        for engine in engines:
            e, base = m[engine], results["models"][first][engine]
            one, whole = 1000 / e["single_ms"], e["whole"]
            ratio = ""
            if name != first:
                ratio = f" ({base['single_ms'] / e['single_ms']:.2f}x / {whole / base['whole']:.2f}x)"
            cells.append(f"{one:.0f} / {whole:.0f}{ratio}; {e['bleu']:.2f}")
        speeds.append([name, *cells])
    caption = f"sentences/s, one line at a time / all in one call (x: against {first}); BLEU"
    models = results["models"].values()
    engines_used = {f"{k}: {v['engine']}" for m in models for k, v in m.items() if isinstance(v, dict)}
    parts = [markdown_table(header, rows), "", caption, "", markdown_table(["model", *engines], speeds), ""]
    return "\n".join(parts + sorted(engines_used))


if __name__ == "__main__":
    main()
