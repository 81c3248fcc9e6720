#!/usr/bin/env python3
"""Our PyTorch engine and CTranslate2 side by side in one process, on one checkpoint.

For each precision pair (fp32 against CTranslate2's float32, int8 against its int8): one
sentence at a time (median ms), calls of 1, 8, 32 and 256 lines (sentences/s), and all lines
in one call, the two engines taking turns (ours first in odd rounds, CTranslate2 first in even
ones; the best round of each counts). With --ref, BLEU of each engine's whole-call output. Then
the decoder's step against its bound: the time of one decoding step of 4 rows (a sentence's
beam of 4) against the bytes of the weights it reads divided by this host's memory bandwidth.

    python3 scripts/engine_bench.py --checkpoint runs/demo --src data/demo/test.en --ref data/demo/test.de
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch

from mt_transformer import checkpoint
from mt_transformer.data.special_tokens import BOS_ID, PAD_ID
from mt_transformer.data.text import read_lines
from mt_transformer.decoding.engine import restack
from mt_transformer.decoding.translator import load_translator
from mt_transformer.decoding.weights import PACK_FROM_ELEMENTS, prepared_linears
from mt_transformer.devices import autocast, cpu_model
from mt_transformer.evaluation.scores import score
from mt_transformer.exchange import ctranslate2_export
from mt_transformer.model.masks import padding_mask

PAIRS = {"fp32": "float32", "int8": "int8"}  # our --precision: CTranslate2's compute type
CALL_SIZES = (1, 8, 32, 256)


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


def measure(translate, lines: list[str], single: int) -> dict:
    row = {"single_ms": single_ms(translate, lines[:single])}
    for size in CALL_SIZES:
        row[f"calls_{size}"] = calls_per_s(translate, lines[: max(size * 4, min(len(lines), 256))], size)
    start = time.perf_counter()
    texts = [r[0].text for r in translate(lines)]
    row["whole"] = len(lines) / (time.perf_counter() - start)
    return row, texts


def best(rows: list[dict]) -> dict:
    """Per measurement, the best round: the lowest latency, the highest speeds."""
    return {k: (min if k == "single_ms" else max)(r[k] for r in rows) for k in rows[0]}


def memory_bandwidth() -> float:
    """Bytes/s of copying a 256 MB buffer (read + write), best of 5."""
    a, b = torch.empty(64 * 2**20), torch.empty(64 * 2**20)
    fastest = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        b.copy_(a)
        fastest = min(fastest, time.perf_counter() - start)
    return 2 * a.numel() * 4 / fastest


BYTES = {"fp32": 4, "int8": 1, "bf16": 2, "fp16": 2}


def step_weight_bytes(model, precision: str) -> int:
    """The bytes of the weights one decoding step reads: every decoder layer's matrices but the
    cross-attention's keys and values (projected once per sentence), and the output projection;
    in int8, the weights too small for it stay float32 (decoding/weights.py)."""
    linears = [model.output]
    for layer in model.decoder:
        linears += [layer.self_attn.q_proj, layer.self_attn.kv_proj, layer.self_attn.out_proj]
        linears += [layer.cross_attn.q_proj, layer.cross_attn.out_proj, layer.ffn.linear1, layer.ffn.linear2]
    total = 0
    for linear in linears:
        n = linear.weight.numel()
        total += n * (BYTES["fp32"] if precision == "int8" and n < PACK_FROM_ELEMENTS else BYTES[precision])
    return total


def step_time(model, precision: str, rows: int = 4, length: int = 20, repeats: int = 30) -> float:
    """Seconds per decoding step of `rows` rows (a sentence's beam), the output projection and
    softmax included: the median over `repeats` runs of `length` steps from the first position.
    `model`: an engine (decoding/engine.py) or a model (its own decode, for comparison)."""
    restack(model)
    src = torch.randint(4, 100, (1, 16))
    src_mask = padding_mask(src, PAD_ID)
    tokens = torch.full((rows, 1), 5)
    times = []
    with torch.inference_mode(), autocast(torch.device("cpu"), precision), prepared_linears(model, precision):
        memory = model.encode(src, src_mask)
        for _ in range(repeats):
            cache = model.new_cache()
            model.decode(torch.full((1, 1), BOS_ID), memory, src_mask, cache)
            cache.select(torch.zeros(rows, dtype=torch.long))
            start = time.perf_counter()
            for _ in range(length):
                model.logits(model.decode(tokens, None, src_mask, cache)[0]).log_softmax(-1)
            times.append((time.perf_counter() - start) / length)
    return statistics.median(times)


def step_bound(translator) -> dict:
    """The engine's step against reading its weights once at the host's memory bandwidth."""
    precision = translator.decode.precision
    step = step_time(translator.search.engine, precision)
    weight_bytes = step_weight_bytes(translator.model, precision)
    bound = weight_bytes / memory_bandwidth()
    return {"step_ms": 1000 * step, "weights_mb": weight_bytes / 1e6, "bound_ms": 1000 * bound, "x_bound": step / bound}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src", required=True, help="source lines (the first --lines are translated)")
    parser.add_argument("--ref", help="references for BLEU")
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--single", type=int, default=100, help="lines translated one at a time")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--precisions", nargs="+", default=list(PAIRS), choices=list(PAIRS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the results here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    lines = read_lines(args.src)[: args.lines]
    refs = read_lines(args.ref)[: args.lines] if args.ref else None
    results = {"cpu": cpu_model(), "torch": torch.__version__, "checkpoint": args.checkpoint, "beam": args.beam}
    print(f"{results['cpu']}, torch {torch.__version__}, {args.threads} threads, beam {args.beam}, {len(lines)} lines")
    with tempfile.TemporaryDirectory() as workdir:
        exported = os.path.join(workdir, "ct2")
        ctranslate2_export.export(checkpoint.load(args.checkpoint, torch.device("cpu")), exported)
        for precision in args.precisions:
            settings = dict(beam_size=args.beam, n_best=1)
            engines = {
                "ours": load_translator(args.checkpoint, "torch", "cpu", precision=precision, **settings),
                "ct2": load_translator(exported, "ctranslate2", "cpu", PAIRS[precision], args.threads, **settings),
            }
            rounds: dict[str, list] = {name: [] for name in engines}
            texts = {}
            for r in range(args.rounds):
                for name in list(engines) if r % 2 == 0 else list(engines)[::-1]:
                    row, texts[name] = measure(engines[name], lines, args.single)
                    rounds[name].append(row)
            for name, engine_rows in rounds.items():
                row = best(engine_rows)
                if refs:
                    row["bleu"] = score(texts[name], refs, ("bleu",))["bleu"]
                results[f"{name} {precision}"] = row
            results[f"equal lines {precision}"] = sum(a == b for a, b in zip(texts["ours"], texts["ct2"])) / len(lines)
            results[f"step {precision}"] = step_bound(engines["ours"])
    print(table(results, args.precisions))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def table(results: dict, precisions: list[str]) -> str:
    head = "| engine | 1 line, ms | calls of " + " | ".join(map(str, CALL_SIZES)) + " | all in one call | BLEU |"
    out = [head, "|---" * (head.count("|") - 1) + "|"]
    for precision in precisions:
        for name in ("ours", "ct2"):
            r = results[f"{name} {precision}"]
            label = f"ours {precision}" if name == "ours" else f"CTranslate2 {PAIRS[precision]}"
            speeds = " | ".join(f"{r[f'calls_{s}']:.0f}" for s in CALL_SIZES)
            bleu = f"{r['bleu']:.2f}" if "bleu" in r else ""
            out.append(f"| {label} | {r['single_ms']:.1f} | {speeds} | {r['whole']:.0f} | {bleu} |")
        ours, ct2 = results[f"ours {precision}"], results[f"ct2 {precision}"]
        ratios = " | ".join(f"{ours[f'calls_{s}'] / ct2[f'calls_{s}']:.2f}x" for s in CALL_SIZES)
        out.append(
            f"| ours / CTranslate2 | {ct2['single_ms'] / ours['single_ms']:.2f}x | {ratios} | "
            f"{ours['whole'] / ct2['whole']:.2f}x | equal lines {results[f'equal lines {precision}']:.1%} |"
        )
    steps = [
        f"{p}: step of 4 rows {s['step_ms']:.2f} ms, weights {s['weights_mb']:.1f} MB, bound {s['bound_ms']:.2f} ms "
        f"({s['x_bound']:.1f}x the bound)"
        for p in precisions
        for s in [results[f"step {p}"]]
    ]
    return "\n".join(out + [""] + steps)


if __name__ == "__main__":
    main()
