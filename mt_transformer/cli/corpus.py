"""What mt-translate and mt-score share for corpora: the flags of streaming, continuing and
sharding, the settings a partial output is continued under, and running one job in one process,
as one shard, or as every rank of torchrun (rank 0 then merges)."""

from __future__ import annotations

import argparse
import datetime
import logging
from collections.abc import Callable, Iterator

from mt_transformer.cli.common import whole
from mt_transformer.errors import UserError

log = logging.getLogger(__name__)

# Lines read, sorted by length and batched at a time: throughput close to sorting a whole corpus
# at once, with memory that does not grow with the corpus (docs/benchmarks.md, "Translating corpora").
BUFFER_LINES = 10_000
# flags that decide where output goes, not what it is
NOT_SETTINGS = {"input", "output", "restart", "merge", "shard", "buffer_lines", "src", "tgt"}


def corpus_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--buffer-lines",
        type=whole(1),
        default=BUFFER_LINES,
        metavar="N",
        help=f"read, sort by length and write N lines at a time, so memory does not grow with the input "
        f"(the first windows are smaller, so a pipe sees output soon; default {BUFFER_LINES})",
    )
    parser.add_argument(
        "--restart",
        action="store_true",
        help="with -o FILE: start over instead of continuing the FILE.partial an interrupted run left",
    )
    parser.add_argument(
        "--shard",
        metavar="K/N",
        help="process only windows K, K+N, K+2N, ... (0 <= K < N), into -o FILE; --merge joins the N shards",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        metavar="SHARD",
        help="put the -o files of all N shards of one --shard job back in input order, into -o FILE",
    )


def check_corpus_flags(args) -> None:
    if args.buffer_lines < 1:
        raise UserError(f"--buffer-lines: must be at least 1, got {args.buffer_lines}")
    if (args.shard or args.merge) and args.output in (None, "-"):
        raise UserError(f"{'--shard' if args.shard else '--merge'}: needs -o FILE")


def merge(args) -> None:
    from mt_transformer.jobs.records import merge_shards

    lines = merge_shards(args.merge, args.output)
    print(f"merged {len(args.merge)} shards: {lines} lines in {args.output}", flush=True)


def settings_of(args) -> dict:
    """The flags that decide the output, by flag name, with the model files' identity for --checkpoint."""
    from mt_transformer import checkpoint

    settings = {}
    for name, value in sorted(vars(args).items()):
        if name in NOT_SETTINGS:
            continue
        if name == "checkpoint":
            value = [checkpoint.identity(path) for path in value]
        settings["--" + name.replace("_", "-")] = value
    return settings


def run_corpus_job(
    args,
    streams: Callable[[], tuple[list[Iterator[str]], list[str]]],
    total: int | None,
    make_work: Callable[[], Callable],
) -> None:
    """Process the corpus in windows into args.output: in this process, as --shard K/N, or under
    torchrun as rank K of N (on GPU K of the node with --device auto), where rank 0 merges the
    shards into args.output when all are done. streams(): the input line streams and their names;
    make_work(): the function from (window, advance) to its output lines, loaded once."""
    from mt_transformer.decoding.runtime import device_name
    from mt_transformer.jobs.job import CorpusJob
    from mt_transformer.jobs.windows import Shard, read_windows
    from mt_transformer.processes import from_environment

    settings = settings_of(args)
    processes = from_environment()
    shard = Shard.parse(args.shard) if args.shard else Shard()
    output = args.output
    if processes.enabled:
        if args.shard or args.output in (None, "-"):
            raise UserError("under torchrun: needs -o FILE and no --shard (each rank takes its own)")
        shard = Shard(processes.rank, processes.world_size)
        output = shard.path(args.output)
        if args.device == "auto" and device_name("auto") != "cpu":
            args.device = f"cuda:{processes.local_rank}"
    job = CorpusJob(output, settings, args.buffer_lines, shard, args.restart)
    work = make_work()
    inputs, names = streams()
    job.run(read_windows(inputs, names, args.buffer_lines), work, total, progress=processes.is_main)
    if processes.enabled:
        _merge_ranks(args.output, processes)


def translate_file(translator, path: str) -> list[str]:
    """The best translation of every line of a file, read in windows of BUFFER_LINES (mt-eval)."""
    from tqdm import tqdm

    from mt_transformer.data.text import count_lines, stream_lines
    from mt_transformer.jobs.windows import read_windows

    translations = []
    with tqdm(total=count_lines(path), unit="sent", leave=False, dynamic_ncols=True) as bar:
        for window in read_windows([stream_lines(path)], [path], BUFFER_LINES):
            translator.reseed(window.index)
            results = translator([line for (line,) in window.rows], progress=bar.update)
            translations += [result[0].text for result in results]
    return translations


def _merge_ranks(output: str, processes) -> None:
    """After every rank has written its shard: rank 0 merges them into `output` and removes them."""
    import torch.distributed as dist

    from mt_transformer.jobs.records import merge_rank_shards

    if not dist.is_initialized():  # gloo only waits here; ranks may finish hours apart
        dist.init_process_group("gloo", timeout=datetime.timedelta(days=7))
    dist.barrier()
    if processes.is_main:
        lines = merge_rank_shards(output, processes.world_size)
        log.info("%d ranks' shards merged: %d lines in %s", processes.world_size, lines, output)
    dist.barrier()
    dist.destroy_process_group()
