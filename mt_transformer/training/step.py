"""One optimizer update, the same for mt-train and `make bench`: forward and backward over the
micro-batches of the update, out-of-memory recovery, gradient unscaling and clipping, a skip
on a non-finite gradient, then the optimizer and learning-rate steps.

The loss is the label-smoothed cross entropy summed over target tokens; gradients are divided
by the update's target tokens (all ranks') just before clipping, so accumulation, splitting a
batch in pieces and several processes all give the gradient of the mean.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

import torch
from packaging.version import Version

from mt_transformer import checkpoint
from mt_transformer.config import GuidedAlignmentConfig, TrainConfig
from mt_transformer.data.batching import Batch
from mt_transformer.devices import PRECISIONS, autocast, is_out_of_memory, release_memory
from mt_transformer.errors import UserError
from mt_transformer.processes import Processes
from mt_transformer.training import sharding
from mt_transformer.training.bf16_adam import StochasticRoundingAdam
from mt_transformer.training.loss import LogitBuffers, alignment_loss, linear_cross_entropy
from mt_transformer.training.schedule import base_lr, scheduler_for
from mt_transformer.training.state import TrainerState

log = logging.getLogger(__name__)

# The fp16 loss scale to start from (fairseq's default): the loss is a sum over up to tens of
# thousands of tokens, and a start at GradScaler's 2^16 overflows for the first ~9 updates.
FP16_INITIAL_SCALE = 128.0


def fused_adam(device: torch.device) -> bool:
    """Whether Adam runs as one kernel over all parameters here: on CUDA, and on the CPU from torch
    2.4, where it is faster than the per-tensor loops (docs/benchmarks.md)."""
    return device.type == "cuda" or (device.type == "cpu" and Version(torch.__version__).release >= (2, 4))


def optimizer_for(model: torch.nn.Module, train: TrainConfig, d_model: int, device: torch.device, elapsed=lambda: 0.0):
    """Adam (or AdamW) with train.schedule's learning rates and the gradient scaler (fp16 only);
    `elapsed` gives the seconds trained so far, for a schedule that follows train.max_minutes."""
    settings = dict(lr=base_lr(train), betas=train.adam_betas, eps=train.adam_eps, weight_decay=train.weight_decay)
    if train.weights_dtype == "bf16":
        optimizer = StochasticRoundingAdam(
            parameter_groups(model, train), decoupled=train.optimizer == "adamw", **settings
        )
    else:
        kind = torch.optim.AdamW if train.optimizer == "adamw" else torch.optim.Adam
        optimizer = kind(parameter_groups(model, train), fused=fused_adam(device), **settings)
    scaler = torch.amp.GradScaler(device.type, init_scale=FP16_INITIAL_SCALE, enabled=train.precision == "fp16")
    return optimizer, scheduler_for(optimizer, train, d_model, elapsed), scaler


def parameter_groups(model: torch.nn.Module, train: TrainConfig) -> list[dict]:
    """Adam's single group; AdamW's decayed matrices and its undecayed biases and norm gains (of
    the parameters trained: with train.lora, the adapters alone)."""
    params = [p for p in model.parameters() if p.requires_grad]
    if train.optimizer == "adam":
        return [{"params": params}]
    return [
        {"params": [p for p in params if p.dim() >= 2]},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def training_loss(
    model,
    batch: Batch,
    smoothing: float,
    precision: str,
    forward=None,
    buffers: LogitBuffers | None = None,
    guided: GuidedAlignmentConfig = GuidedAlignmentConfig(),
) -> torch.Tensor:
    """Summed label-smoothed loss of one batch, the output projection fused with the loss; with
    `guided` (train.guided_alignment) and the batch's alignment, plus its weighted alignment loss.

    `forward` runs the model's layers: the model itself, or its DistributedDataParallel or
    torch.compile wrapper. Under fp16 the fused loss runs in float32: it computes its gradients in
    the forward pass, before the loss scale is applied, and in fp16 those below 6e-8 would vanish.
    `buffers` holds the loss's block logits from one batch to the next.
    """
    forward = model if forward is None else forward
    layer = guided.layer % len(model.decoder) if guided.weight > 0 and batch.alignment is not None else None
    with autocast(batch.src.device, precision):
        if layer is None:
            states, weights = forward(batch.src, batch.tgt_in), None  # (batch, tgt_len, d_model)
        else:  # and the layer's cross-attention (batch, heads, tgt_len, src_len)
            states, weights = forward(batch.src, batch.tgt_in, layer)
    dtype = torch.float32 if precision == "fp16" else PRECISIONS[precision]
    loss = linear_cross_entropy(
        states, model.output.weight, batch.tgt_out, smoothing, dtype, buffers=buffers, bias=model.output_bias()
    )
    if weights is not None:
        loss = loss + guided.weight * alignment_loss(weights, batch.alignment, guided.heads)
    return loss


@dataclass
class Update:
    loss: torch.Tensor  # summed over the update's target tokens (of all ranks)
    tokens: int  # target tokens of the update (of all ranks)
    applied: bool  # False: skipped for a non-finite gradient


class TrainingStep:
    """Runs one update per call on a group of micro-batches (train.accumulate of them).

    Counts into `state`: applied updates (step), skipped ones, out-of-memory retries and dropped
    updates. Under torchrun `ddp` is the DistributedDataParallel wrapper: it all-reduces the
    gradients in the last backward of the update only, and the division by the update's tokens
    undoes its averaging over the ranks.
    """

    def __init__(
        self,
        model,
        optimizer,
        scheduler,
        scaler,
        train: TrainConfig,
        state: TrainerState,
        device: torch.device,
        forward=None,
        ddp=None,
        processes: Processes = Processes(),
    ):
        self.model, self.optimizer, self.scheduler, self.scaler = model, optimizer, scheduler, scaler
        self.train, self.state, self.device = train, state, device
        self.forward, self.ddp, self.processes = model if forward is None else forward, ddp, processes
        self.bad_in_a_row = 0  # non-finite updates in a row
        self.buffers = LogitBuffers()

    @property
    def sharded(self) -> bool:
        """Whether the model is sharded over the processes (train.distributed: fsdp)."""
        return isinstance(self.ddp, sharding.Sharded)

    def saved_state(self) -> tuple[dict, dict]:
        """(weights, optimizer state) as a checkpoint holds them; when sharded, gathered from every
        rank (all call it) onto rank 0."""
        if self.sharded:
            return sharding.gathered_state(self.model, self.optimizer)
        return checkpoint.weights_of(self.model), self.optimizer.state_dict()

    def load_optimizer_state(self, saved: dict) -> None:
        """Adam's state from a checkpoint, run with this device's kernel whatever device or torch
        wrote it."""
        try:
            if self.sharded:
                sharding.load_optimizer_state(self.model, self.optimizer, saved)
                return
            self.optimizer.load_state_dict(saved)
        except ValueError:
            raise UserError(
                f"train.optimizer: {self.train.optimizer} does not match the optimizer state in the checkpoint; "
                "resume with the optimizer the run was started with"
            ) from None
        for group in self.optimizer.param_groups:
            group["fused"] = fused_adam(self.device)

    def __call__(self, group: list[Batch], agree=None) -> Update | None:
        """One update on `group`; None if it was dropped for lack of memory. `agree(loss, tokens)`
        returns the sums over all ranks (under torchrun) before the optimizer step."""
        loss = self.forward_backward(group)
        if loss is None:
            return None
        tokens = sum(b.target_tokens for b in group)
        if agree is not None:
            loss, tokens = agree(loss, tokens)
        return Update(loss, tokens, self.apply(tokens))

    def forward_backward(self, group: list[Batch]) -> torch.Tensor | None:
        """Forward and backward passes over the micro-batches, summing their gradients; returns the
        summed loss.

        Out of memory: the gradients are cleared and the whole update is redone with every batch
        cut into twice as many pieces (the sum is the same); when single sentences do not fit, the
        update is dropped and None returned. Under torchrun the other ranks would wait in the
        gradient all-reduce meanwhile, so there it ends the run instead.
        """
        pieces, largest = 1, max(b.size for b in group)
        while True:
            try:
                return self._accumulate(group, pieces)
            except RuntimeError as error:  # torch.OutOfMemoryError is one
                if not is_out_of_memory(error):
                    raise
                if self.processes.enabled:
                    raise UserError(
                        f"out of memory on rank {self.processes.rank}; lower train.max_tokens (and raise "
                        f"train.accumulate to keep the batch), or data.max_len"
                    ) from None
            self.optimizer.zero_grad(set_to_none=True)
            self.buffers = LogitBuffers()
            release_memory(self.device)
            self.state.out_of_memory += 1
            shapes = [tuple(b.src.shape) + tuple(b.tgt_in.shape[1:]) for b in group]
            if pieces >= largest:
                self.state.oom_dropped += 1
                log.warning(
                    "out of memory even one sentence at a time (batches of (sentences, source, target) %s): "
                    "update dropped (%d so far); a lower data.max_len avoids this",
                    shapes,
                    self.state.oom_dropped,
                )
                return None
            pieces = min(2 * pieces, largest)
            log.warning(
                "out of memory on batches of (sentences, source, target) %s: retrying in %d pieces each; "
                "a lower train.max_tokens avoids this",
                shapes,
                pieces,
            )

    def _accumulate(self, group: list[Batch], pieces: int) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        parts = [part for batch in group for part in (batch.split(pieces) if pieces > 1 else [batch])]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            with self.ddp.no_sync() if self.ddp is not None and not last else contextlib.nullcontext():
                loss = training_loss(
                    self.model,
                    part.to(self.device),
                    self.train.label_smoothing,
                    self.train.precision,
                    self.forward,
                    self.buffers,
                    self.train.guided_alignment,
                )
                self.scaler.scale(loss).backward()
            total += loss.detach()
        return total

    def apply(self, tokens: int) -> bool:
        """The optimizer step on gradients summed over `tokens` target tokens; False if skipped."""
        params = [p for p in self.model.parameters() if p.grad is not None]
        self.scaler.unscale_(self.optimizer)
        # DistributedDataParallel has averaged the ranks' gradient sums: sum = mean * world_size
        divisor = max(tokens, 1) / self.processes.world_size
        for p in params:
            p.grad.div_(divisor)  # mean over the target tokens of the whole update
        clip = self.train.clip_norm if self.train.clip_norm > 0 else float("inf")
        finite = bool(torch.isfinite(torch.nn.utils.clip_grad_norm_(params, clip)))
        if finite:
            self.scaler.step(self.optimizer)
            self.scheduler.step()
            self.state.step += 1
            self.bad_in_a_row = 0
        else:
            self.state.skipped += 1
            self.bad_in_a_row += 1
            log.warning("non-finite loss or gradient: update skipped (%d so far)", self.state.skipped)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        return finite
