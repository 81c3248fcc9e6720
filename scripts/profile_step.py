#!/usr/bin/env python3
"""A config's training update in two or more precisions, through mt-train's own step.

    python3 scripts/profile_step.py --config configs/recipes/small_cpu.yaml [--set KEY=VALUE ...]
        [--precisions fp32 bf16] [--updates 10] [--rounds 3] [--profile] [--top 25]

Prepares the config's data as mt-train does (tokenizer and encoding cache in --workdir, reused
by later calls), builds the config's model once and gives each precision its own copy of the
same initial weights, with the config's optimizer, schedule, clipping and accumulation
(training/step.py). Each round runs the same batches in every precision, the precisions
alternating, and prints target tokens/s and the ratio to the first precision; host drift then
hits all precisions alike. --profile adds a torch.profiler table per precision (operators by
self time) over one more set of updates. --same-batch repeats the first update's batches
throughout: shapes then never change, so comparing with a run without it shows what new shapes
cost (kernel selection, oneDNN primitives created per shape) apart from the arithmetic.
--interleave runs every timed update in each precision in turn (the order reversed every other
update) and gives each round new batches: drift then cancels update by update, and every shape
is new, as in mt-train. Besides mt-train's precisions, `fp32-bf16mm` is fp32 training whose CPU
matrix products oneDNN may compute in bf16 (`torch.backends.mkldnn.matmul.fp32_precision`),
with no casts in the model.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import os

import torch

from measure import timed_updates
from mt_transformer.config import load_config
from mt_transformer.data.batching import batch_loader, lengths, token_batches
from mt_transformer.data.prepare import prepare_data
from mt_transformer.devices import PRECISIONS, select_device, slow_precision, use_fast_matmul
from mt_transformer.host import cpu_model
from mt_transformer.model.transformer import Transformer
from mt_transformer.training.state import TrainerState
from mt_transformer.training.step import TrainingStep, optimizer_for

# fp32 training whose CPU matrix products oneDNN may run in bf16 (torch 2.9 on; where the CPU has
# no bf16 units oneDNN keeps them in fp32)
IMPLICIT_BF16 = "fp32-bf16mm"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE")
    parser.add_argument(
        "--workdir", help="the tokenizer and encoded data, reused by later calls (default: runs/profile_step/CONFIG)"
    )
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=[*PRECISIONS, IMPLICIT_BF16])
    parser.add_argument("--updates", type=int, default=10, help="timed updates per precision and round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed updates per precision before the first round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="also profile each precision's updates by operator")
    parser.add_argument("--top", type=int, default=25, help="operators listed per profile")
    parser.add_argument("--same-batch", action="store_true", help="every update on the first update's batches")
    parser.add_argument(
        "--interleave", action="store_true", help="each update in every precision in turn; new batches every round"
    )
    args = parser.parse_args()
    if IMPLICIT_BF16 in args.precisions and not hasattr(torch.backends.mkldnn.matmul, "fp32_precision"):
        parser.error(f"{IMPLICIT_BF16} needs torch 2.9 or later (this is {torch.__version__})")
    return args


def build_steps(config, model, precisions: list[str], device: torch.device) -> dict[str, TrainingStep]:
    """One TrainingStep per precision, each over its own copy of `model`'s initial weights."""
    steps = {}
    for precision in precisions:
        train = dataclasses.replace(config.train, precision="fp32" if precision == IMPLICIT_BF16 else precision)
        copied = copy.deepcopy(model)
        optimizer, scheduler, scaler = optimizer_for(copied, train, config.model.d_model, device)
        steps[precision] = TrainingStep(copied, optimizer, scheduler, scaler, train, TrainerState(), device)
        copied.train()
    return steps


def epochs_of_batches(src_lens, tgt_lens, max_tokens: int, seed: int, needed: int) -> list:
    """The first `needed` batches of mt-train's epochs 0, 1, ... laid end to end."""
    batches, epoch = [], 0
    while len(batches) < needed:
        drawn = token_batches(src_lens, tgt_lens, max_tokens, seed=seed, epoch=epoch)
        if not drawn:
            raise SystemExit("the training data has no batches")
        batches += drawn
        epoch += 1
    return batches[:needed]


def update_groups(batches: list, accumulate: int, same_batch: bool) -> list[list]:
    """The batches in groups of `accumulate`, one group per update; with same_batch, the first
    group in every place."""
    groups = [batches[i : i + accumulate] for i in range(0, len(batches), accumulate)]
    return [groups[0]] * len(groups) if same_batch else groups


@contextlib.contextmanager
def matmul_precision(precision: str):
    """The fp32 matrix products of `precision` within: bf16 through oneDNN for IMPLICIT_BF16 (the
    setting restored on leaving), unchanged for the others."""
    if precision != IMPLICIT_BF16:
        yield
        return
    flags = torch.backends.mkldnn.matmul
    before = flags.fp32_precision
    flags.fp32_precision = "bf16"
    try:
        yield
    finally:
        flags.fp32_precision = before


def run_updates(step: TrainingStep, groups, device: torch.device, precision: str) -> tuple[float, int]:
    """(seconds, target tokens) of one update per group of batches, in `precision`'s products."""
    with matmul_precision(precision):
        return timed_updates(step, groups, device)


def run_interleaved(steps: dict[str, TrainingStep], groups, device: torch.device) -> dict[str, float]:
    """Target tokens/s of each precision over these updates, every update run in each precision in
    turn, the order reversed every other update."""
    seconds, tokens = dict.fromkeys(steps, 0.0), 0
    for i, group in enumerate(groups):
        for precision in list(steps) if i % 2 == 0 else list(steps)[::-1]:
            elapsed, tokens_of_group = run_updates(steps[precision], [group], device, precision)
            seconds[precision] += elapsed
        tokens += tokens_of_group
    return {precision: tokens / elapsed for precision, elapsed in seconds.items()}


def timed_rounds(args, steps: dict[str, TrainingStep], groups, device: torch.device) -> None:
    """Print a row per round: each precision's target tokens/s and its ratio to the first's."""
    print("| round | " + " | ".join(f"{p} tok/s" for p in args.precisions) + " | ratio to " + args.precisions[0] + " |")
    print("|---" * (len(args.precisions) + 2) + "|")
    for round_ in range(args.rounds):
        if args.interleave:
            rates = run_interleaved(steps, groups[round_ * args.updates : (round_ + 1) * args.updates], device)
        else:
            rates = {}
            for precision in args.precisions:
                seconds, tokens = run_updates(steps[precision], groups[: args.updates], device, precision)
                rates[precision] = tokens / seconds
        base = rates[args.precisions[0]]
        ratios = " / ".join(f"{rates[p] / base:.2f}" for p in args.precisions[1:]) or "-"
        print(f"| {round_ + 1} | " + " | ".join(f"{rates[p]:,.0f}" for p in args.precisions) + f" | {ratios} |")


def profile_table(step: TrainingStep, groups, device: torch.device, precision: str, top: int) -> str:
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as profiler:
        run_updates(step, groups, device, precision)
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    return profiler.key_averages().table(sort_by=key, row_limit=top)


def main() -> None:
    args = parse_args()
    config = load_config(args.config, args.set)
    train_config = config.train
    device = select_device(train_config.device)
    if train_config.threads:
        torch.set_num_threads(train_config.threads)
    use_fast_matmul(device)
    torch.manual_seed(train_config.seed)
    workdir = args.workdir or os.path.join("runs", "profile_step", os.path.splitext(os.path.basename(args.config))[0])
    tokenizer, encoded, _ = prepare_data(config.data, workdir, train_config.seed)
    train = encoded["train"]
    src_lens, tgt_lens = lengths(train)
    updates_timed = args.updates * (args.rounds if args.interleave else 1)
    needed = (args.warmup + updates_timed + args.updates * args.profile) * train_config.accumulate
    batches = epochs_of_batches(src_lens, tgt_lens, train_config.max_tokens, train_config.seed, needed)
    loader = batch_loader(train.select_columns(["src_ids", "tgt_ids"]), batches)
    groups = update_groups(list(loader), train_config.accumulate, args.same_batch)
    model = Transformer(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    steps = build_steps(config, model.to(device), args.precisions, device)

    processor = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    threads = torch.get_num_threads()
    print(f"{args.config} {' '.join(args.set)}: {processor}, {threads} threads, torch {torch.__version__}")
    for precision in args.precisions:
        if precision == IMPLICIT_BF16:
            if slow_precision(device, "bf16"):
                print(f"note: {cpu_model()} has no bf16 units: {IMPLICIT_BF16}'s matrix products stay in fp32 here")
        elif slow_precision(device, precision):
            print(f"note: {slow_precision(device, precision)}")
        run_updates(steps[precision], groups[: args.warmup], device, precision)
    print(
        f"{args.updates} updates of {train_config.accumulate} batch(es) of up to {train_config.max_tokens} "
        "tokens per precision and round"
        + (", every one on the same batches" if args.same_batch else "")
        + (", each update in every precision in turn, new batches every round" if args.interleave else "")
    )
    timed_rounds(args, steps, groups[args.warmup :], device)
    if args.profile:
        profiled = groups[args.warmup + updates_timed : args.warmup + updates_timed + args.updates]
        for precision in args.precisions:
            print(f"\n{precision}, {len(profiled)} updates:")
            print(profile_table(steps[precision], profiled, device, precision, args.top))


if __name__ == "__main__":
    main()
