"""Training: label-smoothed cross entropy, Adam with the Noam schedule, gradient accumulation
and clipping, mixed precision, validation (loss, perplexity, BLEU), checkpoints and resume, on
one process or several under torchrun (DistributedDataParallel; see distributed.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import inspect
import json
import logging
import math
import os
import random
import shutil
import signal
import time

import numpy as np
import torch
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from . import checkpoint, distributed
from .batching import Batch, batch_loader, lengths, token_batches
from .config import Config, UserError, check_data_files, to_yaml
from .evaluate import score
from .files import write_text
from .loss import label_smoothed_loss, linear_cross_entropy
from .memory import is_out_of_memory, release_memory
from .model import Transformer, count_parameters
from .prepare import TOKENIZER_SETTINGS, prepare_data
from .schedule import noam_scheduler
from .tokenizer import Tokenizer
from .translate import translate_lines

log = logging.getLogger(__name__)

PRECISIONS = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def training_loss(model, batch: Batch, smoothing: float, autocast, dtype: torch.dtype, forward=None) -> torch.Tensor:
    """Summed label-smoothed loss of one batch, the output projection fused with the loss.

    `forward` runs the model's layers: the model itself, or its DistributedDataParallel or
    torch.compile wrapper.
    """
    forward = model if forward is None else forward
    with autocast:
        states = forward(batch.src, batch.tgt_in, project=False)           # (batch, tgt_len, d_model)
    return linear_cross_entropy(states, model.output.weight, batch.tgt_out, smoothing, dtype)


def select_device(name: str, processes: distributed.Processes = distributed.Processes()) -> torch.device:
    """The configured device; under torchrun with CUDA, the GPU of this process's local rank."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"train.device: {name} asked for, but CUDA is not available")
    if processes.enabled and name.startswith("cuda"):
        if processes.local_rank >= torch.cuda.device_count():
            raise UserError(f"local rank {processes.local_rank} has no GPU: this machine has "
                            f"{torch.cuda.device_count()}; lower torchrun's --nproc-per-node")
        return torch.device("cuda", processes.local_rank)
    return torch.device(name)


def build_model(model_config: dict, src_vocab_size: int, tgt_vocab_size: int, share_vocab: bool) -> Transformer:
    return Transformer(src_vocab_size, tgt_vocab_size, share_vocab=share_vocab, **model_config)


def rng_state() -> dict:
    state = {"python": random.getstate(), "torch": torch.get_rng_state()}
    numpy_state = np.random.get_state()
    state["numpy"] = [numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]]
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def checkpoint_metadata(config: Config, tokenizer: Tokenizer) -> dict:
    return {"config": config.to_dict(), "src_vocab_size": tokenizer.src_vocab_size,
            "tgt_vocab_size": tokenizer.tgt_vocab_size, "joint_vocab": tokenizer.joint,
            "tokenizer_files": tokenizer.files}


def check_compatible(saved: dict, config: Config, where: str) -> None:
    """Refuse to resume when the model or tokenizer settings changed since the checkpoint."""
    current = config.to_dict()
    for section, names in (("model", list(current["model"])), ("data", TOKENIZER_SETTINGS)):
        for name in names:
            old, new = saved["config"][section].get(name), current[section][name]
            if old != new:
                raise UserError(f"{section}.{name}: {new!r} in the config but {old!r} in {where}; "
                                f"use a new train.output_dir or restore the setting")


@torch.no_grad()
def validation_loss(model, dataset, max_tokens: int, max_len: int, smoothing: float, device, autocast) -> dict:
    """Label-smoothed loss and NLL per target token over valid pairs within max_len subwords."""
    model.eval()
    src_lens, tgt_lens = lengths(dataset)
    keep = np.nonzero((src_lens <= max_len) & (tgt_lens <= max_len))[0]
    batches = [keep[b] for b in token_batches(src_lens[keep], tgt_lens[keep], max_tokens, shuffle=False)]
    total_loss = total_nll = 0.0
    tokens = 0
    for batch in batch_loader(dataset.select_columns(["src_ids", "tgt_ids"]), batches):
        batch = batch.to(device)
        with autocast:
            logits = model(batch.src, batch.tgt_in)
        total_loss += float(label_smoothed_loss(logits, batch.tgt_out, smoothing))
        total_nll += float(label_smoothed_loss(logits, batch.tgt_out, 0.0))
        tokens += batch.target_tokens
    tokens = max(tokens, 1)
    return {"valid_loss": total_loss / tokens, "valid_nll": total_nll / tokens,
            "valid_ppl": math.exp(min(total_nll / tokens, 100.0))}


def validation_bleu(model, tokenizer, dataset, max_sentences: int, decode: dict, max_len: int, device,
                    tgt_lang: str | None = None) -> float:
    if max_sentences:
        dataset = dataset.select(range(min(max_sentences, len(dataset))))
    sources, references = list(dataset["src"]), list(dataset["tgt"])
    translations = translate_lines(model, tokenizer, sources, device, beam_size=1,
                                   max_len_a=decode["max_len_a"], max_len_b=decode["max_len_b"],
                                   max_tokens=decode["max_tokens"], max_input_len=decode["max_input_len"] or max_len)
    return score([t[0].text for t in translations], references, metrics=("bleu",), tgt_lang=tgt_lang)["bleu"]


def check_output_dir(path: str) -> None:
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, ".write-test")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as error:
        raise UserError(f"train.output_dir: cannot write to {path} ({error.strerror})") from None


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


def parameter_count(config: Config) -> int:
    """Parameters of the model this config builds (with the run's tokenizer if it exists), allocating nothing."""
    run_dir = config.train.output_dir
    if Tokenizer.exists(run_dir):
        tokenizer = Tokenizer(run_dir)
        src_vocab, tgt_vocab, joint = tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint
    else:
        src_vocab = tgt_vocab = config.data.vocab_size
        joint = config.data.joint_vocab
    with torch.device("meta"):
        return count_parameters(build_model(dataclasses.asdict(config.model), src_vocab, tgt_vocab, joint))


def check_disk_space(run_dir: str, parameters: int, keep_last: int, saves: int) -> None:
    """Fail before any work when the checkpoints this run keeps at once cannot fit on the disk."""
    size = checkpoint.estimated_size(parameters)
    kept = min(keep_last or saves, saves) + 1  # the newest is written before the oldest is deleted
    needed = max(kept - len(checkpoint.list_checkpoints(run_dir)), 1) * size
    free = shutil.disk_usage(run_dir).free
    if free < needed:
        raise UserError(f"train.output_dir: {free / 2**20:.0f} MB free on the disk of {run_dir}, but this run keeps up "
                        f"to {kept} checkpoints of about {size / 2**20:.0f} MB at once (train.keep_last: {keep_last}); "
                        f"free some space or lower train.keep_last")


def train(config: Config) -> dict:
    """Run (or resume) training as configured. Returns the last validation metrics (on rank 0;
    other ranks of a torchrun group return {})."""
    check_data_files(config.data)
    if config.train.tensorboard:
        tensorboard_writer()  # before any work
    processes = distributed.from_environment()
    device = select_device(config.train.device, processes)
    if not processes.is_main:  # one copy of the progress messages; warnings still come from every rank
        logging.getLogger("mt_transformer").setLevel(logging.WARNING)
    distributed.init_group(processes, device)
    try:
        return _train(config, processes, device)
    finally:
        distributed.destroy_group()


def prepare_for_all_ranks(data_config, run_dir: str, seed: int, processes: distributed.Processes):
    """Rank 0 trains the tokenizer and encodes the data; the other ranks then load both from
    the run directory, which must be shared by every node."""
    if processes.is_main:
        prepared = prepare_data(data_config, run_dir, seed)
    distributed.barrier()
    if not processes.is_main:
        prepared = prepare_data(data_config, run_dir, seed)
    if processes.enabled and len(set(distributed.all_gather(prepared[0].fingerprint()))) > 1:
        raise UserError(f"train.output_dir: the ranks see different tokenizers in {run_dir}; with several nodes, "
                        f"put it on a filesystem that every node shares")
    return prepared


def _train(config: Config, processes: distributed.Processes, device: torch.device) -> dict:
    t, run_dir = config.train, config.train.output_dir
    if processes.is_main:
        check_output_dir(run_dir)
    distributed.barrier()
    if t.threads:
        torch.set_num_threads(t.threads)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    random.seed(t.seed)
    np.random.seed(t.seed)
    torch.manual_seed(t.seed)

    found = checkpoint.list_checkpoints(run_dir)
    if found:
        check_compatible(checkpoint.read_metadata(found[-1][1]), config, found[-1][1])
    tokenizer, data = prepare_for_all_ranks(config.data, run_dir, t.seed, processes)
    if processes.is_main:
        write_text(os.path.join(run_dir, "config.yaml"), to_yaml(config))

    model = build_model(dataclasses.asdict(config.model), tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                        tokenizer.joint).to(device)
    if processes.rank > 0:  # the same initial weights (DDP copies rank 0's anyway), their own dropout masks
        torch.manual_seed(t.seed + processes.rank)
    log.info("model: %d parameters, %s on %s%s", count_parameters(model), t.precision, device,
             f" x {processes.world_size} processes" if processes.enabled else "")
    if processes.is_main:
        check_disk_space(run_dir, count_parameters(model), t.keep_last,
                         saves=math.ceil(t.max_steps / t.valid_every) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=t.lr_scale, betas=t.adam_betas, eps=t.adam_eps,
                                 weight_decay=t.weight_decay, fused=device.type == "cuda")
    scheduler = noam_scheduler(optimizer, config.model.d_model, t.warmup)
    scaler = torch.amp.GradScaler(device.type, enabled=t.precision == "fp16")
    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "best_bleu": None, "best_step": None, "since_best": 0,
             "elapsed": 0.0, "skipped": 0, "out_of_memory": 0, "oom_dropped": 0, "world_size": processes.world_size}
    if found:
        step_dir = found[-1][1]
        checkpoint.load_weights(model, step_dir)
        saved = checkpoint.load_trainer_state(step_dir)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        scaler.load_state_dict(saved["scaler"])
        state.update({k: saved.get(k, state[k]) for k in state if k != "world_size"})
        restore_rng(saved, processes, t.seed)
        saved_world = saved.get("world_size", 1)
        if saved_world != processes.world_size:  # each rank's position in the epoch, in its new shard
            state["batch_in_epoch"] = state["batch_in_epoch"] * saved_world // processes.world_size
            log.info("resuming %d processes' run with %d", saved_world, processes.world_size)
        log.info("resuming from %s (step %d, epoch %d)", step_dir, state["step"], state["epoch"] + 1)

    ddp = None
    if processes.enabled:
        # the only buffers are the sinusoidal position tables, equal everywhere: no syncing at each forward
        # (torch 2.13 renamed the option; older versions know only broadcast_buffers)
        parameters = inspect.signature(torch.nn.parallel.DistributedDataParallel).parameters
        no_sync = {"forward_sync_buffers" if "forward_sync_buffers" in parameters else "broadcast_buffers": False}
        ddp = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, **no_sync)
    forward = ddp or model
    if t.compile:  # checkpoints hold `model`'s own parameter names, loadable without compile
        forward = torch.compile(forward)
    loop = TrainingLoop(config, model, optimizer, scheduler, scaler, tokenizer, data, device, state, processes,
                        forward, ddp)
    with logging_redirect_tqdm():
        return loop.run()


def restore_rng(saved: dict, processes: distributed.Processes, seed: int) -> None:
    """Each rank takes back its own random state, so dropout continues as if never stopped;
    after a change of world size the new ranks start fresh streams."""
    per_rank = saved.get("rng_ranks") or [saved["rng"]]
    if len(per_rank) == processes.world_size or processes.is_main:
        set_rng_state(per_rank[processes.rank] if len(per_rank) == processes.world_size else per_rank[0])
    else:
        torch.manual_seed(seed + processes.rank + 1_000_003 * saved["step"])


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
        super().__init__(f"stopped by {signal.Signals(signum).name} at step {step}: checkpoint saved in {directory}; "
                         f"run the same command again to resume")
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

    def __init__(self, config, model, optimizer, scheduler, scaler, tokenizer, data, device, state,
                 processes: distributed.Processes = distributed.Processes(), forward=None, ddp=None):
        self.config, self.model, self.optimizer, self.scheduler, self.scaler = config, model, optimizer, scheduler, scaler
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
        bar = tqdm(total=t.max_steps, initial=state["step"], unit="step", dynamic_ncols=True,
                   disable=None if self.is_main else True)

        def finished() -> bool:
            return (state["step"] >= t.max_steps or self.time_up
                    or bool(t.max_epochs and state["epoch"] >= t.max_epochs) or self.out_of_patience())

        while not finished():
            batches = token_batches(src_lens, tgt_lens, t.max_tokens, t.seed, state["epoch"])
            if len(batches) < self.processes.world_size:
                raise UserError(f"train.max_tokens: the training data makes {len(batches)} batches, fewer than the "
                                f"{self.processes.world_size} processes; use fewer processes or a smaller "
                                f"train.max_tokens")
            batches = distributed.shard(batches, self.processes)
            loader = batch_loader(train_set, batches[state["batch_in_epoch"]:], t.num_workers,
                                  pin_memory=self.device.type == "cuda")
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
                    last_metrics, validated_at = self.validate_and_save(), step
                self._stop_if_signalled()
                if finished():
                    break
            else:
                if batches_since_update >= len(batches) + t.accumulate - 1:
                    raise UserError(f"epoch {state['epoch'] + 1} ended without a single update ({state['oom_dropped']} "
                                    f"dropped for lack of memory, {state['skipped']} non-finite); see the warnings above")
                state["epoch"], state["batch_in_epoch"] = state["epoch"] + 1, 0
        bar.close()
        if self.out_of_patience():
            log.info("early stop: valid BLEU has not improved for %d validations (best %.2f at step %d)",
                     state["since_best"], state["best_bleu"], state["best_step"])
        if validated_at != state["step"]:
            state["elapsed"] = self.elapsed()
            last_metrics = self.validate_and_save()
        log.info("training done: step %d, epoch %d, %.1f minutes", state["step"], state["epoch"] + 1,
                 state["elapsed"] / 60)
        return last_metrics

    def agree(self, loss: torch.Tensor, tokens: int) -> tuple[torch.Tensor, int]:
        """Sum the update's loss and target tokens over the ranks, and share the decision to stop:
        time up or a signal on any rank stops all of them at this update."""
        self.time_up = self.over_time()
        if not self.processes.enabled:
            return loss, tokens
        loss_sum, tokens, time_up, signalled = distributed.sum_over_ranks(
            [float(loss), tokens, self.time_up, self.stop_signal is not None], self.device)
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
        return (f"last good checkpoint: {self.last_good_checkpoint()}; free some space and run the same command "
                f"again to resume")

    def diverged_message(self) -> str:
        t = self.config.train
        cause = ("fp16 overflowed although the loss scale was lowered (try train.precision: bf16) or "
                 if t.precision == "fp16" else "")
        return (f"training diverged: {self.bad_in_a_row} updates in a row had a non-finite loss or gradient "
                f"(train.max_bad_updates: {t.max_bad_updates}); likely cause: {cause}a learning rate too high for "
                f"this model (try a lower train.lr_scale, a longer train.warmup or train.clip_norm: 1.0); "
                f"last good checkpoint: {self.last_good_checkpoint()}")

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
                    raise UserError(f"out of memory on rank {self.processes.rank}; lower train.max_tokens (and raise "
                                    f"train.accumulate to keep the batch), or data.max_len") from None
            self.optimizer.zero_grad(set_to_none=True)
            release_memory(self.device)
            self.state["out_of_memory"] += 1
            shapes = [tuple(b.src.shape) + tuple(b.tgt_in.shape[1:]) for b in group]
            if pieces >= largest:
                self.state["oom_dropped"] += 1
                log.warning("out of memory even one sentence at a time (batches of (sentences, source, target) %s): "
                            "update dropped (%d so far); a lower data.max_len avoids this", shapes,
                            self.state["oom_dropped"])
                return None
            pieces = min(2 * pieces, largest)
            log.warning("out of memory on batches of (sentences, source, target) %s: retrying in %d pieces each; "
                        "a lower train.max_tokens avoids this", shapes, pieces)

    def _accumulate(self, group: list[Batch], pieces: int) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        parts = [part for batch in group for part in (batch.split(pieces) if pieces > 1 else [batch])]
        for i, part in enumerate(parts):
            # DDP all-reduces the gradients in the last backward of the update only
            last = i == len(parts) - 1
            with self.ddp.no_sync() if self.ddp is not None and not last else contextlib.nullcontext():
                loss = training_loss(self.model, part.to(self.device), self.config.train.label_smoothing,
                                     self.autocast, PRECISIONS[self.config.train.precision], self.forward)
                self.scaler.scale(loss).backward()
            total += loss.detach()
        return total

    def log_train(self, interval: dict, bar, elapsed: float) -> None:
        seconds = max(time.monotonic() - interval["time"], 1e-9)
        entry = {"step": self.state["step"], "epoch": self.state["epoch"] + 1,
                 "loss": round(float(interval["loss"]) / max(interval["tokens"], 1), 4),
                 "lr": self.scheduler.get_last_lr()[0], "tokens_per_s": round(interval["tokens"] / seconds, 1),
                 "skipped": self.state["skipped"], "out_of_memory": self.state["out_of_memory"],
                 "oom_dropped": self.state["oom_dropped"],
                 "elapsed_s": round(elapsed, 1)}
        self.log_metrics(entry)
        skipped = {k: entry[k] for k in ("skipped", "out_of_memory") if entry[k]}
        bar.set_postfix(loss=f"{entry['loss']:.3f}", lr=f"{entry['lr']:.2e}", tok_s=f"{entry['tokens_per_s']:.0f}",
                        **skipped)
        if bar.disable:
            log.info("step %d  loss %.3f  lr %.2e  %.0f tok/s", entry["step"], entry["loss"], entry["lr"],
                     entry["tokens_per_s"])

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
        from .plots import plot_curves

        try:
            plot_curves([("", [json.loads(line) for line in self.metrics_lines])],
                        os.path.join(self.run_dir, "curves.png"))
        except (OSError, RuntimeError, ValueError) as error:
            log.warning("curves.png not refreshed: %s", error)

    def validate_and_save(self) -> dict:
        t, d, state = self.config.train, self.config.data, self.state
        metrics = {"step": state["step"]}
        if "valid" in self.data and self.is_main:
            metrics.update(validation_loss(self.model, self.data["valid"], t.max_tokens, d.max_len, t.label_smoothing,
                                           self.device, self.autocast))
            metrics["valid_bleu"] = validation_bleu(self.model, self.tokenizer, self.data["valid"],
                                                    t.valid_max_sentences, dataclasses.asdict(self.config.decode),
                                                    d.max_len, self.device, d.tgt_lang)
            log.info("step %d  valid loss %.3f  ppl %.2f  BLEU %.2f", state["step"], metrics["valid_loss"],
                     metrics["valid_ppl"], metrics["valid_bleu"])
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
        state.update(distributed.broadcast({k: state[k] for k in ("best_bleu", "best_step", "since_best")},
                                           self.processes))
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
            trainer_state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                             "scaler": self.scaler.state_dict(), "rng": rng_ranks[0], **self.state}
            if self.processes.enabled:
                trainer_state["rng_ranks"] = rng_ranks
            directory = checkpoint.save_checkpoint(self.run_dir, self.state["step"], self.model, self.metadata,
                                                   trainer_state, self.run_dir, self.tokenizer.files)
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
