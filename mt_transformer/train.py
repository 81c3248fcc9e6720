"""Training: label-smoothed cross entropy, Adam with the Noam schedule, gradient accumulation
and clipping, mixed precision, validation (loss, perplexity, BLEU), checkpoints and resume.
"""

from __future__ import annotations

import dataclasses
import errno
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

from . import checkpoint
from .batching import Batch, batch_loader, token_batches
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


def training_loss(model, batch: Batch, smoothing: float, autocast, dtype: torch.dtype) -> torch.Tensor:
    """Summed label-smoothed loss of one batch, the output projection fused with the loss."""
    with autocast:
        states = model(batch.src, batch.tgt_in, project=False)               # (batch, tgt_len, d_model)
    return linear_cross_entropy(states, model.output.weight, batch.tgt_out, smoothing, dtype)


def select_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"train.device: {name} asked for, but CUDA is not available")
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
    src_lens, tgt_lens = np.asarray(dataset["src_len"]), np.asarray(dataset["tgt_len"])
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
    """Run (or resume) training as configured. Returns the last validation metrics."""
    check_data_files(config.data)
    t, run_dir = config.train, config.train.output_dir
    check_output_dir(run_dir)
    device = select_device(t.device)
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
    tokenizer, data = prepare_data(config.data, run_dir, t.seed)
    write_text(os.path.join(run_dir, "config.yaml"), to_yaml(config))

    model = build_model(dataclasses.asdict(config.model), tokenizer.src_vocab_size, tokenizer.tgt_vocab_size,
                        tokenizer.joint).to(device)
    log.info("model: %d parameters, %s on %s", count_parameters(model), t.precision, device)
    check_disk_space(run_dir, count_parameters(model), t.keep_last, saves=math.ceil(t.max_steps / t.valid_every) + 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=t.lr_scale, betas=t.adam_betas, eps=t.adam_eps,
                                 weight_decay=t.weight_decay, fused=device.type == "cuda")
    scheduler = noam_scheduler(optimizer, config.model.d_model, t.warmup)
    scaler = torch.amp.GradScaler(device.type, enabled=t.precision == "fp16")
    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0, "best_bleu": None, "best_step": None, "since_best": 0,
             "elapsed": 0.0, "skipped": 0, "out_of_memory": 0, "oom_dropped": 0}
    if found:
        step_dir = found[-1][1]
        checkpoint.load_weights(model, step_dir)
        saved = checkpoint.load_trainer_state(step_dir)
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        scaler.load_state_dict(saved["scaler"])
        set_rng_state(saved["rng"])
        state.update({k: saved.get(k, state[k]) for k in state})
        log.info("resuming from %s (step %d, epoch %d)", step_dir, state["step"], state["epoch"] + 1)

    loop = TrainingLoop(config, model, optimizer, scheduler, scaler, tokenizer, data, device, state)
    with logging_redirect_tqdm():
        return loop.run()


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
    """

    def __init__(self, config, model, optimizer, scheduler, scaler, tokenizer, data, device, state):
        self.config, self.model, self.optimizer, self.scheduler, self.scaler = config, model, optimizer, scheduler, scaler
        self.tokenizer, self.data, self.device, self.state = tokenizer, data, device, state
        self.run_dir = config.train.output_dir
        self.metrics_path = os.path.join(self.run_dir, "metrics.jsonl")
        self.metrics_lines = metrics_up_to(self.metrics_path, state["step"])
        precision = config.train.precision
        self.autocast = torch.autocast(device.type, dtype=PRECISIONS[precision], enabled=precision != "fp32")
        self.metadata = checkpoint_metadata(config, tokenizer)
        self.stop_signal = None
        self.bad_in_a_row = 0

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
        src_lens = np.asarray(self.data["train"]["src_len"])
        tgt_lens = np.asarray(self.data["train"]["tgt_len"])
        start, started_at = time.monotonic(), state["elapsed"]
        interval = {"loss": torch.zeros((), device=self.device), "tokens": 0, "time": time.monotonic()}
        last_metrics, validated_at = {}, None
        group = []  # the micro-batches of the next update, on the host (carried across an epoch's end)
        batches_since_update = 0  # a whole epoch of them means the run cannot make progress
        model.train()
        bar = tqdm(total=t.max_steps, initial=state["step"], unit="step", dynamic_ncols=True, disable=None)

        def finished() -> bool:
            over_time = t.max_minutes and started_at + time.monotonic() - start >= 60 * t.max_minutes
            return (state["step"] >= t.max_steps or bool(over_time) or bool(t.max_epochs and state["epoch"] >= t.max_epochs)
                    or self.out_of_patience())

        while not finished():
            batches = token_batches(src_lens, tgt_lens, t.max_tokens, t.seed, state["epoch"])
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
                interval["loss"] += loss
                updated = self.update(tokens)
                interval["tokens"] += tokens
                if not updated:
                    self._stop_if_signalled()
                    continue
                batches_since_update = 0
                step = state["step"]
                if step % t.log_every == 0:
                    self.log_train(interval, bar, started_at + time.monotonic() - start)
                    interval = {"loss": torch.zeros((), device=self.device), "tokens": 0, "time": time.monotonic()}
                bar.update(1)
                state["elapsed"] = started_at + time.monotonic() - start
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
            state["elapsed"] = started_at + time.monotonic() - start
            last_metrics = self.validate_and_save()
        log.info("training done: step %d, epoch %d, %.1f minutes", state["step"], state["epoch"] + 1,
                 state["elapsed"] / 60)
        return last_metrics

    def update(self, tokens: int) -> bool:
        """One optimizer step on gradients summed over `tokens` target tokens; False if skipped."""
        t, params = self.config.train, [p for p in self.model.parameters() if p.grad is not None]
        self.scaler.unscale_(self.optimizer)
        for p in params:
            p.grad.div_(max(tokens, 1))  # mean over the target tokens of the whole update
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
        the update is dropped and None returned. Both are counted.
        """
        pieces, largest = 1, max(b.size for b in group)
        while True:
            try:
                return self._accumulate(group, pieces)
            except RuntimeError as error:  # torch.OutOfMemoryError is one
                if not is_out_of_memory(error):
                    raise
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
        for batch in group:
            for part in batch.split(pieces) if pieces > 1 else [batch]:
                loss = training_loss(self.model, part.to(self.device), self.config.train.label_smoothing,
                                     self.autocast, PRECISIONS[self.config.train.precision])
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
        """Add a line to metrics.jsonl, rewriting it atomically (about 1 ms for 1,000 lines)."""
        self.metrics_lines.append(json.dumps(entry))
        write_text(self.metrics_path, "".join(line + "\n" for line in self.metrics_lines))

    def validate_and_save(self) -> dict:
        t, d, state = self.config.train, self.config.data, self.state
        metrics = {"step": state["step"]}
        if "valid" in self.data:
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
        is_best = "valid_bleu" in metrics and (state["best_bleu"] is None or metrics["valid_bleu"] > state["best_bleu"])
        if is_best:
            state["best_bleu"], state["best_step"], state["since_best"] = metrics["valid_bleu"], state["step"], 0
        elif "valid_bleu" in metrics:
            state["since_best"] += 1
        self.save()
        if is_best:
            checkpoint.write_best(self.run_dir, state["step"], metrics["valid_bleu"])
        checkpoint.prune(self.run_dir, t.keep_last)
        return metrics

    def out_of_patience(self) -> bool:
        """Early stopping: train.patience validations in a row without a better valid BLEU."""
        return self.config.train.patience > 0 and self.state["since_best"] >= self.config.train.patience

    def save(self) -> str:
        trainer_state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                         "scaler": self.scaler.state_dict(), "rng": rng_state(), **self.state}
        return checkpoint.save_checkpoint(self.run_dir, self.state["step"], self.model, self.metadata, trainer_state,
                                          self.run_dir, self.tokenizer.files)

    def _on_signal(self, signum, frame) -> None:
        if self.stop_signal is not None:  # a second signal: stop now, without saving
            raise KeyboardInterrupt
        self.stop_signal = signum
        log.warning("%s received: saving a checkpoint after this update", signal.Signals(signum).name)

    def _stop_if_signalled(self) -> None:
        if self.stop_signal is None:
            return
        directory = self.save()
        raise TrainingStopped(self.stop_signal, self.state["step"], directory)
