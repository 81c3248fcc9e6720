"""Command-line entry points: mt-train, mt-translate, mt-eval, mt-export, mt-average.

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

from .config import UserError

log = logging.getLogger("mt_transformer")


def _entry_point(function):
    """Logging to stderr; user errors and a full disk become `error: ...` and exit code 2, Ctrl-C exit code 130."""

    @functools.wraps(function)
    def main(argv=None) -> int:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(message)s", datefmt="%H:%M:%S",
                            stream=sys.stderr)
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


def _device(name: str):
    from .train import select_device

    return select_device(name)


@_entry_point
def train_main(argv=None):
    parser = argparse.ArgumentParser(prog="mt-train", description="Train a Transformer translation model.")
    parser.add_argument("--config", required=True, help="YAML config file")
    parser.add_argument("--set", nargs="+", action="extend", default=[], metavar="SECTION.KEY=VALUE",
                        help="override config keys, e.g. --set train.max_steps=100 model.dropout=0.3")
    parser.add_argument("--dry-run", action="store_true", help="print the resolved config and parameter count, then stop")
    args = parser.parse_args(argv)

    from .config import load_config, to_yaml
    from .train import TrainingStopped, parameter_count, train

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


def _read_input(path: str | None) -> list[str]:
    from .evaluate import read_lines

    if path is None or path == "-":
        return [line.removesuffix("\n").removesuffix("\r") for line in sys.stdin]
    return read_lines(path)


def _decode_options(parser: argparse.ArgumentParser, checkpoint_required: bool = True) -> None:
    parser.add_argument("--checkpoint", required=checkpoint_required,
                        help="a run directory (its best checkpoint) or one checkpoint")
    parser.add_argument("--beam", type=int, help="beam size (default: the checkpoint's decode.beam_size)")
    parser.add_argument("--alpha", type=float, help="length penalty alpha (default: decode.alpha)")
    parser.add_argument("--max-tokens", type=int, help="source tokens per batch (default: decode.max_tokens)")
    parser.add_argument("--max-input-len", type=int,
                        help="inputs of more subwords are cut at sentence or word boundaries and translated in parts "
                             "(default: decode.max_input_len, else the training data.max_len)")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument("--engine", default="torch", choices=["torch", "ctranslate2"],
                        help="ctranslate2: --checkpoint is a directory written by mt-export --format ctranslate2")
    parser.add_argument("--compute-type", default="default",
                        help="with --engine ctranslate2: float32, int8, int8_float32, ... (default: as exported)")
    parser.add_argument("--threads", type=int, default=0,
                        help="with --engine ctranslate2: CPU threads (default: as many as torch uses)")


def _translate(args, lines: list[str], n_best: int = 1):
    """The translations of `lines` and the checkpoint's config (a dict of its sections)."""
    from .translate import load_translator, translate_lines, translate_with

    if args.engine == "ctranslate2":
        from . import ctranslate2_engine

        device = "cuda" if args.device.startswith("cuda") else "cpu"
        translator, tokenizer, metadata = ctranslate2_engine.load(args.checkpoint, device, args.compute_type,
                                                                  args.threads)
    else:
        device = _device(args.device)
        model, tokenizer, metadata = load_translator(args.checkpoint, device)
    decode, model_config = metadata["config"]["decode"], metadata["config"]["model"]
    beam = args.beam if args.beam is not None else decode["beam_size"]
    if beam < 1:
        raise UserError(f"--beam: must be at least 1, got {beam}")
    if n_best > beam:
        raise UserError(f"--nbest: {n_best} exceeds the beam size ({beam})")
    alpha = args.alpha if args.alpha is not None else decode["alpha"]
    max_tokens = args.max_tokens or decode["max_tokens"]
    max_input_len = args.max_input_len if args.max_input_len is not None else decode.get("max_input_len", 0)
    if max_input_len < 0:
        raise UserError(f"--max-input-len: must be zero or positive, got {max_input_len}")
    max_input_len = max_input_len or metadata["config"]["data"]["max_len"]
    if args.engine == "ctranslate2":
        max_positions = model_config["max_positions"]
        search = ctranslate2_engine.Ct2Search(translator, tokenizer, beam, alpha, decode["max_len_a"],
                                              decode["max_len_b"], n_best, max_positions)
        return translate_with(search, tokenizer, lines, max_tokens, min(max_input_len, max_positions - 1),
                              progress=True), metadata["config"]
    return translate_lines(
        model, tokenizer, lines, device, beam_size=beam, alpha=alpha,
        max_len_a=decode["max_len_a"], max_len_b=decode["max_len_b"], n_best=n_best, max_tokens=max_tokens,
        max_input_len=max_input_len,
        max_positions=model_config["max_positions"] if model_config["positions"] == "learned" else None,
        progress=True,
    ), metadata["config"]


def _write_output(path: str | None, text: str) -> None:
    from .files import write_text

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
    parser.add_argument("--nbest", type=int, default=1,
                        help="K best translations per line, printed as INDEX<TAB>SCORE<TAB>TEXT")
    args = parser.parse_args(argv)
    if args.nbest < 1:
        raise UserError(f"--nbest: must be at least 1, got {args.nbest}")
    lines = _read_input(args.input)
    results, _ = _translate(args, lines, n_best=args.nbest)
    if args.nbest == 1:
        text = "".join(r[0].text + "\n" for r in results)
    else:
        text = "".join(f"{i}\t{t.score:.4f}\t{t.text}\n" for i, r in enumerate(results) for t in r)
    _write_output(args.output, text)


@_entry_point
def eval_main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mt-eval", description="Score translations with sacreBLEU (BLEU, chrF, TER), or translate and score.")
    parser.add_argument("--hyp", help="hypothesis file (detokenized)")
    parser.add_argument("--ref", required=True, help="reference file")
    parser.add_argument("--src", help="with --checkpoint: source file to translate, then score")
    _decode_options(parser, checkpoint_required=False)
    parser.add_argument("-o", "--output", help="with --checkpoint: also write the translations here")
    parser.add_argument("--metrics", nargs="+", default=["bleu", "chrf"], choices=["bleu", "chrf", "ter"])
    parser.add_argument("--tgt-lang", help="target language code: BLEU tokenizes zh, ja and ko text as sacreBLEU "
                        "does for them (default: the checkpoint's data.tgt_lang with --checkpoint)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)

    from .evaluate import format_scores, read_lines, score

    references = read_lines(args.ref)
    tgt_lang = args.tgt_lang
    if args.checkpoint:
        if not args.src:
            raise UserError("--src: required with --checkpoint")
        results, config = _translate(args, read_lines(args.src))
        hypotheses = [r[0].text for r in results]
        tgt_lang = tgt_lang or config["data"]["tgt_lang"]
        if args.output:
            _write_output(args.output, "".join(h + "\n" for h in hypotheses))
    elif args.hyp:
        hypotheses = read_lines(args.hyp)
    else:
        raise UserError("--hyp: required (or --checkpoint with --src)")
    if len(hypotheses) != len(references):
        raise UserError(f"{args.hyp or args.src} has {len(hypotheses)} lines but {args.ref} has {len(references)}")
    result = score(hypotheses, references, args.metrics, tgt_lang)
    print(json.dumps(result) if args.json else format_scores(result))


@_entry_point
def export_main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mt-export", description="Convert a trained checkpoint for deployment with another inference engine.")
    parser.add_argument("--checkpoint", required=True, help="a run directory (its best checkpoint) or one checkpoint")
    parser.add_argument("--format", required=True, choices=["ctranslate2"], help="the engine to export for")
    parser.add_argument("--quantization", choices=["int8", "int8_float32", "int16", "float16", "bfloat16"],
                        help="store the weights quantized (default: float32; the compute type can still be "
                             "chosen at translation time)")
    parser.add_argument("output_dir", help="the directory to write (replaced if it exists)")
    args = parser.parse_args(argv)

    import torch

    from . import ctranslate2_engine
    from .translate import load_translator

    ctranslate2_engine.import_ctranslate2()  # a clear message before the model is loaded
    model, tokenizer, metadata = load_translator(args.checkpoint, torch.device("cpu"))
    ctranslate2_engine.export(model, tokenizer, metadata, args.output_dir, args.quantization)
    print(f"wrote {args.output_dir} (CTranslate2; translate with: mt-translate --engine ctranslate2 "
          f"--checkpoint {args.output_dir})")


@_entry_point
def average_main(argv=None):
    parser = argparse.ArgumentParser(
        prog="mt-average", description="Average the weights of several checkpoints of one run (paper section 6.1).")
    parser.add_argument("--inputs", nargs="+", required=True,
                        help="checkpoint directories, or with --last one run directory")
    parser.add_argument("--last", type=int, help="average the N newest checkpoints of the run given in --inputs")
    parser.add_argument("--output", required=True, help="the checkpoint directory to write (replaced if it exists)")
    args = parser.parse_args(argv)

    from .average import average_checkpoints, last_checkpoints

    inputs = args.inputs
    if args.last is not None:
        if len(inputs) != 1:
            raise UserError("--last: give exactly one run directory in --inputs")
        if args.last < 1:
            raise UserError(f"--last: must be at least 1, got {args.last}")
        inputs = last_checkpoints(inputs[0], args.last)
    average_checkpoints(inputs, args.output)
    print(f"wrote {args.output}: the average of {len(inputs)} checkpoints "
          f"({', '.join(os.path.basename(os.path.normpath(i)) for i in inputs)})")
