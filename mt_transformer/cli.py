"""Command-line entry points: mt-train, mt-prepare, mt-translate, mt-eval, mt-export, mt-average, mt-plot.

Each parses its arguments, calls into the package, and turns a UserError into one line on
stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import errno
import functools
import json
import logging
import os
import sys

from mt_transformer.errors import UserError

log = logging.getLogger("mt_transformer")


def _entry_point(function):
    """Logging to stderr; user errors and a full disk become `error: ...` and exit code 2, Ctrl-C exit code 130."""

    @functools.wraps(function)
    def main(argv=None) -> int:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s | %(message)s", datefmt="%H:%M:%S", stream=sys.stderr
        )
        try:
            return function(argv) or 0
        except UserError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
        except OSError as error:
            if error.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            print(f"error: {error.filename or 'writing'}: {error.strerror}", file=sys.stderr)
            return 2

    return lambda argv=None: sys.exit(main(argv))


def _config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML config file")
    parser.add_argument(
        "--set",
        nargs="+",
        action="extend",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override config keys, e.g. --set train.max_steps=100 model.dropout=0.3",
    )


@_entry_point
def train_main(argv=None):
    parser = argparse.ArgumentParser(prog="mt-train", description="Train a Transformer translation model.")
    _config_options(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="print the resolved config and parameter count, then stop"
    )
    args = parser.parse_args(argv)

    from mt_transformer.config import load_config, to_yaml
    from mt_transformer.training.stop_policy import TrainingStopped
    from mt_transformer.training.train import parameter_count, train

    config = load_config(args.config, args.set)
    if args.dry_run:
        print(to_yaml(config), end="")
        print(f"parameters: {parameter_count(config)}")
        return 0
    try:
        metrics = train(config)
    except TrainingStopped as stopped:
        print(stopped, file=sys.stderr)
        return 128 + stopped.signum
    if "valid_bleu" in metrics:
        print(f"valid BLEU {metrics['valid_bleu']:.2f} at step {metrics['step']}")


@_entry_point
def prepare_main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mt-prepare",
        description="Train the tokenizer and encode the training and valid data of a config, without training: "
        "mt-train with the same config (every torchrun rank, and every later run) loads the result.",
    )
    _config_options(parser)
    args = parser.parse_args(argv)

    from mt_transformer.config import check_data_files, load_config
    from mt_transformer.data.prepare import prepare_data
    from mt_transformer.files import directory_size
    from mt_transformer.training.train import check_output_dir

    config = load_config(args.config, args.set)
    check_data_files(config.data)
    run_dir = config.train.output_dir
    check_output_dir(run_dir)
    _, encoded = prepare_data(config.data, run_dir, config.train.seed)
    cache_dir = config.data.cache_dir or os.path.join(run_dir, "cache")
    counts = ", ".join(f"{split} {len(dataset)} pairs" for split, dataset in encoded.items())
    print(
        f"prepared {counts}: tokenizer in {run_dir}, encoded data in {cache_dir} "
        f"({directory_size(cache_dir) / 2**20:.1f} MB)"
    )


def _read_input(path: str | None) -> list[str]:
    from mt_transformer.evaluation.scores import read_lines

    if path is None or path == "-":
        return [line.removesuffix("\n").removesuffix("\r") for line in sys.stdin]
    return read_lines(path)


def _decode_options(parser: argparse.ArgumentParser, checkpoint_required: bool = True) -> None:
    parser.add_argument(
        "--checkpoint", required=checkpoint_required, help="a run directory (its best checkpoint) or one checkpoint"
    )
    parser.add_argument("--beam", type=int, help="beam size (default: the checkpoint's decode.beam_size)")
    parser.add_argument("--alpha", type=float, help="length penalty alpha (default: decode.alpha)")
    parser.add_argument("--max-tokens", type=int, help="source tokens per batch (default: decode.max_tokens)")
    parser.add_argument(
        "--max-input-len",
        type=int,
        help="inputs of more subwords are cut at sentence or word boundaries and translated in parts "
        "(default: decode.max_input_len, else the training data.max_len)",
    )
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument(
        "--engine",
        default="torch",
        choices=["torch", "ctranslate2"],
        help="ctranslate2: --checkpoint is a directory written by mt-export --format ctranslate2",
    )
    parser.add_argument(
        "--compute-type",
        default="default",
        help="with --engine ctranslate2: float32, int8, int8_float32, ... (default: as exported)",
    )
    parser.add_argument(
        "--threads", type=int, default=0, help="with --engine ctranslate2: CPU threads (default: as many as torch uses)"
    )


# decode settings and the flags that override them
_DECODE_FLAGS = {
    "beam_size": "--beam",
    "alpha": "--alpha",
    "max_tokens": "--max-tokens",
    "max_input_len": "--max-input-len",
    "n_best": "--nbest",
}


def _translator(args, n_best: int = 1):
    """The translator of --checkpoint with the flags' decode settings (loaded once, for any
    number of batches of lines)."""
    from mt_transformer.config import ConfigError
    from mt_transformer.decoding.translator import load_translator

    decode = {
        "beam_size": args.beam,
        "alpha": args.alpha,
        "max_tokens": args.max_tokens,
        "max_input_len": args.max_input_len,
        "n_best": n_best,
    }
    try:
        return load_translator(args.checkpoint, args.engine, args.device, args.compute_type, args.threads, **decode)
    except ConfigError as error:  # name the flag, not the config key it overrides
        message = str(error)
        for key, flag in _DECODE_FLAGS.items():
            if decode[key] is not None:
                message = message.replace(f"decode.{key}", flag)
        raise UserError(message) from None


def _write_output(path: str | None, text: str) -> None:
    from mt_transformer.files import write_text

    if path is None or path == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        write_text(path, text)


@_entry_point
def translate_main(argv=None):
    parser = argparse.ArgumentParser(prog="mt-translate", description="Translate a text file, one sentence per line.")
    _decode_options(parser)
    parser.add_argument("-i", "--input", help="input file (default: stdin)")
    parser.add_argument("-o", "--output", help="output file, written atomically (default: stdout)")
    parser.add_argument(
        "--nbest", type=int, default=1, help="K best translations per line, printed as INDEX<TAB>SCORE<TAB>TEXT"
    )
    parser.add_argument(
        "--scores",
        action="store_true",
        help="print each translation as SCORE<TAB>LOG_PROB<TAB>TEXT (with --nbest: "
        "INDEX<TAB>SCORE<TAB>LOG_PROB<TAB>TEXT): the length-normalised score the beam ranks by "
        "and the summed token log-probability",
    )
    parser.add_argument(
        "--alignment",
        action="store_true",
        help="add TAB + hard word alignments from the cross-attention to each line, as "
        "source-target pairs of 0-based word positions: 0-0 1-2 2-1",
    )
    parser.add_argument(
        "--attention",
        metavar="OUT_DIR",
        help="write a heatmap of the cross-attention of each translation to OUT_DIR/NNNN.png "
        "(NNNN: the input line, from 0000)",
    )
    parser.add_argument(
        "--attention-layer",
        type=int,
        metavar="N",
        help="the decoder layer for --attention and --alignment, from 1 (default: the last)",
    )
    parser.add_argument(
        "--attention-head", type=int, metavar="H", help="one attention head, from 1 (default: the mean of all heads)"
    )
    args = parser.parse_args(argv)
    if args.nbest < 1:
        raise UserError(f"--nbest: must be at least 1, got {args.nbest}")
    inspect = args.attention or args.alignment
    if inspect and args.engine != "torch":
        raise UserError("--attention and --alignment need --engine torch (CTranslate2 does not return attention)")
    if args.input in (None, "-") and args.output in (None, "-") and sys.stdin.isatty():
        return _translate_interactively(args)
    lines = _read_input(args.input)
    translator = _translator(args, n_best=args.nbest)
    results = translator(lines, progress=True)
    alignments = _inspect(args, translator, lines, results) if inspect else None
    _write_output(args.output, "".join(_format_translations(results, args, alignments)))


def _inspect(args, translator, lines: list[str], results, first_index: int = 0):
    """Write the heatmaps of --attention; returns each hypothesis's word alignment when --alignment
    asks for them, else None."""
    from mt_transformer.decoding.alignment import inspect_translations

    layers, heads = len(translator.model.decoder), translator.config.model.n_heads
    for name, value, count in (
        ("--attention-layer", args.attention_layer, layers),
        ("--attention-head", args.attention_head, heads),
    ):
        if value is not None and not 1 <= value <= count:
            raise UserError(f"{name}: {value} is not between 1 and {count}")
    alignments = inspect_translations(
        translator.model,
        translator.tokenizer,
        translator.device,
        lines,
        results,
        args.attention,
        (args.attention_layer or layers) - 1,
        args.attention_head - 1 if args.attention_head else None,
        first_index,
    )
    return alignments if args.alignment else None


def _translate_interactively(args) -> None:
    """A terminal on stdin: translate each line as soon as it is entered, until end of input (Ctrl-D)."""
    translator = _translator(args, args.nbest)
    print("type a sentence and press Enter; Ctrl-D ends", file=sys.stderr, flush=True)
    for index, line in enumerate(sys.stdin):
        lines = [line.removesuffix("\n").removesuffix("\r")]
        results = translator(lines)
        alignments = _inspect(args, translator, lines, results, index) if args.attention or args.alignment else None
        sys.stdout.write("".join(_format_translations(results, args, alignments, index)))
        sys.stdout.flush()


def _format_translations(results, args, alignments=None, first_index: int = 0):
    """Output lines: the text; with --scores SCORE, LOG_PROB before it; with --nbest the input's 0-based
    index first and every hypothesis a line; with --alignment the alignment after it. Tab-separated."""
    nbest = args.nbest > 1
    for index, translations in enumerate(results):
        for k, translation in enumerate(translations if nbest else translations[:1]):
            fields = [str(first_index + index)] if nbest else []
            if nbest or args.scores:
                fields.append(f"{translation.score:.4f}")
            if args.scores:
                fields.append(f"{translation.log_prob:.4f}")
            fields.append(translation.text)
            if alignments is not None:
                fields.append(alignments[index][k])
            yield "\t".join(fields) + "\n"


@_entry_point
def eval_main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mt-eval", description="Score translations with sacreBLEU (BLEU, chrF, TER), or translate and score."
    )
    parser.add_argument("--hyp", help="hypothesis file (detokenized)")
    parser.add_argument("--ref", required=True, help="reference file")
    parser.add_argument("--src", help="with --checkpoint: source file to translate, then score")
    _decode_options(parser, checkpoint_required=False)
    parser.add_argument("-o", "--output", help="with --checkpoint: also write the translations here")
    parser.add_argument("--metrics", nargs="+", default=["bleu", "chrf"], choices=["bleu", "chrf", "ter"])
    parser.add_argument(
        "--tgt-lang",
        help="target language code: BLEU tokenizes zh, ja and ko text as sacreBLEU "
        "does for them (default: the checkpoint's data.tgt_lang with --checkpoint)",
    )
    parser.add_argument(
        "--compare",
        metavar="BASELINE",
        help="a second system's translations of the same source: "
        "paired bootstrap resampling and approximate randomization (sacreBLEU's) say whether the "
        "hypotheses differ from it by more than chance",
    )
    parser.add_argument(
        "--tests",
        nargs="+",
        default=["bootstrap", "randomization"],
        choices=["bootstrap", "randomization"],
        help="with --compare: which paired tests (default: both)",
    )
    parser.add_argument("--sentence", action="store_true", help="also score every sentence (sentence BLEU, chrF)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    from mt_transformer.evaluation.scores import (
        format_scores,
        format_significance,
        paired_significance,
        read_lines,
        score,
        sentence_scores,
    )

    references = read_lines(args.ref)
    tgt_lang = args.tgt_lang
    if args.checkpoint:
        if not args.src:
            raise UserError("--src: required with --checkpoint")
        translator = _translator(args)
        results = translator(read_lines(args.src), progress=True)
        hypotheses = [r[0].text for r in results]
        tgt_lang = tgt_lang or translator.config.data.tgt_lang
        if args.output:
            _write_output(args.output, "".join(h + "\n" for h in hypotheses))
    elif args.hyp:
        hypotheses = read_lines(args.hyp)
    else:
        raise UserError("--hyp: required (or --checkpoint with --src)")
    if len(hypotheses) != len(references):
        raise UserError(f"{args.hyp or args.src} has {len(hypotheses)} lines but {args.ref} has {len(references)}")
    system = args.hyp or "translations"
    result = score(hypotheses, references, args.metrics, tgt_lang)
    text = [format_scores(result)]
    if args.compare:
        baseline = read_lines(args.compare)
        if len(baseline) != len(references):
            raise UserError(f"{args.compare} has {len(baseline)} lines but {args.ref} has {len(references)}")
        result["compare"] = paired_significance(hypotheses, baseline, references, args.metrics, tgt_lang, args.tests)
        text.append(format_significance(result["compare"], system, args.compare))
    if args.sentence:
        result["sentences"] = sentence_scores(hypotheses, references, args.metrics, tgt_lang)
        text.append(
            "\n".join(
                ["line\t" + "\t".join(n.upper() for n in args.metrics)]
                + [
                    f"{i}\t" + "\t".join(f"{row[n]:.2f}" for n in args.metrics)
                    for i, row in enumerate(result["sentences"], start=1)
                ]
            )
        )
    print(json.dumps(result) if args.json else "\n".join(text))


@_entry_point
def export_main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mt-export", description="Convert a trained checkpoint for deployment with another inference engine."
    )
    parser.add_argument("--checkpoint", required=True, help="a run directory (its best checkpoint) or one checkpoint")
    parser.add_argument("--format", required=True, choices=["ctranslate2"], help="the engine to export for")
    parser.add_argument(
        "--quantization",
        choices=["int8", "int8_float32", "int16", "float16", "bfloat16"],
        help="store the weights quantized (default: float32; the compute type can still be chosen at translation time)",
    )
    parser.add_argument("output_dir", help="the directory to write (replaced if it exists)")
    args = parser.parse_args(argv)

    import torch

    from mt_transformer import checkpoint
    from mt_transformer.decoding import ctranslate2_engine

    ctranslate2_engine.import_ctranslate2()  # a clear message before the model is loaded
    ctranslate2_engine.export(checkpoint.load(args.checkpoint, torch.device("cpu")), args.output_dir, args.quantization)
    print(
        f"wrote {args.output_dir} (CTranslate2; translate with: mt-translate --engine ctranslate2 "
        f"--checkpoint {args.output_dir})"
    )


@_entry_point
def average_main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mt-average", description="Average the weights of several checkpoints of one run (paper section 6.1)."
    )
    parser.add_argument(
        "--inputs", nargs="+", required=True, help="checkpoint directories, or with --last one run directory"
    )
    parser.add_argument("--last", type=int, help="average the N newest checkpoints of the run given in --inputs")
    parser.add_argument("--output", required=True, help="the checkpoint directory to write (replaced if it exists)")
    args = parser.parse_args(argv)

    from mt_transformer.evaluation.average import average_checkpoints, last_checkpoints

    inputs = args.inputs
    if args.last is not None:
        if len(inputs) != 1:
            raise UserError("--last: give exactly one run directory in --inputs")
        if args.last < 1:
            raise UserError(f"--last: must be at least 1, got {args.last}")
        inputs = last_checkpoints(inputs[0], args.last)
    average_checkpoints(inputs, args.output)
    print(
        f"wrote {args.output}: the average of {len(inputs)} checkpoints "
        f"({', '.join(os.path.basename(os.path.normpath(i)) for i in inputs)})"
    )


@_entry_point
def plot_main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mt-plot",
        description="Draw the training curves of one or several runs on shared axes (from their "
        "metrics.jsonl): loss, valid BLEU, learning rate and tokens/s against the step.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (train.output_dir)")
    parser.add_argument("-o", "--output", default="curves.png", help="the PNG to write (default: curves.png)")
    args = parser.parse_args(argv)

    from mt_transformer.evaluation.plots import plot_curves, read_metrics

    runs = []
    for run_dir in args.runs:
        if not os.path.isfile(os.path.join(run_dir, "metrics.jsonl")):
            raise UserError(f"{run_dir}: no metrics.jsonl (not a run directory, or no step logged yet)")
        runs.append((os.path.basename(os.path.normpath(run_dir)), read_metrics(run_dir)))
    plot_curves(runs, args.output)
    print(f"wrote {args.output}")
