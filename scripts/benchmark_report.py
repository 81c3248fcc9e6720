"""The benchmark's report (`make bench`, scripts/benchmark.py): Markdown tables of the results,
MFU against the ceiling of the precision used, and each host's own page under docs/bench/."""

from __future__ import annotations

import os
import re

import torch

from mt_transformer.devices import cpu_model
from mt_transformer.files import write_text


def machine(device: torch.device) -> str:
    gpu = f", GPU {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    return f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads{gpu}"


def markdown(results: dict) -> str:
    t, ceilings = results["training"], results["ceilings_gflops"]
    achieved = t["model_flops_per_s"] / 1e9
    ceiling = ceiling_for(results["precision"], ceilings)
    mfu = f"{achieved / ceilings[ceiling]:.1%} of {ceiling}"
    lines = [
        f"machine: {results['machine']}  ",
        f"corpus: {results['corpus']}, {results['precision']}; translation model: {results['translation_model']}  ",
        "matrix-multiply ceilings measured: " + ", ".join(f"{n} {c:.0f} GFLOP/s" for n, c in ceilings.items()),
        "",
        "| training | target tok/s | src+tgt tok/s | s/update | padding | peak MB | model GFLOP/s | MFU |",
        "|---|---|---|---|---|---|---|---|",
        f"| d256 3+3 | {t['target_tokens_per_s']:,.0f} | {t['source_target_tokens_per_s']:,.0f} | "
        f"{t['seconds_per_update']} | {t['padding_fraction']:.1%} | {t['peak_memory_mb']:,.0f} | "
        f"{t['model_flops_per_s'] / 1e9:.1f} | {mfu} |",
        "",
        "| sentence length | sentences | s/update | target tok/s | model GFLOP/s |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['length']} | {r['sentences']} | {r['seconds_per_update']} | {r['target_tokens_per_s']:,.0f} | "
        f"{r['model_flops_per_s'] / 1e9:.1f} |"
        for r in results["lengths"]
    ]
    translated = [r for r in results["translation"] + results["beams"] if r["sentences"]]
    if translated:
        lines += ["", "| translation | max_tokens | sentences | sent/s | output tok/s |", "|---|---|---|---|---|"]
    lines += [
        f"| {'greedy' if r['beam'] == 1 else 'beam ' + str(r['beam'])} | {r['max_tokens']} | {r['sentences']} | "
        f"{r['sentences_per_s']} | {r['output_tokens_per_s']} |"
        for r in translated
    ]
    if results.get("paper_configs"):
        lines += ["", paper_configs_table(results["paper_configs"], ceilings)]
    if results.get("ctranslate2_error"):
        lines += ["", f"CTranslate2: {results['ctranslate2_error']}"]
    if results.get("ctranslate2"):
        lines += [
            "",
            "| CTranslate2 | search | sent/s | output tok/s | greedy outputs equal to ours |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['compute_type']} | {'greedy' if r['beam'] == 1 else 'beam ' + str(r['beam'])} | "
            f"{r['sentences_per_s']} | {r['output_tokens_per_s']} | "
            f"{format(r['greedy_equal_to_ours'], '.1%') if 'greedy_equal_to_ours' in r else ''} |"
            for r in results["ctranslate2"]
        ]
    return "\n".join(lines) + "\n"


def ceiling_for(precision: str, ceilings: dict) -> str:
    """The measured ceiling that a precision's matrix products run against: bf16's for bf16 and
    fp16, else the float32 one (TF32 on CUDA)."""
    return "bf16" if precision in ("bf16", "fp16") else next(n for n in ceilings if n != "bf16")


def paper_configs_table(rows: list[dict], ceilings: dict) -> str:
    """The base and big configs' speed, MFU against the measured ceiling of the matrix products
    each precision runs on (TF32 or fp32 for fp32, bf16 for bf16 and fp16)."""
    lines = [
        "| config | precision | torch.compile | target tokens/update | s/update | target tok/s | "
        "model TFLOP/s | MFU | peak MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = ceiling_for(r["precision"], ceilings)
        achieved = r["model_flops_per_s"] / 1e9
        lines.append(
            f"| {r['config']} | {r['precision']} | {'yes' if r['compile'] else 'no'} | {r['target_tokens']:,} | "
            f"{r['seconds_per_update']} | {r['target_tokens_per_s']:,.0f} | {achieved / 1000:.1f} | "
            f"{achieved / ceilings[name]:.1%} of {name} | {r['peak_memory_mb']:,.0f} |"
        )
    return "\n".join(lines)


def machine_page(directory: str, device: str) -> str:
    """The page of one machine's `make bench` numbers: DIRECTORY/cpu-amd-epyc-family-25-model-17.md."""
    return os.path.join(directory, re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-") + ".md")


def write_section(path: str, device: str, text: str) -> None:
    """Replace this machine's section of its page (between its two markers, named by the device
    kind and the processor), or add it: each host keeps its own numbers."""
    begin, end = f"<!-- make bench: {device} -->", f"<!-- /make bench: {device} -->"
    page = open(path, encoding="utf-8").read() if os.path.isfile(path) else f"# make bench: {device}\n"
    block = f"{begin}\n{text}{end}"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    page = pattern.sub(lambda _: block, page) if pattern.search(page) else page.rstrip("\n") + "\n\n" + block + "\n"

    write_text(path, page)
