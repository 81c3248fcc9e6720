"""mt-train and mt-prepare."""

from __future__ import annotations

import argparse
import sys

from mt_transformer.cli.common import Parser, config_keys, config_options, entry_point, whole
from mt_transformer.errors import UserError


@entry_point
def train_main(argv=None):
    parser = Parser(
        prog="mt-train",
        description="Train a Transformer translation model.",
        epilog=config_keys(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    config_options(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the resolved config and parameter count, then stop"
    )
    args = parser.parse_args(argv)

    from mt_transformer.config import load_config, to_yaml
    from mt_transformer.jobs.job import JobStopped
    from mt_transformer.training.stop_policy import TrainingStopped
    from mt_transformer.training.train import parameter_count, train

    config = load_config(args.config, args.set)
    if args.dry_run:
        print(to_yaml(config), end="")
        count = parameter_count(config)
        print(f"parameters: {count if count else 'known once data.vocab_size 0 has chosen a size from the data'}")
        return 0
    try:
        metrics = train(config)
    except (TrainingStopped, JobStopped) as stopped:  # JobStopped: in the teacher's translation
        print(stopped, file=sys.stderr)
        return 128 + stopped.signum
    if "valid_bleu" in metrics:
        print(f"valid BLEU {metrics['valid_bleu']:.2f} at step {metrics['step']}")


@entry_point
def prepare_main(argv=None):
    parser = Parser(
        prog="mt-prepare",
        description="Train the tokenizer and encode the training and valid data of a config, without training: "
        "mt-train with the same config (every torchrun rank, and every later run) loads the result.",
    )
    config_options(parser)
    parser.add_argument(
        "--show-augmented",
        type=whole(1),
        metavar="N",
        default=0,
        help="print N training pairs as data.augment changes them (with the changed source's subword pieces)",
    )
    args = parser.parse_args(argv)

    from mt_transformer.config import check_data_files, load_config
    from mt_transformer.data.cache import cache_directory
    from mt_transformer.devices import select_device
    from mt_transformer.files import directory_size
    from mt_transformer.jobs.job import JobStopped
    from mt_transformer.processes import from_environment
    from mt_transformer.training import distributed, teacher
    from mt_transformer.training.train import claim_outputs, prepare_for_all_ranks

    config = load_config(args.config, args.set)
    check_data_files(config.data)
    teacher.check_teachers(config.data)
    if args.show_augmented and not any(config.data.augment_of(c).active for c in config.data.corpus_list()):
        raise UserError("--show-augmented: data.augment changes no pair in this config")
    run_dir = config.train.output_dir
    device = select_device(config.train.device)
    processes = from_environment()
    distributed.init_group(processes, device)  # under torchrun: every rank waits for the others' shares
    try:
        if processes.is_main:  # one rank claims the run and cache directories, before any rank writes there
            claim_outputs(config)
        distributed.barrier()
        _, encoded, sizes = prepare_for_all_ranks(config, run_dir, processes, device)
    except JobStopped as stopped:
        print(stopped, file=sys.stderr)
        return 128 + stopped.signum
    finally:
        distributed.destroy_group()
    if args.show_augmented:
        show_augmented(config, encoded["train"], sizes, args.show_augmented)
    cache_dir = cache_directory(config.data, run_dir)
    counts = ", ".join(f"{split} {len(dataset)} pairs" for split, dataset in encoded.items())
    print(
        f"prepared {counts}: tokenizer in {run_dir}, encoded data in {cache_dir} "
        f"({directory_size(cache_dir) / 2**20:.1f} MB)"
    )


def show_augmented(config, train, sizes: list[int], count: int) -> None:
    """mt-prepare --show-augmented: changed pairs, as the first epoch's batches change them."""
    from mt_transformer.data.augment import PairAugmenter
    from mt_transformer.data.tokenizer import Tokenizer

    data = config.data
    settings = [data.augment_of(corpus) for corpus in data.corpus_list()]
    tokenizer = Tokenizer(config.train.output_dir)
    augmenter = PairAugmenter(None, settings, sizes, data.tags)
    for src, tgt, new_src, new_tgt in augmenter.examples(train, count, config.train.seed):
        pieces = " ".join(tokenizer.src_pieces(tokenizer.encode_src([new_src])[0]))
        print(f"{src}\t{tgt}\n{new_src}\t{new_tgt}\n{pieces}\n")
