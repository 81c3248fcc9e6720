"""The benchmark's report (`make bench`, scripts/benchmark.py): Markdown tables of the results,
MFU against the ceiling of the precision used, and each host's own page under docs/bench/."""

from __future__ import annotations

import os
import re

from measure import markdown_table
from mt_transformer.files import write_text


def search(beam: int) -> str:
    return "greedy" if beam == 1 else f"beam {beam}"


def markdown(results: dict) -> str:
    t, ceilings = results["training"], results["ceilings_gflops"]
    achieved = t["model_flops_per_s"] / 1e9
    ceiling = ceiling_for(results["precision"], ceilings)
    training = [["d256 3+3", f"{t['target_tokens_per_s']:,.0f}", f"{t['source_target_tokens_per_s']:,.0f}",
                 t["seconds_per_update"], f"{t['padding_fraction']:.1%}", f"{t['peak_memory_mb']:,.0f}",
                 f"{achieved:.1f}", f"{achieved / ceilings[ceiling]:.1%} of {ceiling}"]]  # fmt: skip
    header = ["training", "target tok/s", "src+tgt tok/s", "s/update", "padding", "peak MB", "model GFLOP/s", "MFU"]
    lengths = [[r["length"], r["sentences"], r["seconds_per_update"], f"{r['target_tokens_per_s']:,.0f}",
                f"{r['model_flops_per_s'] / 1e9:.1f}"] for r in results["lengths"]]  # fmt: skip
    lines = [
        f"machine: {results['machine']}  ",
        f"corpus: {results['corpus']}, {results['precision']}; translation model: {results['translation_model']}  ",
        "matrix-multiply ceilings measured: " + ", ".join(f"{n} {c:.0f} GFLOP/s" for n, c in ceilings.items()),
        "",
        markdown_table(header, training),
        "",
        markdown_table(["sentence length", "sentences", "s/update", "target tok/s", "model GFLOP/s"], lengths),
    ]
    translated = [r for r in results["translation"] + results["beams"] if r["sentences"]]
    if translated:
        rows = [[search(r["beam"]), r["max_tokens"], r["sentences"], r["sentences_per_s"], r["output_tokens_per_s"]]
                for r in translated]  # fmt: skip
        lines += ["", markdown_table(["translation", "max_tokens", "sentences", "sent/s", "output tok/s"], rows)]
    if results.get("paper_configs"):
        lines += ["", paper_configs_table(results["paper_configs"], ceilings)]
    if results.get("ctranslate2_error"):
        lines += ["", f"CTranslate2: {results['ctranslate2_error']}"]
    if results.get("ctranslate2"):
        header = ["CTranslate2", "search", "sent/s", "output tok/s", "greedy outputs equal to ours"]
        rows = [[r["compute_type"], search(r["beam"]), r["sentences_per_s"], r["output_tokens_per_s"],
                 format(r["greedy_equal_to_ours"], ".1%") if "greedy_equal_to_ours" in r else ""]
                for r in results["ctranslate2"]]  # fmt: skip
        lines += ["", markdown_table(header, rows)]
    return "\n".join(lines) + "\n"


def ceiling_for(precision: str, ceilings: dict) -> str:
    """The measured ceiling that a precision's matrix products run against: bf16's for bf16 and
    fp16, else the float32 one (TF32 on CUDA)."""
    return "bf16" if precision in ("bf16", "fp16") else next(n for n in ceilings if n != "bf16")


def paper_configs_table(rows: list[dict], ceilings: dict) -> str:
    """The base and big configs' speed, MFU against the measured ceiling of the matrix products
    each precision runs on (TF32 or fp32 for fp32, bf16 for bf16 and fp16)."""
    header = ["config", "precision", "torch.compile", "target tokens/update", "s/update", "target tok/s"]
    header += ["model TFLOP/s", "MFU", "peak MB"]
    cells = []
    for r in rows:
        name = ceiling_for(r["precision"], ceilings)
        achieved = r["model_flops_per_s"] / 1e9
        cells.append([r["config"], r["precision"], "yes" if r["compile"] else "no", f"{r['target_tokens']:,}",
                      r["seconds_per_update"], f"{r['target_tokens_per_s']:,.0f}", f"{achieved / 1000:.1f}",
                      f"{achieved / ceilings[name]:.1%} of {name}", f"{r['peak_memory_mb']:,.0f}"])  # fmt: skip
    return markdown_table(header, cells)


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
