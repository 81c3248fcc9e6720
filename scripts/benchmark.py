#!/usr/bin/env python3
"""Training and translation speed on whatever device is present (`make bench`).

Training: steady-state target tokens/s and source+target tokens/s (the first updates are
excluded), seconds per update, the padding fraction of the batches, peak memory, and model
FLOPs utilisation (flops.py's count over the measured matrix-multiply ceilings of the device).
Translation: greedy and beam-4 sentences/s and output tokens/s at two batch sizes.
How cost grows: time per update against sentence length (16 to 512 at a fixed token budget),
and translation time against beam size (1, 2, 4, 8, 16).
CTranslate2 (when installed and a trained checkpoint is given): the same model exported, its
fp32 and int8 speed, and how many greedy outputs equal ours.

Model: the peers' size (d_model 256, 3+3 layers, 4 heads, d_ff 1024, pre-norm, shared 8k
vocabulary) on the German->English files train.de/train.en/valid.* of the directory that
$MT_BENCH_CORPUS names (Multi30k in docs/benchmarks.md), else on the generated demo corpus
(said in the output). Prints Markdown tables and replaces this device's section of its page
under docs/bench/ (--markdown); --json PATH also writes the numbers. The measurements live in
benchmark_training.py and benchmark_translation.py, the tables in benchmark_report.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile

import torch

from benchmark_report import machine_page, markdown, write_section
from benchmark_training import (
    MODEL,
    PEERS_CONFIG,
    bench_lengths,
    bench_paper_configs,
    bench_training,
    matmul_ceiling,
    precision_name,
)
from benchmark_translation import bench_translations
from measure import machine_line, write_json
from mt_transformer import checkpoint
from mt_transformer.config import Config, DataConfig, load_config
from mt_transformer.data.demo_data import generate
from mt_transformer.data.prepare import prepare_data
from mt_transformer.decoding.translator import with_decode
from mt_transformer.devices import PRECISIONS, use_fast_matmul
from mt_transformer.host import cpu_model
from mt_transformer.model.transformer import Transformer
from mt_transformer.training.precision import choose_precision, first_batches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def corpus(workdir: str) -> tuple[DataConfig, str]:
    """The peers' data settings (configs/bench/peers.yaml) on $MT_BENCH_CORPUS, else on a generated
    English->German corpus."""
    peers = load_config(PEERS_CONFIG).data
    directory = os.environ.get("MT_BENCH_CORPUS")
    if directory:
        if not os.path.isfile(os.path.join(directory, "train.de")):
            raise SystemExit(f"MT_BENCH_CORPUS: no train.de in {directory}")
        name = os.path.basename(os.path.normpath(directory))
        return dataclasses.replace(peers, train=f"{directory}/train", valid=f"{directory}/valid"), name
    generate(os.path.join(workdir, "demo"), train=30000, valid=1000, test=10)
    data = dataclasses.replace(
        peers, src_lang="en", tgt_lang="de", train=f"{workdir}/demo/train", valid=f"{workdir}/demo/valid"
    )
    return dataclasses.replace(data, vocab_size=1000), "generated demo corpus (no MT_BENCH_CORPUS)"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--markdown",
        default=os.path.join(ROOT, "docs", "bench"),
        help="replace this device's section of its page in this directory, or of this .md file ('' for none)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--precision",
        default="fp32",
        choices=["auto", *PRECISIONS],
        help="of the training updates and the translations; auto: what mt-train would choose here",
    )
    parser.add_argument("--updates", type=int, default=30, help="timed training updates")
    parser.add_argument("--sentences", type=int, default=1000, help="sentences translated per setting")
    parser.add_argument(
        "--checkpoint",
        help="time translation with this trained run or checkpoint "
        "(default: the freshly initialised model, whose outputs run to the length limit)",
    )
    parser.add_argument(
        "--paper-configs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bf16 MFU of the base and big configs with and without torch.compile (default: on CUDA only)",
    )
    parser.add_argument("--paper-tokens", type=int, default=16384, help="target tokens per update for --paper-configs")
    parser.add_argument("--paper-updates", type=int, default=10, help="timed updates for --paper-configs")
    parser.add_argument("--no-compile", action="store_true", help="--paper-configs without the torch.compile runs")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    use_fast_matmul(device)  # fp32 on CUDA is TF32, as in mt-train
    torch.manual_seed(1)

    with tempfile.TemporaryDirectory() as workdir:
        data, corpus_name = corpus(workdir)
        tokenizer, encoded, _ = prepare_data(data, workdir, seed=1)
        model = Transformer(MODEL, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint).to(device)
        if args.precision == "auto":
            args.precision, why = choose_precision(
                "auto", device, model, lambda: first_batches(encoded["train"], 4096, seed=1)
            )
            print(f"precision: {args.precision} ({why})")
        ceilings = {
            ("tf32" if precision_name(device, "fp32") != "fp32" else "fp32"): matmul_ceiling(device, torch.float32)
            / 1e9,
            "bf16": matmul_ceiling(device, torch.bfloat16) / 1e9,
        }
        results = {
            "machine": machine_line(device),
            "corpus": corpus_name,
            "precision": precision_name(device, args.precision),
            "ceilings_gflops": {k: round(v, 1) for k, v in ceilings.items()},
            "training": bench_training(model, encoded["train"], device, args.precision, 4096, 5, args.updates),
            "lengths": bench_lengths(model, device, args.precision, tokenizer.tgt_vocab_size),
        }
        lines = encoded["valid"]["src"][: args.sentences]
        loaded = checkpoint.load(args.checkpoint, device) if args.checkpoint else None
        if loaded is not None:
            model, tokenizer, config = loaded.model, loaded.tokenizer, loaded.config
        else:
            config = Config(data=data, model=MODEL)
        config = with_decode(config, precision=args.precision)  # translation in the precision trained in
        results["translation_model"] = args.checkpoint or "untrained (outputs run to the length limit)"
        results.update(bench_translations(model, tokenizer, config, lines, device, loaded, workdir))

        if args.paper_configs or (args.paper_configs is None and device.type == "cuda"):
            compiled = (False,) if args.no_compile else (False, True)
            runs = [(name, "bf16", c) for name in ("base", "big") for c in compiled]
            results["paper_configs"] = bench_paper_configs(device, args.paper_tokens, args.paper_updates, runs)

    text = markdown(results)
    print(text)
    if args.markdown:
        processor = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
        kind = f"{device.type}, {processor}"
        write_section(args.markdown if args.markdown.endswith(".md") else machine_page(args.markdown, kind), kind, text)
    if args.json:
        write_json(args.json, results)


if __name__ == "__main__":
    main()
