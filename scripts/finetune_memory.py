#!/usr/bin/env python3
"""Fine-tuning an NLLB-shaped model: peak memory and tokens/s of mt-train's own update
(training/step.py) per memory option, each option in a process of its own, on random weights of
the real shapes (the hub's weights are not needed for memory and speed) and random batches.

    python3 scripts/finetune_memory.py [--shape 600M] [--options full lora checkpoint ...]
        [--sentences 16 --length 32] [--steps 3] [--json out.json]

Options: full (fp32 weights, gradients and Adam state), checkpoint (train.checkpoint_activations),
bf16 (train.weights_dtype bf16 with train.precision bf16), lora (train.lora rank 16 on every
attention projection), their combinations, and fsdp (train.distributed: fsdp, 2 processes under
torchrun, each with its own batch). Each row also states the bytes of weights, gradients and
optimizer state a process keeps, counted from its parameters (its shards), and the peak RSS of
its largest process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import torch

from measure import machine_line, markdown_table, peak_memory_mb, run_process, timed_updates, write_json
from mt_transformer.config import ModelConfig, TrainConfig
from mt_transformer.data.batching import Batch
from mt_transformer.model import lora
from mt_transformer.model.transformer import Transformer
from mt_transformer.processes import from_environment
from mt_transformer.special_tokens import BOS_ID, EOS_ID
from mt_transformer.training import distributed
from mt_transformer.training.bf16_adam import to_bf16_matrices
from mt_transformer.training.state import TrainerState
from mt_transformer.training.step import TrainingStep, optimizer_for

# facebook/nllb-200-*: d_model, encoder and decoder layers, FFN width; 16 heads, 256,206 pieces
SHAPES = {"600M": (1024, 12, 4096), "1.3B": (1024, 24, 8192), "3.3B": (2048, 24, 8192), "tiny": (32, 1, 64)}
VOCAB = 256_206
OPTIONS = ("full", "checkpoint", "bf16", "lora", "lora+checkpoint", "lora+bf16", "lora+bf16+checkpoint", "fsdp")
PROCESSES = 2  # fsdp's, under torchrun, each on one thread and its own batch of --sentences
LORA = {"rank": 16, "alpha": 32.0, "targets": ("q_proj", "kv_proj", "out_proj")}


def nllb_model(shape: str, vocab: int) -> Transformer:
    d_model, layers, d_ff = SHAPES[shape]
    config = ModelConfig(
        d_model=d_model, n_heads=16, d_ff=d_ff, encoder_layers=layers, decoder_layers=layers, max_positions=1026
    )
    return Transformer(config, vocab, vocab, share_vocab=True)


def state_bytes(model) -> dict:
    """What the option keeps between updates: weights, gradients of the trained parameters, and
    Adam's two moments of each (fp32), in bytes."""

    def numel(p):  # this process's shard of a sharded parameter
        return p.to_local().numel() if hasattr(p, "to_local") else p.numel()

    weights = sum(numel(p) * p.element_size() for p in model.parameters())
    trained = [p for p in model.parameters() if p.requires_grad]
    grads = sum(numel(p) * p.element_size() for p in trained)
    return {"weights": weights, "gradients": grads, "optimizer": sum(8 * numel(p) for p in trained)}


def child(args) -> None:
    """One option in this process: build, update `steps` times after one warm-up update, and
    write the measurements to args.out."""
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    processes = from_environment()
    device = torch.device("cpu" if args.device == "cpu" else f"cuda:{processes.local_rank}")
    with device:  # made where it trains: a 3.3B model's 13 GB never pass through the CPU
        model = nllb_model(args.shape, args.vocab)
    if "lora" in args.option:
        lora.add_adapters(model, LORA["rank"], LORA["alpha"], LORA["targets"])
    model.checkpoint_activations = "checkpoint" in args.option
    model.train()
    bf16 = "bf16" in args.option
    if bf16:
        to_bf16_matrices(model)
    train = TrainConfig(precision="bf16" if bf16 else "fp32", weights_dtype="bf16" if bf16 else "fp32")
    distributed.init_group(processes, device)
    forward, ddp = distributed.wrap_for_processes(model, device, processes, False, sharded=args.option == "fsdp")
    optimizer, scheduler, scaler = optimizer_for(model, train, model.output.in_features, device)
    state = TrainerState()
    step = TrainingStep(model, optimizer, scheduler, scaler, train, state, device, forward, ddp, processes)
    generator = torch.Generator().manual_seed(1 + processes.rank)

    def batch() -> Batch:
        shape = (args.sentences, args.length)
        src, tgt = (torch.randint(4, args.vocab, shape, generator=generator) for _ in range(2))
        src[:, -1] = EOS_ID
        tgt_in = torch.cat([torch.full((args.sentences, 1), BOS_ID), tgt[:, :-1]], 1)
        return Batch(src, tgt_in, torch.cat([tgt[:, :-1], torch.full((args.sentences, 1), EOS_ID)], 1))

    timed_updates(step, [[batch()]], device)  # the warm-up
    seconds = timed_updates(step, [[batch()] for _ in range(args.steps)], device)[0] / args.steps
    peak = peak_memory_mb(device)  # MiB: the process's peak RSS; on a GPU, its memory
    result = {
        "option": args.option,
        "parameters": sum(p.numel() for p in model.parameters()),
        "trained": sum(p.numel() for p in model.parameters() if p.requires_grad),
        **state_bytes(model),
        "tokens_per_s": processes.world_size * args.sentences * args.length / seconds,
        "processes": processes.world_size,  # the peak below: the largest process's
        "own_peak_mb": max(distributed.all_gather(peak)),
        "device": str(device.type),
    }
    distributed.destroy_group()
    if processes.is_main:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f)


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=list(SHAPES), default="600M")
    parser.add_argument("--options", nargs="+", choices=OPTIONS, default=list(OPTIONS))
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--length", type=int, default=32, help="source and target tokens of each sentence")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--vocab", type=int, default=VOCAB)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: GPU memory is the peak")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json")
    parser.add_argument("--option", help=argparse.SUPPRESS)  # the child process's
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.option:
        return child(args)
    print(f"{machine_line(args.device)}; NLLB {args.shape} shape, {args.sentences} x {args.length} tokens an update")
    rows, results = [], []
    for option in args.options:
        with tempfile.TemporaryDirectory() as scratch:
            out = os.path.join(scratch, "result.json")
            settings = ["--shape", args.shape, "--sentences", str(args.sentences), "--length", str(args.length)]
            settings += [
                "--device",
                args.device,
                "--steps",
                str(args.steps),
                "--vocab",
                str(args.vocab),
                "--threads",
                str(args.threads),
                "--option",
                option,
                "--out",
                out,
            ]
            command = [sys.executable, os.path.abspath(__file__), *settings]
            if option == "fsdp":
                command[1:1] = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(PROCESSES)]
                command += ["--threads", str(max(args.threads // PROCESSES, 1))]
            run_process(command)
            with open(out, encoding="utf-8") as f:
                result = json.load(f)
        results.append(result)
        gb = {k: f"{result[k] / 1e9:.2f}" for k in ("weights", "gradients", "optimizer")}
        share = f"{result['own_peak_mb'] / results[0]['own_peak_mb']:.0%}"
        rows.append(
            [option, f"{result['trained']:,}", gb["weights"], gb["gradients"], gb["optimizer"]]
            + [f"{result['own_peak_mb'] / 1024:.2f}", share, f"{result['tokens_per_s']:.0f}"]
        )
    header = [
        "option",
        "trained",
        "weights GB",
        "gradients GB",
        "Adam GB",
        "peak GPU memory GiB (a process)" if args.device == "cuda" else "peak RSS GiB (a process)",
        "of the first",
        "tokens/s",
    ]
    print(markdown_table(header, rows))
    if args.json:
        write_json(args.json, {"machine": machine_line(args.device), "shape": args.shape, "results": results})
    return results


if __name__ == "__main__":
    main()
