"""The benchmark's training measurements (`make bench`, scripts/benchmark.py): steady-state
training speed through mt-train's own update, time per update against sentence length, the
paper's base and big configs, and the matrix-multiply ceilings that MFU is measured against."""

from __future__ import annotations

import os
import time

import numpy as np
import torch

from measure import peak_memory_mb, reset_peak_memory, synchronize, timed_updates
from mt_transformer.config import TrainConfig, load_config
from mt_transformer.data.batching import Batch, batch_loader, token_batches
from mt_transformer.model.flops import training_flops
from mt_transformer.model.transformer import Transformer
from mt_transformer.training.state import TrainerState
from mt_transformer.training.step import TrainingStep, optimizer_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PEERS_CONFIG = os.path.join(ROOT, "configs", "bench", "peers.yaml")
# the peers' model (configs/bench/peers.yaml), which make bench trains and translates with
MODEL = load_config(PEERS_CONFIG).model


def precision_name(device: torch.device, precision: str) -> str:
    """What a precision setting computes in: fp32 on CUDA is TF32 in the matrix products."""
    if precision == "fp32" and device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        return "fp32 (TF32 matmuls)"
    return precision


def matmul_ceiling(device: torch.device, dtype: torch.dtype) -> float:
    """The best measured FLOP/s of square and model-shaped matrix products in this dtype."""
    shapes = (
        [(2048, 2048, 2048), (4096, 256, 1024), (4096, 1024, 256)]
        if device.type == "cpu"
        else [(8192, 8192, 8192), (16384, 4096, 4096)]
    )
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        a @ b
        synchronize(device)
        repeats, start = 0, time.perf_counter()
        while time.perf_counter() - start < 1.0 or repeats < 2:
            a @ b
            synchronize(device) if repeats % 8 == 7 else None
            repeats += 1
        synchronize(device)
        best = max(best, 2 * m * k * n * repeats / (time.perf_counter() - start))
    return best


def training_step(model, device: torch.device, precision: str, forward=None) -> TrainingStep:
    """mt-train's own update (training/step.py) for `model` with the default train settings in
    `precision`: Adam with the Noam schedule, gradient scaling for fp16, the non-finite check."""
    train = TrainConfig(precision=precision)
    optimizer, scheduler, scaler = optimizer_for(model, train, model.output.in_features, device)
    return TrainingStep(model, optimizer, scheduler, scaler, train, TrainerState(), device, forward)


def batch_flops(batch, vocab: int) -> int:
    src_lens, tgt_lens = (batch.src != 0).sum(1).tolist(), (batch.tgt_out != 0).sum(1).tolist()
    return training_flops(
        src_lens, tgt_lens, MODEL.d_model, MODEL.d_ff, MODEL.encoder_layers, MODEL.decoder_layers, vocab
    )


def bench_training(model, dataset, device, precision: str, max_tokens: int, warmup_updates: int, updates: int):
    src_lens, tgt_lens = np.asarray(dataset["src_len"]), np.asarray(dataset["tgt_len"])
    batches = token_batches(src_lens, tgt_lens, max_tokens, seed=1)
    reset_peak_memory(device)
    step = training_step(model, device, precision)
    vocab = model.output.out_features
    model.train()
    real = padded = target = source = flops = 0
    start = None
    loader = batch_loader(dataset.select_columns(["src_ids", "tgt_ids"]), batches[: warmup_updates + updates])
    for i, batch in enumerate(loader):
        if i == warmup_updates:
            synchronize(device)
            start = time.perf_counter()
        step([batch])
        if i >= warmup_updates:
            target += batch.target_tokens
            source += int((batch.src != 0).sum())
            real += int((batch.src != 0).sum() + (batch.tgt_out != 0).sum())
            padded += batch.src.numel() + batch.tgt_out.numel()
            flops += batch_flops(batch, vocab)
    synchronize(device)
    seconds = time.perf_counter() - start
    return {
        "target_tokens_per_s": round(target / seconds, 1),
        "source_target_tokens_per_s": round((source + target) / seconds, 1),
        "seconds_per_update": round(seconds / updates, 4),
        "padding_fraction": round(1 - real / padded, 4),
        "updates_timed": updates,
        "peak_memory_mb": round(peak_memory_mb(device), 1),
        "model_flops_per_s": round(flops / seconds),
    }


def random_batch(vocab: int, sentences: int, length: int, generator, device):
    """Sentences of `length` random tokens, the same ones as source and target."""

    ids = torch.randint(4, vocab, (sentences, length + 1), generator=generator)
    return Batch(src=ids[:, 1:], tgt_in=ids[:, :-1], tgt_out=ids[:, 1:]).to(device)


def seconds_per_update(step, batch, device, warmups: int, updates: int) -> float:
    timed_updates(step, [[batch]] * warmups, device)
    return timed_updates(step, [[batch]] * updates, device)[0] / updates


def bench_lengths(model, device, precision: str, vocab: int, budget: int = 4096, updates: int = 3):
    """Seconds per update of `budget` target tokens in sentences of one length (sources as long)."""

    step = training_step(model, device, precision)
    model.train()
    rows = []
    generator = torch.Generator().manual_seed(1)
    for length in (16, 32, 64, 128, 256, 512):
        sentences = budget // length
        batch = random_batch(vocab, sentences, length, generator, device)
        seconds = seconds_per_update(step, batch, device, 1, updates)
        rows.append(
            {
                "length": length,
                "sentences": sentences,
                "seconds_per_update": round(seconds, 4),
                "target_tokens_per_s": round(sentences * length / seconds, 1),
                "model_flops_per_s": round(batch_flops(batch, vocab) / seconds),
            }
        )
    return rows


def bench_paper_configs(device, tokens: int, updates: int, runs=None):
    """Speed of the paper's base and big models (configs/base.yaml, big.yaml) on batches of
    `tokens` target tokens (random sentences of 32 tokens). `runs`: (config, precision, compile)
    triples, by default both configs in bf16 with and without torch.compile. Peak memory is each
    run's own."""

    runs = runs or [(name, "bf16", compiled) for name in ("base", "big") for compiled in (False, True)]
    rows = []
    for name, precision, compiled in runs:
        config = load_config(os.path.join(ROOT, "configs", f"{name}.yaml"))
        vocab = config.data.vocab_size
        reset_peak_memory(device)
        torch.manual_seed(1)
        model = Transformer(config.model, vocab, vocab, share_vocab=True).to(device)
        runner = torch.compile(model) if compiled else model
        step = training_step(model, device, precision, forward=runner)
        length = 32
        sentences = max(1, tokens // length)
        batch = random_batch(vocab, sentences, length, torch.Generator().manual_seed(1), device)
        model.train()
        seconds = seconds_per_update(step, batch, device, 3, updates)  # 3 warm-ups: compilation too
        flops = training_flops(
            [length] * sentences,
            [length] * sentences,
            config.model.d_model,
            config.model.d_ff,
            config.model.encoder_layers,
            config.model.decoder_layers,
            vocab,
        )
        rows.append(
            {
                "config": name,
                "precision": precision_name(device, precision),
                "compile": compiled,
                "target_tokens": sentences * length,
                "seconds_per_update": round(seconds, 4),
                "target_tokens_per_s": round(sentences * length / seconds, 1),
                "model_flops_per_s": round(flops / seconds),
                "peak_memory_mb": round(peak_memory_mb(device), 1),
            }
        )
        del model, runner, step
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows
