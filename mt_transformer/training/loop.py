"""The update loop: forward and backward over token-bucketed batches, gradient accumulation
and clipping, mixed precision, out-of-memory recovery, the metrics log, validation and
checkpoints at fixed intervals, early stopping and clean stops on a signal; on one process or
on every rank of a torchrun group. train.py builds what it needs and resumes its state.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import logging
import os
import random
import signal
import time

import numpy as np
import torch
from tqdm import tqdm

from mt_transformer import checkpoint
from mt_transformer.config import Config
from mt_transformer.data.batching import Batch, batch_loader, lengths, token_batches
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.devices import is_out_of_memory, release_memory
from mt_transformer.errors import UserError
from mt_transformer.files import write_text
from mt_transformer.training import distributed
from mt_transformer.training.loss import linear_cross_entropy
from mt_transformer.training.validation import validation_bleu, validation_loss

log = logging.getLogger(__name__)

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def training_loss(model, batch: Batch, smoothing: float, autocast, dtype: torch.dtype, forward=None) -> torch.Tensor:
    """Summed label-smoothed loss of one batch, the output projection fused with the loss.

    `forward` runs the model's layers: the model itself, or its DistributedDataParallel or
    torch.compile wrapper.
    """
    forward = model if forward is None else forward
    with autocast:
        states = forward(batch.src, batch.tgt_in)  # (batch, tgt_len, d_model)
    return linear_cross_entropy(states, model.output.weight, batch.tgt_out, smoothing, dtype)


def rng_state() -> dict:
    """This process's random generators (Python, numpy, torch CPU and CUDA), saved with each
    checkpoint so that a resumed run draws the same dropout masks as an uninterrupted one."""
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    numpy_state = np.random.get_state()
    state["numpy"] = [numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    """Restore what rng_state() saved."""
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_metadata(config: Config, tokenizer: Tokenizer) -> dict:
    """What a checkpoint's config.json holds besides the weights: enough to rebuild model and tokenizer."""
    return {
        "config": config.to_dict(),
        "src_vocab_size": tokenizer.src_vocab_size,
        "tgt_vocab_size": tokenizer.tgt_vocab_size,
        "joint_vocab": tokenizer.joint,
        "tokenizer_files": tokenizer.files,
    }


def metrics_up_to(path: str, step: int) -> list[str]:
    """The log lines of steps up to `step`: a resumed run writes the later ones again."""
    if not os.path.isfile(path):
        return []
    kept = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                if json.loads(line)["step"] <= step:
                    kept.append(line.rstrip("\n"))
            except (json.JSONDecodeError, KeyError, TypeError):
                pass  # not a log line
    return kept


def tensorboard_writer(run_dir: str | None = None):
    """A SummaryWriter logging to {run_dir}/tensorboard (None: only check that tensorboard is installed)."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise UserError("train.tensorboard: true needs the tensorboard package (pip install tensorboard)") from None
    return SummaryWriter(os.path.join(run_dir, "tensorboard")) if run_dir else None


class TrainingStopped(Exception):
    """SIGTERM or SIGINT arrived: a checkpoint was saved at the next update boundary."""

    def __init__(self, signum: int, step: int, directory: str):
        super().__init__(
            f"stopped by {signal.Signals(signum).name} at step {step}: checkpoint saved in {directory}; "
            f"run the same command again to resume"
        )
        self.signum = signum


class TrainingLoop:
    """The update loop and the checkpoint/validation bookkeeping around it.

    SIGTERM and SIGINT (what clusters send before preemption, and Ctrl-C) save a checkpoint
    at the next update boundary and end the run with TrainingStopped.

    Under torchrun every rank runs this loop on its shard of each epoch's batches. The ranks
    agree once per update (one small all-reduce) on the token count, the loss and whether to
    stop (time up, a signal on any rank); rank 0 alone validates and writes files, and tells the
    others the early-stopping count.
    """

    def __init__(
        self,
        config,
        model,
        optimizer,
        scheduler,
        scaler,
        tokenizer,
        data,
        device,
        state,
        processes: distributed.Processes = distributed.Processes(),
        forward=None,
        ddp=None,
    ):
        self.config, self.model, self.optimizer, self.scheduler, self.scaler = (
            config,
            model,
            optimizer,
            scheduler,
            scaler,
        )
        self.tokenizer, self.data, self.device, self.state = tokenizer, data, device, state
        self.processes, self.forward, self.ddp = processes, model if forward is None else forward, ddp
        self.is_main = processes.is_main
        self.run_dir = config.train.output_dir
        self.metrics_path = os.path.join(self.run_dir, "metrics.jsonl")
        self.metrics_lines = metrics_up_to(self.metrics_path, state["step"])
        precision = config.train.precision
        self.autocast = torch.autocast(device.type, dtype=PRECISIONS[precision], enabled=precision != "fp32")
        self.metadata = checkpoint_metadata(config, tokenizer)
        self.stop_signal = None  # set by the signal handler, at any moment
        self.agreed_signal = None  # under torchrun: what all ranks agreed on at the last update
        self.bad_in_a_row = 0
        self.tensorboard = tensorboard_writer(self.run_dir) if config.train.tensorboard and self.is_main else None
        self.clock = (time.monotonic(), state["elapsed"])  # (when this process started, elapsed before it)
        self.time_up = self.over_time()

    def elapsed(self) -> float:
        return self.clock[1] + time.monotonic() - self.clock[0]

    def over_time(self) -> bool:
        return bool(self.config.train.max_minutes) and self.elapsed() >= 60 * self.config.train.max_minutes

    def run(self) -> dict:
        handled = (signal.SIGTERM, signal.SIGINT)
        try:
            previous = {s: signal.signal(s, self._on_signal) for s in handled}
        except ValueError:  # not the main thread: leave signals alone
            previous = {}
        try:
            return self._run()
        except checkpoint.SaveError as error:
            raise UserError(f"{error}; {self.how_to_resume()}") from None
        except OSError as error:  # the metrics log, say
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise UserError(f"{error.filename or self.run_dir}: {error.strerror}; {self.how_to_resume()}") from None
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _run(self) -> dict:
        t, state, model = self.config.train, self.state, self.model
        train_set = self.data["train"].select_columns(["src_ids", "tgt_ids"])
        src_lens, tgt_lens = lengths(self.data["train"])
        interval = {"loss": torch.zeros((), device=self.device), "tokens": 0, "time": time.monotonic()}
        last_metrics, validated_at = {}, None
        group = []  # the micro-batches of the next update, on the host (carried across an epoch's end)
        batches_since_update = 0  # a whole epoch of them means the run cannot make progress
        model.train()
        bar = tqdm(
            total=t.max_steps,
            initial=state["step"],
            unit="step",
            dynamic_ncols=True,
            disable=None if self.is_main else True,
        )

        def finished() -> bool:
            return (
                state["step"] >= t.max_steps
                or self.time_up
                or bool(t.max_epochs and state["epoch"] >= t.max_epochs)
                or self.out_of_patience()
            )

        while not finished():
            batches = token_batches(src_lens, tgt_lens, t.max_tokens, t.seed, state["epoch"])
            if len(batches) < self.processes.world_size:
                raise UserError(
                    f"train.max_tokens: the training data makes {len(batches)} batches, fewer than the "
                    f"{self.processes.world_size} processes; use fewer processes or a smaller "
                    f"train.max_tokens"
                )
            batches = distributed.shard(batches, self.processes)
            loader = batch_loader(
                train_set, batches[state["batch_in_epoch"] :], t.num_workers, pin_memory=self.device.type == "cuda"
            )
            for batch in loader:
                state["batch_in_epoch"] += 1
                batches_since_update += 1
                group.append(batch)
                if len(group) < t.accumulate:
                    continue
                loss, tokens = self.forward_backward(group), sum(b.target_tokens for b in group)
                group = []
                if loss is None:  # out of memory even one sentence at a time: update dropped
                    self._stop_if_signalled()
                    continue
                loss, tokens = self.agree(loss, tokens)
                interval["loss"] += loss
                updated = self.update(tokens)
                interval["tokens"] += tokens
                if not updated:
                    self._stop_if_signalled()
                    continue
                batches_since_update = 0
                step = state["step"]
                if step % t.log_every == 0:
                    self.log_train(interval, bar, self.elapsed())
                    interval = {"loss": torch.zeros((), device=self.device), "tokens": 0, "time": time.monotonic()}
                bar.update(1)
                state["elapsed"] = self.elapsed()
                if step % t.valid_every == 0:
                    started = time.monotonic()
                    last_metrics, validated_at = self.validate_and_save(), step
                    interval["time"] += time.monotonic() - started  # tokens/s: training time only
                self._stop_if_signalled()
                if finished():
                    break
            else:
                if batches_since_update >= len(batches) + t.accumulate - 1:
                    raise UserError(
                        f"epoch {state['epoch'] + 1} ended without a single update ({state['oom_dropped']} "
                        f"dropped for lack of memory, {state['skipped']} non-finite); see the warnings above"
                    )
                state["epoch"], state["batch_in_epoch"] = state["epoch"] + 1, 0
        bar.close()
        if self.out_of_patience():
            log.info(
                "early stop: valid BLEU has not improved for %d validations (best %.2f at step %d)",
                state["since_best"],
                state["best_bleu"],
                state["best_step"],
            )
        if validated_at != state["step"]:
            state["elapsed"] = self.elapsed()
            last_metrics = self.validate_and_save()
        log.info(
            "training done: step %d, epoch %d, %.1f minutes", state["step"], state["epoch"] + 1, state["elapsed"] / 60
        )
        return last_metrics

    def agree(self, loss: torch.Tensor, tokens: int) -> tuple[torch.Tensor, int]:
        """Sum the update's loss and target tokens over the ranks, and share the decision to stop:
        time up or a signal on any rank stops all of them at this update."""
        self.time_up = self.over_time()
        if not self.processes.enabled:
            return loss, tokens
        loss_sum, tokens, time_up, signalled = distributed.sum_over_ranks(
            [float(loss), tokens, self.time_up, self.stop_signal is not None], self.device
        )
        self.time_up = time_up > 0
        # another rank's signal stops this one too (torchrun sends them to all ranks anyway)
        self.agreed_signal = (self.stop_signal or signal.SIGTERM) if signalled else None
        return torch.tensor(loss_sum, device=self.device), int(tokens)

    def update(self, tokens: int) -> bool:
        """One optimizer step on gradients summed over `tokens` target tokens (of all ranks);
        False if skipped."""
        t, params = self.config.train, [p for p in self.model.parameters() if p.grad is not None]
        self.scaler.unscale_(self.optimizer)
        # DistributedDataParallel has averaged the ranks' gradient sums: sum = mean * world_size
        divisor = max(tokens, 1) / self.processes.world_size
        for p in params:
            p.grad.div_(divisor)  # mean over the target tokens of the whole update
        grad_norm = torch.nn.utils.clip_grad_norm_(params, t.clip_norm if t.clip_norm > 0 else float("inf"))
        finite = bool(torch.isfinite(grad_norm))
        if finite:
            self.scaler.step(self.optimizer)
            self.scheduler.step()
            self.state["step"] += 1
            self.bad_in_a_row = 0
        else:
            self.state["skipped"] += 1
            self.bad_in_a_row += 1
            log.warning("non-finite loss or gradient: update skipped (%d so far)", self.state["skipped"])
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        if t.max_bad_updates and self.bad_in_a_row >= t.max_bad_updates:
            raise UserError(self.diverged_message())
        return finite

    def last_good_checkpoint(self) -> str:
        found = checkpoint.list_checkpoints(self.run_dir)
        return found[-1][1] if found else "none saved yet"

    def how_to_resume(self) -> str:
        return (
            f"last good checkpoint: {self.last_good_checkpoint()}; free some space and run the same command "
            f"again to resume"
        )

    def diverged_message(self) -> str:
        t = self.config.train
        cause = (
            "fp16 overflowed although the loss scale was lowered (try train.precision: bf16) or "
            if t.precision == "fp16"
            else ""
        )
        return (
            f"training diverged: {self.bad_in_a_row} updates in a row had a non-finite loss or gradient "
            f"(train.max_bad_updates: {t.max_bad_updates}); likely cause: {cause}a learning rate too high for "
            f"this model (try a lower train.lr_scale, a longer train.warmup or train.clip_norm: 1.0); "
            f"last good checkpoint: {self.last_good_checkpoint()}"
        )

    def forward_backward(self, group: list[Batch]) -> torch.Tensor | None:
        """Forward and backward passes over the micro-batches of one update, summing their gradients;
        returns the summed loss.

        Out of memory: the gradients are cleared and the whole update is redone with every batch
        cut into twice as many pieces (the sum is the same); when single sentences do not fit,
        the update is dropped and None returned. Both are counted. Under torchrun the other ranks
        would wait in the gradient all-reduce meanwhile, so there it ends the run instead.
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
            release_memory(self.device)
            self.state["out_of_memory"] += 1
            shapes = [tuple(b.src.shape) + tuple(b.tgt_in.shape[1:]) for b in group]
            if pieces >= largest:
                self.state["oom_dropped"] += 1
                log.warning(
                    "out of memory even one sentence at a time (batches of (sentences, source, target) %s): "
                    "update dropped (%d so far); a lower data.max_len avoids this",
                    shapes,
                    self.state["oom_dropped"],
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
            # DDP all-reduces the gradients in the last backward of the update only
            last = i == len(parts) - 1
            with self.ddp.no_sync() if self.ddp is not None and not last else contextlib.nullcontext():
                loss = training_loss(
                    self.model,
                    part.to(self.device),
                    self.config.train.label_smoothing,
                    self.autocast,
                    PRECISIONS[self.config.train.precision],
                    self.forward,
                )
                self.scaler.scale(loss).backward()
            total += loss.detach()
        return total

    def log_train(self, interval: dict, bar, elapsed: float) -> None:
        seconds = max(time.monotonic() - interval["time"], 1e-9)
        entry = {
            "step": self.state["step"],
            "epoch": self.state["epoch"] + 1,
            "loss": round(float(interval["loss"]) / max(interval["tokens"], 1), 4),
            "lr": self.scheduler.get_last_lr()[0],
            "tokens_per_s": round(interval["tokens"] / seconds, 1),
            "skipped": self.state["skipped"],
            "out_of_memory": self.state["out_of_memory"],
            "oom_dropped": self.state["oom_dropped"],
            "elapsed_s": round(elapsed, 1),
        }
        self.log_metrics(entry)
        skipped = {k: entry[k] for k in ("skipped", "out_of_memory") if entry[k]}
        bar.set_postfix(
            loss=f"{entry['loss']:.3f}", lr=f"{entry['lr']:.2e}", tok_s=f"{entry['tokens_per_s']:.0f}", **skipped
        )
        if bar.disable:
            log.info(
                "step %d  loss %.3f  lr %.2e  %.0f tok/s",
                entry["step"],
                entry["loss"],
                entry["lr"],
                entry["tokens_per_s"],
            )

    def log_metrics(self, entry: dict) -> None:
        """Add a line to metrics.jsonl, rewriting it atomically (about 1 ms for 1,000 lines), and to
        TensorBoard when it is on."""
        if not self.is_main:
            return
        self.metrics_lines.append(json.dumps(entry))
        write_text(self.metrics_path, "".join(line + "\n" for line in self.metrics_lines))
        if self.tensorboard is not None:
            for key, value in entry.items():
                if key != "step" and isinstance(value, (int, float)):
                    self.tensorboard.add_scalar(key, value, entry["step"])
            self.tensorboard.flush()

    def refresh_curves(self) -> None:
        """Redraw curves.png from the metrics so far (rank 0). A failure to draw is a warning: it
        must not end a long run."""
        if not self.is_main:
            return
        from mt_transformer.evaluation.plots import plot_curves

        try:
            plot_curves(
                [("", [json.loads(line) for line in self.metrics_lines])], os.path.join(self.run_dir, "curves.png")
            )
        except (OSError, RuntimeError, ValueError) as error:
            log.warning("curves.png not refreshed: %s", error)

    def validate_and_save(self) -> dict:
        t, d, state = self.config.train, self.config.data, self.state
        metrics = {"step": state["step"]}
        if "valid" in self.data and self.is_main:
            metrics.update(
                validation_loss(
                    self.model,
                    self.data["valid"],
                    t.max_tokens,
                    d.max_len,
                    t.label_smoothing,
                    self.device,
                    self.autocast,
                )
            )
            metrics["valid_bleu"] = validation_bleu(
                self.model,
                self.tokenizer,
                self.data["valid"],
                t.valid_max_sentences,
                dataclasses.asdict(self.config.decode),
                d.max_len,
                self.device,
                d.tgt_lang,
            )
            log.info(
                "step %d  valid loss %.3f  ppl %.2f  BLEU %.2f",
                state["step"],
                metrics["valid_loss"],
                metrics["valid_ppl"],
                metrics["valid_bleu"],
            )
            self.model.train()  # both validations leave the model in eval mode
        metrics["elapsed_s"] = round(state["elapsed"], 1)
        self.log_metrics(metrics)
        self.refresh_curves()
        is_best = "valid_bleu" in metrics and (state["best_bleu"] is None or metrics["valid_bleu"] > state["best_bleu"])
        if is_best:
            state["best_bleu"], state["best_step"], state["since_best"] = metrics["valid_bleu"], state["step"], 0
        elif "valid_bleu" in metrics:
            state["since_best"] += 1
        # early stopping is decided by rank 0's count, on every rank
        state.update(
            distributed.broadcast({k: state[k] for k in ("best_bleu", "best_step", "since_best")}, self.processes)
        )
        self.save()
        if is_best:
            checkpoint.write_best(self.run_dir, state["step"], metrics["valid_bleu"])
        if self.is_main:
            checkpoint.prune(self.run_dir, t.keep_last)
        return metrics

    def out_of_patience(self) -> bool:
        """Early stopping: train.patience validations in a row without a better valid BLEU."""
        return self.config.train.patience > 0 and self.state["since_best"] >= self.config.train.patience

    def save(self) -> str:
        """Write a checkpoint (rank 0; every rank contributes its random state). Returns its directory."""
        rng_ranks = distributed.gather(rng_state(), self.processes)
        directory = checkpoint.step_dir(self.run_dir, self.state["step"])
        if self.is_main:
            trainer_state = {
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict(),
                "rng": rng_ranks[0],
                **self.state,
            }
            if self.processes.enabled:
                trainer_state["rng_ranks"] = rng_ranks
            directory = checkpoint.save_checkpoint(
                self.run_dir,
                self.state["step"],
                self.model,
                self.metadata,
                trainer_state,
                self.run_dir,
                self.tokenizer.files,
            )
        distributed.barrier()  # a rank that stops next reports a checkpoint that exists
        return directory

    def _on_signal(self, signum, frame) -> None:
        # A second signal stops at once, without saving; not under torchrun, which passes Ctrl-C
        # on to the ranks after the terminal did, and kills them itself when they take too long.
        if self.stop_signal is not None and not self.processes.enabled:
            raise KeyboardInterrupt
        self.stop_signal = signum
        log.warning("%s received: saving a checkpoint after this update", signal.Signals(signum).name)

    def _stop_if_signalled(self) -> None:
        signum = self.agreed_signal if self.processes.enabled else self.stop_signal
        if signum is None:
            return
        directory = self.save()
        raise TrainingStopped(signum, self.state["step"], directory)
