"""The update loop: token-bucketed batches in groups of train.accumulate, one TrainingStep per
group, the metrics log, validation and a checkpoint every train.valid_every updates (and
checkpoints alone every train.save_every), until the stop policy says the run is over; on one
process or on every rank of a torchrun group.

Under torchrun every rank runs this loop on its shard of each epoch's batches. The ranks agree
once per update (one small all-reduce) on the token count, the loss, whether to stop and the
elapsed time (the mean of their clocks, which the budget schedule follows); rank 0
alone validates and writes files, and tells the others the early-stopping count.
"""

from __future__ import annotations

import errno
import logging
import time

import torch
from tqdm import tqdm

from mt_transformer import checkpoint
from mt_transformer.config import Config
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.processes import Processes
from mt_transformer.training import distributed, random_state
from mt_transformer.training.dropout_fit import DropoutFit
from mt_transformer.training.epochs import TrainingBatches
from mt_transformer.training.run_log import RunLog
from mt_transformer.training.sampling_fit import SamplingFit
from mt_transformer.training.step import TrainingStep, Update
from mt_transformer.training.stop_policy import StopPolicy, TrainingStopped
from mt_transformer.training.validation import log_validation, validate

log = logging.getLogger(__name__)


class Interval:
    """Loss, target tokens and training time since the last logged step."""

    def __init__(self, device: torch.device):
        self.loss, self.tokens, self.started = torch.zeros((), device=device), 0, time.monotonic()

    def add(self, update: Update) -> None:
        self.loss += update.loss
        self.tokens += update.tokens

    def pause(self, seconds: float) -> None:
        """Leave out time not spent training (validation) from tokens/s."""
        self.started += seconds


class TrainingLoop:
    def __init__(
        self,
        config: Config,
        step: TrainingStep,
        tokenizer: Tokenizer,
        data: dict,
        processes: Processes = Processes(),
        corpus_sizes: list[int] = (),
    ):
        self.config, self.step, self.tokenizer, self.data, self.processes = config, step, tokenizer, data, processes
        self.state, self.device, self.run_dir = step.state, step.device, config.train.output_dir
        # corpus_sizes: the training pairs of each corpus, laid end to end in data["train"]
        self.batches = TrainingBatches(config, data["train"], tokenizer.directory, corpus_sizes, processes)
        self.policy = StopPolicy(config.train, self.state, processes)
        train = config.train
        self.log = RunLog(self.run_dir, self.state.step, processes.is_main, train.tensorboard, train.curves)
        self.metadata = checkpoint.checkpoint_metadata(config, tokenizer)

    def run(self) -> dict:
        """Train until the stop policy ends the run; returns the last validation's metrics."""
        try:
            with self.policy.signals_handled():
                return self._run()
        except checkpoint.SaveError as error:
            raise UserError(f"{error}; {self.how_to_resume()}") from None
        except OSError as error:  # the metrics log, say
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise UserError(f"{error.filename or self.run_dir}: {error.strerror}; {self.how_to_resume()}") from None

    def _run(self) -> dict:
        train, state, policy = self.config.train, self.state, self.policy
        interval, last_metrics, validated_at = Interval(self.device), {}, None
        group = []  # the micro-batches of the next update, on the host (carried across an epoch's end)
        batches_since_update = 0  # a whole epoch of them means the run cannot make progress
        self.step.model.train()
        sampling = SamplingFit(self.config, state, self.batches.plain_epoch_updates, self.processes.is_main)
        self.batches.sampled_in = sampling.sampled
        dropout = DropoutFit(
            self.step.model,
            self.config,
            state,
            lambda: len(self.batches.epoch(state.epoch)) // train.accumulate,
            self.processes.is_main,
        )
        bar = self._progress_bar()
        while not policy.finished():
            batches = self.batches.epoch(state.epoch)
            for batch in self.batches.loader(batches[state.batch_in_epoch :], state.epoch, self.device.type == "cuda"):
                state.batch_in_epoch += 1
                batches_since_update += 1
                group.append(batch)
                if len(group) < train.accumulate:
                    continue
                update = self.step(group, self.share)
                group = []
                if update is not None and update.applied:  # None: dropped for lack of memory
                    interval.add(update)  # a skipped update's loss is left out: not finite, or fp16 overflowed
                if update is None or not update.applied:
                    policy.check_divergence(self.step.bad_in_a_row, self.last_good_checkpoint())
                    self.stop_if_signalled()
                    continue
                batches_since_update = 0
                if state.step % train.log_every == 0:
                    self.log_train(interval, bar)
                    interval = Interval(self.device)
                bar.update(1)
                state.elapsed = policy.elapsed_at_update()
                dropout.check(state.step, state.elapsed)
                if state.step % train.valid_every == 0:
                    started = time.monotonic()
                    last_metrics, validated_at = self.validate_and_save(), state.step
                    interval.pause(time.monotonic() - started)
                elif train.save_every and state.step % train.save_every == 0:
                    started = time.monotonic()
                    self.save_and_prune()
                    interval.pause(time.monotonic() - started)
                self.stop_if_signalled()
                if policy.finished():
                    break
            else:
                if batches_since_update >= len(batches) + train.accumulate - 1:
                    raise UserError(
                        f"epoch {state.epoch + 1} ended without a single update ({state.oom_dropped} "
                        f"dropped for lack of memory, {state.skipped} non-finite); see the warnings above"
                    )
                state.epoch, state.batch_in_epoch = state.epoch + 1, 0
        bar.close()
        return self.finish(last_metrics, validated_at)

    def _progress_bar(self) -> tqdm:
        """Updates out of train.max_steps, shown by the main process only (None lets tqdm check for a terminal)."""
        return tqdm(
            total=self.config.train.max_steps,
            initial=self.state.step,
            unit="step",
            dynamic_ncols=True,
            disable=None if self.processes.is_main else True,
        )

    def finish(self, last_metrics: dict, validated_at: int | None) -> dict:
        """After the last update: say why training stopped early, and validate and save the last
        step unless that was just done."""
        state, policy = self.state, self.policy
        if policy.out_of_patience():
            log.info(
                "early stop: valid BLEU has not improved for %d validations (best %.2f at step %d)",
                state.since_best,
                state.best_bleu,
                state.best_step,
            )
        if validated_at != state.step:
            state.elapsed = policy.elapsed()
            last_metrics = self.validate_and_save()
        self.log.refresh_curves(final=True)
        log.info("training done: step %d, epoch %d, %.1f minutes", state.step, state.epoch + 1, state.elapsed / 60)
        return last_metrics

    def share(self, loss: torch.Tensor, tokens: int) -> tuple[torch.Tensor, int]:
        """The update's loss and target tokens summed over the ranks, with what each rank knows of
        stopping (its time limit, a signal) and its clock, in one all-reduce; the stop policy then
        decides, and keeps the mean clock."""
        time_up, signalled, elapsed = self.policy.local_view()
        if not self.processes.enabled:
            return loss, tokens
        loss_sum, tokens, time_up, signalled, elapsed_sum = distributed.sum_over_ranks(
            [float(loss), tokens, time_up, signalled, elapsed], self.device
        )
        self.policy.agree(time_up > 0, signalled > 0, elapsed_sum / self.processes.world_size)
        return torch.tensor(loss_sum, device=self.device), int(tokens)

    def log_train(self, interval: Interval, bar) -> None:
        state = self.state
        entry = {
            "step": state.step,
            "epoch": state.epoch + 1,
            "loss": round(float(interval.loss) / max(interval.tokens, 1), 4),
            "lr": self.step.scheduler.get_last_lr()[0],
            "tokens_per_s": round(interval.tokens / max(time.monotonic() - interval.started, 1e-9), 1),
            "skipped": state.skipped,
            "out_of_memory": state.out_of_memory,
            "oom_dropped": state.oom_dropped,
            "elapsed_s": round(self.policy.elapsed(), 1),
        }
        self.log.write(entry)
        problems = {k: entry[k] for k in ("skipped", "out_of_memory") if entry[k]}
        bar.set_postfix(
            loss=f"{entry['loss']:.3f}", lr=f"{entry['lr']:.2e}", tok_s=f"{entry['tokens_per_s']:.0f}", **problems
        )
        if bar.disable:
            log.info(
                "step %d  loss %.3f  lr %.2e  %.0f tok/s",
                entry["step"],
                entry["loss"],
                entry["lr"],
                entry["tokens_per_s"],
            )

    def validated(self) -> dict:
        """validate()'s metrics on rank 0 ({} elsewhere and without a valid set). A sharded model's
        other ranks validate alongside: its layers are gathered from all of them."""
        sharded = self.step.sharded
        if "valid" not in self.data or not (self.processes.is_main or sharded):
            return {}
        if sharded:
            self.step.model.unshard()  # the embeddings, norms and output projection, for the searches
        metrics = validate(self.step.model, self.tokenizer, self.data["valid"], self.config, self.device)
        return metrics if self.processes.is_main else {}

    def validate_start(self) -> None:
        """Validate the weights the run starts from, logged as step 0; nothing is saved."""
        validated = self.validated()
        if validated:
            metrics = {"step": 0, **validated}
            log_validation(0, metrics)
            self.log.write(metrics)

    def validate_and_save(self) -> dict:
        state = self.state
        metrics, started = {"step": state.step}, time.monotonic()
        validated = self.validated()
        if validated:
            metrics.update(validated)
            log_validation(state.step, metrics)
            metrics["valid_s"] = round(time.monotonic() - started, 2)  # what validating costs the budget
        metrics["elapsed_s"] = round(state.elapsed, 1)
        self.log.write(metrics)  # before the save: a crash in between makes the resumed run validate again
        self.log.refresh_curves()
        bleu = metrics.get("valid_bleu")
        is_best = state.record_validation(bleu)
        # early stopping is decided by rank 0's count, on every rank
        shared = distributed.broadcast([state.best_bleu, state.best_step, state.since_best], self.processes)
        state.best_bleu, state.best_step, state.since_best = shared
        self.save_and_prune(bleu if is_best else None)
        return metrics

    def save_and_prune(self, best_bleu: float | None = None) -> None:
        """Save a checkpoint (the best so far when `best_bleu` is given), then keep only the newest
        train.keep_last checkpoints and the best."""
        self.save()
        if best_bleu is not None:
            checkpoint.write_best(self.run_dir, self.state.step, best_bleu)
        if self.processes.is_main:
            checkpoint.prune(self.run_dir, self.config.train.keep_last)

    def save(self) -> str:
        """Write a checkpoint (rank 0; every rank contributes its random state). Returns its directory."""
        rng_ranks = distributed.gather(random_state.rng_state(self.device), self.processes)
        directory = checkpoint.step_dir(self.run_dir, self.state.step)
        weights, optimizer_state = self.step.saved_state()  # gathered from every rank when sharded
        if self.processes.is_main:
            step = self.step
            trainer_state = self.state.saved_with(
                optimizer_state, step.scheduler, step.scaler, rng_ranks, self.processes.enabled
            )
            directory = checkpoint.save_checkpoint(
                self.run_dir,
                self.state.step,
                weights,
                self.metadata,
                trainer_state,
                self.run_dir,
                self.tokenizer.files,
            )
        distributed.barrier()  # a rank that stops next reports a checkpoint that exists
        return directory

    def stop_if_signalled(self) -> None:
        signum = self.policy.signal_to_stop()
        if signum is not None:
            self.log.refresh_curves(final=True)
            directory = self.save()
            raise TrainingStopped(signum, self.state.step, directory)

    def last_good_checkpoint(self) -> str:
        found = checkpoint.list_checkpoints(self.run_dir)
        return found[-1][1] if found else "none saved yet"

    def how_to_resume(self) -> str:
        last = self.last_good_checkpoint()
        return f"last good checkpoint: {last}; free some space and run the same command again to resume"
