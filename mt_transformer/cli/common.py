"""What the commands share: the entry-point wrapper (one-line errors, exit codes), the config and
decoding options, writing output, and loading a translator from the flags."""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import os
import signal
import sys

from mt_transformer.errors import UserError
from mt_transformer.signals import Terminated, terminate_by_exception

log = logging.getLogger("mt_transformer")
# every command logs to stderr as "12:34:56 | message"
LOG_FORMAT, LOG_DATE_FORMAT = "%(asctime)s | %(message)s", "%H:%M:%S"


# what the user's disk or paths cause: a full disk, a path not writable, a directory where a file is named
USER_ERRNOS = (
    errno.ENOSPC,
    errno.EDQUOT,
    errno.EACCES,
    errno.EPERM,
    errno.EROFS,
    errno.EISDIR,
    errno.ENOTDIR,
    errno.ENAMETOOLONG,
)


def entry_point(function):
    """Logging to stderr; user errors and a full or unwritable disk become `error: ...` and exit code 2, Ctrl-C 130,
    a job stopped by a signal 128 + the signal, a reader that closed the pipe early (`| head`) 141, as SIGPIPE.
    SIGTERM where the command does not handle it ends it as Ctrl-C does, its temporary files removed: 143."""
    from mt_transformer.jobs.job import JobStopped

    @functools.wraps(function)
    def main(argv=None) -> int:
        logging.basicConfig(level=logging.INFO, format=LOG_FORMAT, datefmt=LOG_DATE_FORMAT, stream=sys.stderr)
        terminate_by_exception()
        try:
            return function(argv) or 0
        except Terminated:
            print("terminated", file=sys.stderr)
            return 128 + signal.SIGTERM
        except JobStopped as stopped:
            print(stopped, file=sys.stderr)
            return 128 + stopped.signum
        except BrokenPipeError:
            # nothing more can reach the reader: send what Python still flushes at exit nowhere
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + signal.SIGPIPE
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except OSError as error:
            if error.errno not in USER_ERRNOS:
                raise
            print(f"error: {error.filename or 'writing'}: {error.strerror}", file=sys.stderr)
            return 2

    return lambda argv=None: sys.exit(main(argv))


class Parser(argparse.ArgumentParser):
    """argparse whose mistakes (a missing option, a number out of range) are one line, `error: ...`
    and exit code 2, as every other mistake is."""

    def error(self, message):
        self.exit(2, f"error: {message} ({self.prog} --help lists the options)\n")


def whole(minimum: int, maximum: int | None = None):
    """An argparse type: a whole number from `minimum` (to `maximum`); else argparse's one-line error, exit 2."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a whole number, not {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            within = f"from {minimum} to {maximum}" if maximum is not None else f"at least {minimum}"
            raise argparse.ArgumentTypeError(f"must be {within}, not {value}")
        return value

    return parse


def at_least(minimum: float):
    """An argparse type: a finite number from `minimum` on."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, not {text!r}") from None
        if not minimum <= value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be {minimum:g} or more, not {text}")
        return value

    return parse


def config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config file")
    parser.add_argument(
        "--set",
        nargs="+",
        action="extend",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override config keys, e.g. --set train.max_steps=100 model.dropout=0.3",
    )


def config_keys() -> str:
    """Every config key with its default, by section: what `--set` can change, for --help."""
    import dataclasses
    import textwrap

    from mt_transformer.config import Config

    def shown(value) -> str:
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(shown(v) for v in value) + "]"
        if value is None:
            return "null"
        return str(value).lower() if isinstance(value, bool) else str(value)

    lines = ["config keys and their defaults (their meanings: mt_transformer/config/sections.py, training.py):"]
    defaults = Config()
    for section in dataclasses.fields(defaults):
        values = getattr(defaults, section.name)
        keys = " ".join(f"{f.name}={shown(getattr(values, f.name))}" for f in dataclasses.fields(values))
        lines += textwrap.wrap(keys, width=100, initial_indent=f"  {section.name}: ", subsequent_indent="    ")
    return "\n".join(lines)


def decode_options(parser: argparse.ArgumentParser, checkpoint_required: bool = True) -> None:
    """The options of every command that translates: the model(s), the search, where it runs."""
    model_options(parser, checkpoint_required)
    _search_options(parser)
    runtime_options(parser)


def model_options(parser: argparse.ArgumentParser, checkpoint_required: bool) -> None:
    parser.add_argument(
        "--checkpoint",
        nargs="+",
        required=checkpoint_required,
        help="a run directory (its best checkpoint) or one checkpoint; several: their ensemble",
    )
    parser.add_argument(
        "--ensemble-mode",
        choices=["logprob", "prob"],
        default="logprob",
        help="how an ensemble combines its models' next-token distributions: the mean of the "
        "log-probabilities (default) or of the probabilities",
    )


def _search_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--beam", type=whole(1), help="beam size (default: the checkpoint's decode.beam_size)")
    parser.add_argument("--alpha", type=float, help="length penalty alpha (default: decode.alpha)")
    parser.add_argument("--max-tokens", type=whole(1), help="source tokens per batch (default: decode.max_tokens)")
    parser.add_argument(
        "--max-input-len",
        type=whole(0),
        help="inputs of more subwords are cut at sentence or word boundaries and translated in parts "
        "(default: decode.max_input_len, else the training data.max_len)",
    )
    parser.add_argument(
        "--no-repeat-ngram", type=whole(0), metavar="N", help="no n-gram of N tokens twice in an output (0: allowed)"
    )
    parser.add_argument(
        "--sampling",
        action="store_true",
        default=None,
        help="draw each translation from the model's distribution instead of searching (--nbest N: N draws)",
    )
    parser.add_argument("--topk", type=whole(0), help="with --sampling: draw among the K most probable tokens (0: all)")
    parser.add_argument(
        "--topp", type=float, help="with --sampling: draw among the most probable tokens holding probability P"
    )
    parser.add_argument("--temperature", type=float, help="with --sampling: <1 sharpens, >1 flattens (default 1)")
    parser.add_argument("--seed", type=int, help="with --sampling: the random seed (default: decode.seed, 1)")
    parser.add_argument(
        "--tgt-lang",
        metavar="XX",
        help="the language to translate into, for a model trained with data.target_tags (each input then "
        "begins with the tag <2XX>; default: its one target language); mt-eval also tokenizes BLEU for "
        "zh, ja and ko as sacreBLEU does for them (default: the checkpoint's target language); for an "
        "imported NLLB or M2M100 model, its language code (eng_Latn, de)",
    )
    parser.add_argument(
        "--src-lang",
        metavar="XX",
        help="for an imported NLLB or M2M100 model: the inputs' language code (default: the checkpoint's)",
    )


def runtime_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "fp16", "int8"],
        help="fp32; int8 (CPU): CTranslate2's int8 weights, the fastest on most CPUs (ours computes in fp32); bf16 "
        "or fp16: our engine's matrix products under autocast, for GPUs and CPUs with bf16/fp16 units; auto: "
        "bf16 where the device has bf16 units, else fp32 (default: the checkpoint's decode.precision, fp32 "
        "unless set)",
    )
    parser.add_argument(
        "--engine",
        default="auto",
        choices=["auto", "torch", "ctranslate2"],
        help="auto (default): CTranslate2 on a CPU for what it computes (converting the checkpoint once, "
        "into CHECKPOINT/ctranslate2), else ours; torch: ours; ctranslate2: --checkpoint is a checkpoint "
        "run through its conversion or a directory written by mt-export --format ctranslate2",
    )
    parser.add_argument(
        "--compute-type",
        default="default",
        help="for CTranslate2: float32, int8, int8_float32, ... (default: --precision's, else as exported)",
    )
    parser.add_argument(
        "--threads", type=whole(0), default=0, help="for CTranslate2: CPU threads (default: one per physical core)"
    )
    parser.add_argument(
        "--worker-threads",
        type=whole(1),
        default=1,
        help="for CTranslate2 on a CPU: the threads of each worker, --threads / this workers (default 1: one "
        "thread per sentence, the most sentences per second; as many as --threads: one worker, the fastest "
        "single sentence on some CPUs; scripts/engine_bench.py measures both)",
    )


# decode settings and the flags that override them
DECODE_FLAGS = {
    "beam_size": "--beam",
    "alpha": "--alpha",
    "max_tokens": "--max-tokens",
    "max_input_len": "--max-input-len",
    "n_best": "--nbest",
    "no_repeat_ngram": "--no-repeat-ngram",
    "sampling": "--sampling",
    "topk": "--topk",
    "topp": "--topp",
    "temperature": "--temperature",
    "seed": "--seed",
    "precision": "--precision",
}


def translator_from_args(args, n_best: int = 1):
    """The translator of --checkpoint with the flags' decode settings (loaded once, for any
    number of batches of lines), on the engine --engine names or auto picks for the flags given."""
    from mt_transformer.config import ConfigError
    from mt_transformer.decoding.engines import open_translator
    from mt_transformer.decoding.runtime import TORCH_ONLY

    decode = {key: getattr(args, flag[2:].replace("-", "_"), None) for key, flag in DECODE_FLAGS.items()}
    decode["n_best"] = n_best
    needs = [need for need in TORCH_ONLY if getattr(args, need, None)]
    try:
        return open_translator(
            args.checkpoint,
            args.engine,
            args.device,
            args.compute_type,
            args.threads,
            args.ensemble_mode,
            needs=needs,
            tgt_lang=args.tgt_lang,
            src_lang=getattr(args, "src_lang", None),
            worker_threads=args.worker_threads,
            **decode,
        )
    except ConfigError as error:  # name the flag, not the config key it overrides
        message = str(error)
        for key, flag in DECODE_FLAGS.items():
            if decode[key] is not None:
                message = message.replace(f"decode.{key}", flag)
        raise UserError(message) from None


def write_output(path: str | None, text: str) -> None:
    from mt_transformer.files import write_text

    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_text(path, text)
