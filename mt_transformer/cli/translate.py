"""mt-translate: files, stdin or an interactive terminal; n-best lists, scores, alignments and
attention heatmaps."""

from __future__ import annotations

import argparse
import sys

from mt_transformer.cli.common import decode_options, entry_point, read_input, translator_from_args, write_output
from mt_transformer.errors import UserError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mt-translate", description="Translate a text file, one sentence per line.")
    decode_options(parser)
    parser.add_argument("-i", "--input", help="input file (default: stdin)")
    parser.add_argument("-o", "--output", help="output file, written atomically (default: stdout)")
    parser.add_argument(
        "--nbest", type=int, default=1, help="K best translations per line, printed as INDEX<TAB>SCORE<TAB>TEXT"
    )
    parser.add_argument(
        "--scores",
        action="store_true",
        help="print each translation as SCORE<TAB>LOG_PROB<TAB>UNKNOWNS<TAB>TEXT (with --nbest: "
        "INDEX<TAB>SCORE<TAB>LOG_PROB<TAB>UNKNOWNS<TAB>TEXT): the length-normalised score the beam ranks by, "
        "the summed token log-probability, and how many subwords spelled nothing the vocabulary has "
        "(<unk>, copied from the source's unknown text or left out, and broken byte sequences)",
    )
    parser.add_argument(
        "--prefix",
        metavar="FILE",
        help="one target prefix per input line (empty: none): each translation begins with it and the "
        "search continues after it",
    )
    parser.add_argument(
        "--constraints",
        metavar="FILE",
        help="one line per input line: target phrases, tab-separated, that its translation must contain "
        "(in any order; an empty line: none), met by beam search with dynamic beam allocation",
    )
    parser.add_argument(
        "--avoid",
        metavar="FILE",
        help="one line per input line: target phrases, tab-separated, that its translation must not contain",
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
    return parser


@entry_point
def translate_main(argv=None):
    args = _parser().parse_args(argv)
    if args.nbest < 1:
        raise UserError(f"--nbest: must be at least 1, got {args.nbest}")
    inspect = args.attention or args.alignment
    if inspect and args.engine != "torch":
        raise UserError("--attention and --alignment need --engine torch (CTranslate2 does not return attention)")
    if inspect and len(args.checkpoint) > 1:
        raise UserError("--attention and --alignment need one --checkpoint, not an ensemble")
    if args.input in (None, "-") and args.output in (None, "-") and sys.stdin.isatty():
        for flag, value in (("--prefix", args.prefix), ("--constraints", args.constraints), ("--avoid", args.avoid)):
            if value:
                raise UserError(f"{flag}: needs the input from -i FILE or a pipe, one line per input line")
        return _translate_interactively(args)
    lines = read_input(args.input)
    prefixes = _per_input_line("--prefix", args.prefix, len(lines))
    include = _per_input_line("--constraints", args.constraints, len(lines))
    avoid = _per_input_line("--avoid", args.avoid, len(lines))
    constraints = None
    if include is not None or avoid is not None:  # tab-separated phrases, an empty line none
        constraints = tuple([line.split("\t") for line in given or [""] * len(lines)] for given in (include, avoid))
    translator = translator_from_args(args, n_best=args.nbest)
    results = translator(lines, progress=True, prefixes=prefixes, constraints=constraints)
    alignments = _inspect(args, translator, lines, results) if inspect else None
    write_output(args.output, "".join(_format_translations(results, args, alignments)))


def _per_input_line(flag: str, path: str | None, count: int) -> list[str] | None:
    """The lines of the file a flag names, one per input line (None: no file)."""
    if not path:
        return None
    lines = read_input(path)
    if len(lines) != count:
        raise UserError(f"{flag}: {path} has {len(lines)} lines, the input {count}")
    return lines


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
    translator = translator_from_args(args, args.nbest)
    print("type a sentence and press Enter; Ctrl-D ends", file=sys.stderr, flush=True)
    for index, line in enumerate(sys.stdin):
        lines = [line.removesuffix("\n").removesuffix("\r")]
        results = translator(lines)
        alignments = _inspect(args, translator, lines, results, index) if args.attention or args.alignment else None
        sys.stdout.write("".join(_format_translations(results, args, alignments, index)))
        sys.stdout.flush()


def _format_translations(results, args, alignments=None, first_index: int = 0):
    """Output lines: the text; with --scores SCORE, LOG_PROB, UNKNOWNS before it; with --nbest the input's 0-based
    index first and every hypothesis a line; with --alignment the alignment after it. Tab-separated."""
    nbest = args.nbest > 1
    for index, translations in enumerate(results):
        for k, translation in enumerate(translations if nbest else translations[:1]):
            fields = [str(first_index + index)] if nbest else []
            if nbest or args.scores:
                fields.append(f"{translation.score:.4f}")
            if args.scores:
                fields += [f"{translation.log_prob:.4f}", str(translation.unknowns)]
            fields.append(translation.text)
            if alignments is not None:
                fields.append(alignments[index][k])
            yield "\t".join(fields) + "\n"
