#!/usr/bin/env python3
"""Training and translation speed on whatever device is present (`make bench`).

Training: steady-state target tokens/s and source+target tokens/s (the first updates are
excluded), seconds per update, the padding fraction of the batches and peak memory.
Translation: greedy and beam-4 sentences/s and output tokens/s.

Model: the peers' size (d_model 256, 3+3 layers, 4 heads, d_ff 1024, shared 8k vocabulary)
on ../shared/corpora/multi30k-de-en when present, else on the generated demo corpus (said in
the output). Prints a Markdown table; --json PATH also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from mt_transformer.batching import batch_loader, token_batches  # noqa: E402
from mt_transformer.config import DataConfig  # noqa: E402
from mt_transformer.demo_data import generate  # noqa: E402
from mt_transformer.model import Transformer  # noqa: E402
from mt_transformer.prepare import prepare_data  # noqa: E402
from mt_transformer.schedule import noam_scheduler  # noqa: E402
from mt_transformer.train import PRECISIONS, training_loss  # noqa: E402
from mt_transformer.translate import load_translator, translate_lines  # noqa: E402

MULTI30K = os.path.join(ROOT, "..", "shared", "corpora", "multi30k-de-en")


def corpus(workdir: str) -> tuple[DataConfig, str]:
    if os.path.isfile(os.path.join(MULTI30K, "train.de")):
        return DataConfig(src_lang="de", tgt_lang="en", train=f"{MULTI30K}/train", valid=f"{MULTI30K}/valid",
                          vocab_size=8000, max_len=128), "multi30k-de-en"
    generate(os.path.join(workdir, "demo"), train=30000, valid=1000, test=10)
    return DataConfig(src_lang="en", tgt_lang="de", train=f"{workdir}/demo/train", valid=f"{workdir}/demo/valid",
                      vocab_size=1000, spm_type="bpe", max_len=128), "generated demo corpus (multi30k not found)"


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def bench_training(model, dataset, device, precision: str, max_tokens: int, warmup_updates: int, updates: int):
    src_lens, tgt_lens = np.asarray(dataset["src_len"]), np.asarray(dataset["tgt_len"])
    batches = token_batches(src_lens, tgt_lens, max_tokens, seed=1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9, fused=device.type == "cuda")
    scheduler = noam_scheduler(optimizer, 256, 4000)
    autocast = torch.autocast(device.type, dtype=PRECISIONS[precision], enabled=precision != "fp32")
    model.train()
    real = padded = target = source = 0
    start = None
    loader = batch_loader(dataset.select_columns(["src_ids", "tgt_ids"]), batches[: warmup_updates + updates])
    for i, batch in enumerate(loader):
        if i == warmup_updates:
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
        batch = batch.to(device)
        loss = training_loss(model, batch, 0.1, autocast, PRECISIONS[precision]) / batch.target_tokens
        loss.backward()
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= warmup_updates:
            target += batch.target_tokens
            source += int((batch.src != 0).sum())
            real += int((batch.src != 0).sum() + (batch.tgt_out != 0).sum())
            padded += batch.src.numel() + batch.tgt_out.numel()
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    return {"target_tokens_per_s": round(target / seconds, 1),
            "source_target_tokens_per_s": round((source + target) / seconds, 1),
            "seconds_per_update": round(seconds / updates, 4), "padding_fraction": round(1 - real / padded, 4),
            "updates_timed": updates, "peak_memory_mb": round(peak_memory_mb(device), 1)}


def bench_translation(model, tokenizer, lines: list[str], device, beam: int, max_tokens: int):
    start = time.perf_counter()
    results = translate_lines(model, tokenizer, lines, device, beam_size=beam, max_tokens=max_tokens)
    seconds = time.perf_counter() - start
    tokens = sum(len(r[0].tokens) + 1 for r in results)
    return {"beam": beam, "max_tokens": max_tokens, "sentences_per_s": round(len(lines) / seconds, 1),
            "output_tokens_per_s": round(tokens / seconds, 1)}


def machine(device: torch.device) -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = f", GPU {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads{gpu}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", default="fp32", choices=list(PRECISIONS))
    parser.add_argument("--updates", type=int, default=30, help="timed training updates")
    parser.add_argument("--sentences", type=int, default=1000, help="sentences translated per setting")
    parser.add_argument("--checkpoint", help="time translation with this trained run or checkpoint "
                                             "(default: the freshly initialised model, whose outputs run to the length limit)")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(1)

    with tempfile.TemporaryDirectory() as workdir:
        data, corpus_name = corpus(workdir)
        tokenizer, encoded = prepare_data(data, workdir, seed=1)
        model = Transformer(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, d_model=256, n_heads=4, d_ff=1024,
                            encoder_layers=3, decoder_layers=3, dropout=0.1).to(device)
        results = {"machine": machine(device), "corpus": corpus_name, "precision": args.precision,
                   "training": bench_training(model, encoded["train"], device, args.precision, 4096, 5, args.updates)}
        lines = list(encoded["valid"]["src"])[: args.sentences]
        if args.checkpoint:
            model, tokenizer, _ = load_translator(args.checkpoint, device)
            results["translation_model"] = args.checkpoint
        else:
            results["translation_model"] = "untrained (outputs run to the length limit)"
        model.eval()
        results["translation"] = [bench_translation(model, tokenizer, lines, device, beam, max_tokens)
                                  for beam in (1, 4) for max_tokens in (2048, 8192)]

    t = results["training"]
    print(f"machine: {results['machine']}\ncorpus: {results['corpus']}, {args.precision}; "
          f"translation model: {results['translation_model']}\n")
    print("| training | target tok/s | src+tgt tok/s | s/update | padding | peak MB |\n|---|---|---|---|---|---|")
    print(f"| d256 3+3 | {t['target_tokens_per_s']} | {t['source_target_tokens_per_s']} | {t['seconds_per_update']} "
          f"| {t['padding_fraction']:.1%} | {t['peak_memory_mb']} |\n")
    print("| translation | max_tokens | sent/s | output tok/s |\n|---|---|---|---|")
    for r in results["translation"]:
        print(f"| {'greedy' if r['beam'] == 1 else 'beam ' + str(r['beam'])} | {r['max_tokens']} | "
              f"{r['sentences_per_s']} | {r['output_tokens_per_s']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
