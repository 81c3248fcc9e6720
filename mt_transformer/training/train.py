"""Training setup: the device, the data and tokenizer (prepared once for all ranks), the model,
Adam with the Noam schedule, the gradient scaler, DistributedDataParallel under torchrun, and
the state of a resumed run; then loop.TrainingLoop runs the updates.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import shutil

import numpy as np
import torch
from tqdm.contrib.logging import logging_redirect_tqdm

from mt_transformer import checkpoint
from mt_transformer.config import Config, TrainConfig, check_data_files, to_yaml
from mt_transformer.data.cache import claim_cache
from mt_transformer.data.cleaning import cleaned_corpora
from mt_transformer.data.prepare import prepare_data
from mt_transformer.data.run_tokenizer import chosen_vocab_size, has_run_tokenizer
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.decoding.scoring import PairCosts
from mt_transformer.devices import select_device, slow_precision, use_fast_matmul
from mt_transformer.errors import UserError
from mt_transformer.files import write_text
from mt_transformer.model.transformer import Transformer, count_parameters
from mt_transformer.outputs import claim_dir, written_by
from mt_transformer.processes import Processes, from_environment
from mt_transformer.training import distributed, finetune, random_state, teacher
from mt_transformer.training.bf16_adam import to_bf16_matrices
from mt_transformer.training.loop import TrainingLoop
from mt_transformer.training.precision import choose_precision, first_batches
from mt_transformer.training.run_log import tensorboard_writer
from mt_transformer.training.state import TrainerState
from mt_transformer.training.step import TrainingStep, optimizer_for

log = logging.getLogger(__name__)


def claim_outputs(config: Config) -> None:
    """The run directory, made and marked as mt-train's before any work (outputs.claim_dir; a
    protected path, a file, or a non-empty directory that is no run is refused), and the cache
    directory where data.cache_dir names one."""
    try:
        claim_dir(config.train.output_dir, checkpoint.WRITER, also_ours=is_run_dir)
    except UserError as error:
        raise UserError(f"train.output_dir: {error}") from None
    claim_cache(config.data)


def is_run_dir(path: str) -> bool:
    """Whether mt_transformer wrote `path` as a run: mt-train's (or mt-prepare's) marker, checkpoints,
    or a run's tokenizer (as the Python API's run_tokenizer writes it)."""
    return written_by(path) == checkpoint.WRITER or bool(checkpoint.list_checkpoints(path)) or has_run_tokenizer(path)


def parameter_count(config: Config) -> int | None:
    """Parameters of the model this config builds (with the run's tokenizer if it exists), allocating
    nothing; None while the size of a vocabulary sized from the data is not known."""
    run_dir = config.train.output_dir
    if Tokenizer.exists(run_dir):
        tokenizer = Tokenizer(run_dir)
        src_vocab, tgt_vocab, joint = tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint
    elif not config.data.vocab_size:
        return None
    else:
        src_vocab = tgt_vocab = config.data.vocab_size
        joint = config.data.joint_vocab
    with torch.device("meta"):
        return count_parameters(Transformer(config.model, src_vocab, tgt_vocab, joint))


def check_disk_space(run_dir: str, parameters: int, keep_last: int, saves: int) -> None:
    """Fail before any work when the checkpoints this run keeps at once cannot fit on the disk
    (`parameters`: those it trains, all but a train.lora run's frozen base)."""
    size = 12 * parameters + (2 << 20)  # fp32 weights and Adam's moments of the trained, ~2 MB more
    kept = min(keep_last or saves, saves) + 1  # the newest is written before the oldest is deleted
    needed = max(kept - len(checkpoint.list_checkpoints(run_dir)), 1) * size
    free = shutil.disk_usage(run_dir).free
    if free < needed:
        raise UserError(
            f"train.output_dir: {free / 2**20:.0f} MB free on the disk of {run_dir}, but this run keeps up "
            f"to {kept} checkpoints of about {size / 2**20:.0f} MB at once (train.keep_last: {keep_last}); "
            f"free some space or lower train.keep_last"
        )


def train(config: Config) -> dict:
    """Run (or resume) training as configured. Returns the last validation metrics (on rank 0;
    other ranks of a torchrun group return {})."""
    check_data_files(config.data)
    teacher.check_teachers(config.data)
    parent = finetune.parent_checkpoint(config)
    if config.train.tensorboard:
        tensorboard_writer()  # before any work
    processes = from_environment()
    device = select_device(config.train.device, processes.local_rank if processes.enabled else None)
    if not processes.is_main:  # one copy of the progress messages; warnings still come from every rank
        logging.getLogger("mt_transformer").setLevel(logging.WARNING)
    distributed.init_group(processes, device)
    try:
        metrics = _train(config, processes, device, parent)
        distributed.barrier()  # no rank tears its transport down while another still talks to it
        return metrics
    finally:
        distributed.destroy_group()


def prepare_for_all_ranks(config: Config, run_dir: str, processes: Processes, device):
    """The training pairs cleaned (data.clean), then the teacher's translations of their sources
    where a corpus has a teacher (each rank translates its share); then rank 0 trains the tokenizer
    and encodes the data (with word alignments for train.guided_alignment and data.augment's
    inline_tags), and the other ranks load both from the run directory, which must be shared by
    every node."""
    data_config, seed = config.data, config.train.seed
    aligned = config.train.guided_alignment.weight > 0 or any(
        data_config.augment_of(corpus).inline_tags for corpus in data_config.corpus_list()
    )
    if processes.is_main:  # the training pairs cleaned first (data.clean), by one rank
        cleaned = cleaned_corpora(data_config, run_dir, scoring=PairCosts(device, config.train.threads))
    distributed.barrier()
    if not processes.is_main:
        cleaned = cleaned_corpora(data_config, run_dir, False, PairCosts(device, config.train.threads))
    distilled = teacher.distilled_corpora(data_config, run_dir, device, config.train.threads, cleaned)
    train_from = {**cleaned, **distilled}
    if processes.is_main:
        prepared = prepare_data(data_config, run_dir, seed, train_from=train_from, aligned=aligned)
    distributed.barrier()
    if not processes.is_main:
        prepared = prepare_data(data_config, run_dir, seed, train_from=train_from, aligned=aligned)
    if processes.enabled and len(set(distributed.all_gather(prepared[0].fingerprint()))) > 1:
        raise UserError(
            f"train.output_dir: the ranks see different tokenizers in {run_dir}; with several nodes, "
            f"put it on a filesystem that every node shares"
        )
    return prepared


def _train(config: Config, processes: Processes, device: torch.device, parent: str | None) -> dict:
    settings, run_dir = config.train, config.train.output_dir
    if processes.is_main:
        claim_outputs(config)
    distributed.barrier()
    if settings.threads:
        torch.set_num_threads(settings.threads)
    use_fast_matmul(device)
    random.seed(settings.seed)
    np.random.seed(settings.seed)
    torch.manual_seed(settings.seed)

    found = checkpoint.list_checkpoints(run_dir)
    if found:
        finetune.check_compatible(found[-1][1], config)
    if parent and processes.is_main:
        finetune.adopt_tokenizer(parent, run_dir)
    tokenizer, data, corpus_sizes = prepare_for_all_ranks(config, run_dir, processes, device)
    if not config.data.vocab_size:  # the run's config and checkpoints record the size chosen
        chosen = dataclasses.replace(config.data, vocab_size=chosen_vocab_size(run_dir))
        config = dataclasses.replace(config, data=chosen)
    if processes.is_main:
        write_text(os.path.join(run_dir, "config.yaml"), to_yaml(config))

    model = Transformer(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint).to(device)
    model.checkpoint_activations = settings.checkpoint_activations
    adapters = finetune.add_adapters(model, config, parent, found[-1][1] if found else None)
    if settings.weights_dtype == "bf16":
        to_bf16_matrices(model)
    if processes.rank > 0:  # the same initial weights (DDP copies rank 0's anyway), their own dropout masks
        torch.manual_seed(settings.seed + processes.rank)
    config = with_precision(config, model, device, data["train"])
    settings = config.train
    log_setup(model, settings, device, processes)
    if processes.is_main:
        checkpoint_every = min(settings.valid_every, settings.save_every or settings.valid_every)
        check_disk_space(
            run_dir,
            sum(p.numel() for p in model.parameters() if p.requires_grad),  # what a checkpoint holds
            settings.keep_last,
            saves=math.ceil(settings.max_steps / checkpoint_every) + 1,
        )
    sharded = settings.distributed == "fsdp" and processes.enabled
    if sharded and (found or parent):  # whole weights go in before the model is cut into shards
        checkpoint.load_weights(model, found[-1][1] if found else parent)
    forward, ddp = distributed.wrap_for_processes(model, device, processes, settings.compile, sharded)
    state = TrainerState(world_size=processes.world_size)
    optimizer, scheduler, scaler = optimizer_for(
        model, settings, config.model.d_model, device, elapsed=lambda: state.elapsed
    )
    step = TrainingStep(model, optimizer, scheduler, scaler, settings, state, device, forward, ddp, processes)
    if found:
        resume(step, found[-1][1], processes, settings.seed)
    elif parent:
        finetune.start_from(step, parent, settings.init_from_reset)
    loop = TrainingLoop(config, step, tokenizer, data, processes, corpus_sizes)
    loop.metadata.update(adapters)
    with logging_redirect_tqdm():
        if parent and not found:
            loop.validate_start()  # what fine-tuning starts from, to compare its validations with
        return loop.run()


def with_precision(config: Config, model, device: torch.device, train_set) -> Config:
    """The config with train.precision settled: auto chooses for this machine, calibrating on the
    first batches of `train_set` where it must (under torchrun rank 0's choice holds for every rank)."""
    settings = config.train
    precision, why = choose_precision(
        settings.precision,
        device,
        model,
        lambda: first_batches(train_set, settings.max_tokens, settings.seed),
        steps=settings.max_steps,
    )
    precision = distributed.all_gather(precision)[0]
    if precision != config.train.precision:
        log.info("train.precision: %s (%s)", precision, why)
    slow = slow_precision(device, precision)
    if slow:
        log.warning("train.precision: %s", slow)
    return dataclasses.replace(config, train=dataclasses.replace(config.train, precision=precision))


def log_setup(model, settings: TrainConfig, device: torch.device, processes: Processes) -> None:
    log.info(
        "model: %d parameters, %s on %s%s",
        count_parameters(model),
        settings.precision,
        device,
        f" x {processes.world_size} processes" if processes.enabled else "",
    )
    log.info(
        "tokens per update: up to %s (train.max_tokens %s x train.accumulate %d x %d process(es))",
        f"{settings.max_tokens * settings.accumulate * processes.world_size:,}",
        f"{settings.max_tokens:,}",
        settings.accumulate,
        processes.world_size,
    )


def resume(step: TrainingStep, directory: str, processes: Processes, seed: int) -> None:
    """Take back a checkpoint's weights (a sharded model has them already), optimizer, schedule,
    scaler, counters and random state."""
    if not step.sharded:
        checkpoint.load_weights(step.model, directory)
    saved = checkpoint.load_trainer_state(directory)
    step.load_optimizer_state(saved["optimizer"])
    step.scheduler.load_state_dict(saved["scheduler"])
    if saved["scaler"] or not step.scaler.is_enabled():
        step.scaler.load_state_dict(saved["scaler"])
    else:  # the run was bf16 or fp32 until now
        log.info("precision changed to fp16: the loss scale starts at %g", step.scaler.get_scale())
    state = step.state
    for name, value in TrainerState.from_dict(saved).to_dict().items():
        if name != "world_size":
            setattr(state, name, value)
    random_state.restore_rng(saved, step.device, processes.rank, processes.world_size, seed)
    saved_world = saved.get("world_size", 1)
    if saved_world != processes.world_size:  # each rank's position in the epoch, in its new shard
        state.batch_in_epoch = state.batch_in_epoch * saved_world // processes.world_size
        log.info("resuming %d processes' run with %d", saved_world, processes.world_size)
    log.info("resuming from %s (step %d, epoch %d)", directory, state.step, state.epoch + 1)
