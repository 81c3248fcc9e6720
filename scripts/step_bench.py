#!/usr/bin/env python3
"""Our engine's decoding step against its bound: the time of one step of 4 rows (a sentence's
beam of 4), output projection and softmax included, against the bytes of the weights it reads
divided by this host's memory bandwidth, per precision.

    python3 scripts/step_bench.py --checkpoint runs/demo [--precisions fp32 bf16] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics

import torch

from measure import machine, machine_line, timed, write_json
from mt_transformer.decoding.engines import open_translator
from mt_transformer.devices import autocast
from mt_transformer.model.masks import padding_mask
from mt_transformer.special_tokens import BOS_ID, PAD_ID


def memory_bandwidth() -> float:
    """Bytes/s of copying a 256 MB buffer (read + write), best of 5."""
    a, b = torch.empty(64 * 2**20), torch.empty(64 * 2**20)
    fastest = min(timed(b.copy_, a)[1] for _ in range(5))
    return 2 * a.numel() * 4 / fastest


def step_weight_bytes(model) -> int:
    """The bytes of the weights one decoding step reads: every decoder layer's matrices but the
    cross-attention's keys and values (projected once per sentence), and the output projection."""
    linears = [model.output]
    for layer in model.decoder:
        linears += [layer.self_attn.q_proj, layer.self_attn.kv_proj, layer.self_attn.out_proj]
        linears += [layer.cross_attn.q_proj, layer.cross_attn.out_proj, layer.ffn.linear1, layer.ffn.linear2]
    return sum(linear.weight.numel() * linear.weight.element_size() for linear in linears)


def step_time(model, precision: str, rows: int = 4, length: int = 20, repeats: int = 30) -> float:
    """Seconds per decoding step of `rows` rows (a sentence's beam), the output projection and
    softmax included: the median over `repeats` runs of `length` steps from the first position."""
    src = torch.randint(4, 100, (1, 16))
    src_mask = padding_mask(src, PAD_ID)
    tokens = torch.full((rows, 1), 5)
    times = []
    with torch.inference_mode(), autocast(torch.device("cpu"), precision):
        memory = model.encode(src, src_mask)
        for _ in range(repeats):
            cache = model.new_cache()
            model.decode(torch.full((1, 1), BOS_ID), memory, src_mask, cache)
            cache.select(torch.zeros(rows, dtype=torch.long))
            times.append(timed(steps, model, tokens, src_mask, cache, length)[1] / length)
    return statistics.median(times)


def steps(model, tokens, src_mask, cache, length: int) -> None:
    for _ in range(length):
        model.logits(model.decode(tokens, None, src_mask, cache)[0]).log_softmax(-1)


def step_bound(translator, repeats: int = 30) -> dict:
    """The search's step against reading its weights once at the host's memory bandwidth."""
    model = translator.search.runnable()  # the model as the searches run it at this precision
    step = step_time(model, translator.runtime.precision, repeats=repeats)
    weight_bytes = step_weight_bytes(model)
    bound = weight_bytes / memory_bandwidth()
    return {"step_ms": 1000 * step, "weights_mb": weight_bytes / 1e6, "bound_ms": 1000 * bound, "x_bound": step / bound}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30, help="runs of 20 steps; the median counts")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = machine()
    print(machine_line())
    for precision in args.precisions:
        translator = open_translator(args.checkpoint, "torch", "cpu", precision=precision)
        s = results[precision] = step_bound(translator, args.repeats)
        print(
            f"{precision}: step of 4 rows {s['step_ms']:.2f} ms, weights {s['weights_mb']:.1f} MB, "
            f"bound {s['bound_ms']:.2f} ms ({s['x_bound']:.1f}x the bound)"
        )
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
