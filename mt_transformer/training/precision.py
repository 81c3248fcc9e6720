"""`train.precision: auto`: the precision a run trains in, chosen for the machine it runs on.

On a GPU: bf16 where it has bf16 units (compute capability 8.0 and later), fp16 with loss
scaling on the tensor cores before that (7.x), fp32 on older ones. On a CPU: fp32 where bf16
would be emulated (x86 without avx512_bf16 or amx_bf16); where the CPU has bf16 units, a short
calibration times training passes of the model in both precisions and keeps bf16 only if it is
clearly faster, since the gain depends on the model's shapes and the host.
"""

from __future__ import annotations

import time

import torch

from mt_transformer.data.batching import Batch
from mt_transformer.devices import slow_precision
from mt_transformer.training.step import training_loss

# bf16 is kept only when the calibration finds it at least this much faster than fp32: a smaller
# gain is within the noise of a shared host and not worth bf16's rounding.
MIN_SPEEDUP = 1.1
CALIBRATION_LENGTH = 32  # tokens per sentence of the calibration batch


def choose_precision(setting: str, device: torch.device, model, max_tokens: int, calibrate=None) -> tuple[str, str]:
    """(the precision to train in, why). `setting` is train.precision; anything but auto is kept.
    `calibrate(model, device, max_tokens)` returns bf16's speed over fp32's (default: calibration)."""
    if setting != "auto":
        return setting, "train.precision"
    if device.type == "cuda":
        major, minor = torch.cuda.get_device_capability(device)
        if major >= 8:
            return "bf16", f"auto: compute capability {major}.{minor} has bf16 units"
        if major == 7:
            return "fp16", f"auto: compute capability {major}.{minor} has fp16 tensor cores but no bf16 units"
        return "fp32", f"auto: compute capability {major}.{minor} has neither bf16 units nor tensor cores"
    slow = slow_precision(device, "bf16")
    if slow:
        return "fp32", f"auto: {slow}"
    speedup = (calibrate or calibration)(model, device, max_tokens)
    if speedup >= MIN_SPEEDUP:
        return "bf16", f"auto: bf16 trained {speedup:.2f}x as fast as fp32 in a calibration on this CPU"
    return "fp32", f"auto: bf16 trained only {speedup:.2f}x as fast as fp32 in a calibration on this CPU"


def calibration(model, device: torch.device, max_tokens: int, rounds: int = 2) -> float:
    """bf16's speed over fp32's on forward and backward passes of `model` over a batch of
    `max_tokens` random target tokens, alternating the two, best of `rounds` each after a
    warm-up. The run's random state is left as it was; the gradients are cleared."""
    vocab = model.output.out_features
    sentences = max(1, max_tokens // CALIBRATION_LENGTH)
    best = {"fp32": float("inf"), "bf16": float("inf")}
    with torch.random.fork_rng(devices=[]):
        ids = torch.randint(4, vocab, (sentences, CALIBRATION_LENGTH + 1)).to(device)
        batch = Batch(src=ids[:, 1:], tgt_in=ids[:, :-1], tgt_out=ids[:, 1:])
        for round_ in range(rounds + 1):
            for precision in best:
                started = time.perf_counter()
                training_loss(model, batch, 0.1, precision).backward()
                seconds = time.perf_counter() - started
                if round_ > 0:  # the first round warms up kernels and caches
                    best[precision] = min(best[precision], seconds)
    model.zero_grad(set_to_none=True)
    return best["fp32"] / best["bf16"]
