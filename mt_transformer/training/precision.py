"""`train.precision: auto`: the precision a run trains in, chosen for the machine it runs on.

On a GPU: bf16 where it has bf16 units (compute capability 8.0 and later), fp16 with loss
scaling on the tensor cores before that (7.x), fp32 on older ones. On a CPU: fp32 where bf16
would be emulated (x86 without avx512_bf16 or amx_bf16); where the CPU has bf16 units, a short
calibration times training passes of the model over the run's own first batches in both
precisions and keeps bf16 only if it is clearly faster, since the gain depends on the model's
shapes and the host (a run of under 1,000 updates keeps fp32 without one). Those batches change
shape from one pass to the next, as training's do: bf16 matrix products on a CPU build a kernel
per new shape, which a repeated batch would hide.

Where training keeps its kernels (`devices.kernel_cache_in_effect` above oneDNN's default,
`devices.ONEDNN_KERNEL_CACHE`: CPUs with AMX, or any CPU whose ONEDNN_PRIMITIVE_CACHE_CAPACITY
the user raised), a shape met again runs without building one, and most of training's shapes
are met again: there each batch is timed on its second pass in each precision, the first having
built its kernels. Timed on first passes, bf16 measured no faster than fp32 on an AMX host
where it trains faster.

A host's other work comes and goes within seconds (a neighbour starting, a data loader), so each
batch is timed in both precisions back to back, in alternating order, over a dozen batches: two
batches beside another's data preparation measured far less than bf16's gain there
(docs/benchmarks.md, "Performance decisions").
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from mt_transformer.data.batching import Batch, BatchedDataset, lengths, token_batches
from mt_transformer.devices import ONEDNN_KERNEL_CACHE, kernel_cache_in_effect, slow_precision
from mt_transformer.training.step import training_loss

# bf16 is kept only when the calibration finds it at least this much faster than fp32: a smaller
# gain is within the noise of a shared host and not worth bf16's rounding.
MIN_SPEEDUP = 1.1
CALIBRATION_BATCHES = 13  # the first warms up, the others are timed
# A run of fewer updates trains in fp32 without calibrating: bf16 at the least speedup it is kept
# for saves less than the calibration's passes (and bf16's kernels for each new shape) cost.
MIN_CALIBRATED_STEPS = 1000


def choose_precision(
    setting: str,
    device: torch.device,
    model,
    batches: Callable[[], list[Batch]],
    calibrate=None,
    steps: int | None = None,
) -> tuple[str, str]:
    """(the precision to train in, why). `setting` is train.precision; anything but auto is kept.
    `batches()` gives the run's first batches, called only where a calibration runs;
    `calibrate(model, device, batches)` returns bf16's speed over fp32's (default: calibration);
    `steps` is the run's train.max_steps (None: not known, calibrate)."""
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
    if steps is not None and steps < MIN_CALIBRATED_STEPS:
        return "fp32", f"auto: a run of {steps:,} updates is too short to repay a calibration of bf16"
    speedup = (calibrate or calibration)(model, device, batches())
    if speedup >= MIN_SPEEDUP:
        return "bf16", f"auto: bf16 trained {speedup:.2f}x as fast as fp32 in a calibration on this CPU"
    return "fp32", f"auto: bf16 trained only {speedup:.2f}x as fast as fp32 in a calibration on this CPU"


def first_batches(dataset, max_tokens: int, seed: int, count: int = CALIBRATION_BATCHES) -> list[Batch]:
    """The first `count` batches of up to `max_tokens` tokens that training with `seed` draws from
    an encoded split in its first epoch (with several corpora, before their sampling)."""
    src_lens, tgt_lens = lengths(dataset)
    batches = BatchedDataset(dataset, token_batches(src_lens, tgt_lens, max_tokens, seed)[:count])
    return [batches[i] for i in range(len(batches))]


def calibration(model, device: torch.device, batches: list[Batch]) -> float:
    """bf16's speed over fp32's on forward and backward passes of `model` (`speedup` of the
    batches' timings), second passes where training keeps its kernels. The run's random state is
    left as it was; the gradients are cleared."""
    return speedup(pass_seconds(model, device, batches, repeat=kernel_cache_in_effect() > ONEDNN_KERNEL_CACHE))


def pass_seconds(model, device: torch.device, batches: list[Batch], repeat: bool = False) -> list[dict[str, float]]:
    """Seconds of a forward and backward pass in each precision, per batch after the first
    (which warms up both): each batch in both precisions back to back, the order alternating
    from one batch to the next so that neither precision always runs second. With `repeat`, each
    pass runs twice and the second is timed."""
    timings = []
    with torch.random.fork_rng(devices=[]):
        for i, batch in enumerate(batches):
            batch = batch.to(device)
            seconds = {}
            for precision in ("fp32", "bf16") if i % 2 == 0 else ("bf16", "fp32"):
                if repeat:
                    training_loss(model, batch, 0.1, precision).backward()
                started = time.perf_counter()
                training_loss(model, batch, 0.1, precision).backward()
                seconds[precision] = time.perf_counter() - started
            if i > 0:
                timings.append(seconds)
    model.zero_grad(set_to_none=True)
    return timings


def speedup(timings: list[dict[str, float]]) -> float:
    """bf16's speed over fp32's: fp32's seconds over bf16's, summed over the batches."""
    return sum(t["fp32"] for t in timings) / sum(t["bf16"] for t in timings)
