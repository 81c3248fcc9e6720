"""mt-translate: files, stdin or an interactive terminal; n-best lists, scores, alignments and
attention heatmaps."""

from __future__ import annotations

import argparse
import sys

from mt_transformer.cli.common import Parser, decode_options, entry_point, translator_from_args, whole
from mt_transformer.cli.corpus import check_corpus_flags, corpus_options, merge, run_corpus_job
from mt_transformer.data.text import count_lines, stream_lines
from mt_transformer.errors import UserError


def _inspection_options(parser: argparse.ArgumentParser) -> None:
    """--alignment, --attention and which layer and head they read."""
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
        type=whole(1),
        metavar="N",
        help="the decoder layer for --attention and --alignment, from 1 (default: the one "
        "train.guided_alignment taught, else the last)",
    )
    parser.add_argument(
        "--attention-head",
        type=whole(1),
        metavar="H",
        help="one attention head, from 1 (default: the heads train.guided_alignment taught, else the mean of all)",
    )


def _parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mt-translate", description="Translate a text file, one sentence per line.")
    decode_options(parser, checkpoint_required=False)
    parser.add_argument("-i", "--input", help="input file, .gz read as gzip (default and -: stdin)")
    parser.add_argument(
        "-o",
        "--output",
        help="output file, .gz written as gzip: built in FILE.partial, which a rerun after a kill continues, "
        "and renamed to FILE when complete (default and -: stdout, window by window)",
    )
    parser.add_argument(
        "--nbest", type=whole(1), default=1, help="K best translations per line, printed as INDEX<TAB>SCORE<TAB>TEXT"
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
    _inspection_options(parser)
    parser.add_argument(
        "--format",
        choices=["text", "html"],
        default="text",
        help="html: each line an HTML fragment, translated sentence by sentence with its inline elements put "
        "back around the words aligned to theirs (a line without markup: as text)",
    )
    corpus_options(parser)
    return parser


@entry_point
def translate_main(argv=None):
    args = _parser().parse_args(argv)
    check_corpus_flags(args)
    if args.merge:
        return merge(args)
    if not args.checkpoint:
        raise UserError("--checkpoint: required (except with --merge)")
    if args.nbest < 1:
        raise UserError(f"--nbest: must be at least 1, got {args.nbest}")
    inspect = args.attention or args.alignment
    if args.engine == "ctranslate2" and (args.attention or args.attention_layer or args.attention_head):
        raise UserError("--attention, --attention-layer and --attention-head need --engine torch or auto")
    if inspect and len(args.checkpoint) > 1:
        raise UserError("--attention and --alignment need one --checkpoint, not an ensemble")
    source = args.input or "-"
    side_files = [(flag, path) for flag, path in _side_files(args) if path]
    if args.format == "html" and (args.nbest > 1 or args.scores or inspect or side_files):
        raise UserError(
            "--format html: one translation per line, without --nbest, --scores, --alignment, --attention, "
            "--prefix, --constraints or --avoid"
        )
    if source == "-" and args.output in (None, "-") and sys.stdin.isatty():
        if side_files:
            raise UserError(f"{side_files[0][0]}: needs the input from -i FILE or a pipe, one line per input line")
        return _translate_interactively(args)
    total = count_lines(source)
    for flag, path in side_files:
        count = count_lines(path)
        if None not in (count, total) and count != total:
            raise UserError(f"{flag}: {path} has {count} lines, the input {total}")

    def streams():
        paths = [source] + [path for _, path in side_files]
        return [stream_lines(path) for path in paths], ["the input"] + [f"{flag}: {path}" for flag, path in side_files]

    def make_work():
        translator = translator_from_args(args, n_best=args.nbest)
        if args.scores or args.nbest > 1:  # printed: the model's own log-probabilities
            translator = translator.with_exact_scores()
        return lambda window, advance: _translate_window(args, translator, window, advance)

    run_corpus_job(args, streams, total, make_work)


def _side_files(args) -> list[tuple[str, str | None]]:
    """The files read line by line beside the input."""
    return [("--prefix", args.prefix), ("--constraints", args.constraints), ("--avoid", args.avoid)]


def _translate_window(args, translator, window, advance) -> list[str]:
    """One window of input lines (with their prefix, constraints and phrases to avoid, as given)
    translated: its output lines."""
    columns = iter(zip(*window.rows))
    lines = list(next(columns))
    given = {flag: list(next(columns)) for flag, path in _side_files(args) if path}
    constraints = None
    if "--constraints" in given or "--avoid" in given:  # tab-separated phrases, an empty line none
        constraints = tuple(
            [line.split("\t") for line in given.get(flag, [""] * len(lines))] for flag in ("--constraints", "--avoid")
        )
    translator.reseed(window.index)
    if args.format == "html":
        from mt_transformer.markup.translation import translate_html

        translated = translate_html(translator, lines)
        advance(len(lines))
        return [line + "\n" for line in translated]
    results = translator(
        lines, advance, prefixes=given.get("--prefix"), constraints=constraints, first_line=window.first_line
    )
    alignments = None
    if args.attention or args.alignment:
        alignments = _inspect(args, translator, lines, results, window.first_line)
    return list(_format_translations(results, args, alignments, window.first_line))


def _inspect(args, translator, lines: list[str], results, first_index: int = 0):
    """Write the heatmaps of --attention; returns each hypothesis's word alignment when --alignment
    asks for them, else None."""
    from mt_transformer.data.word_alignment import alignment_heads
    from mt_transformer.decoding.alignment import inspect_translations

    layers, heads = translator.config.model.decoder_layers, translator.config.model.n_heads
    for name, value, count in (
        ("--attention-layer", args.attention_layer, layers),
        ("--attention-head", args.attention_head, heads),
    ):
        if value is not None and not 1 <= value <= count:
            raise UserError(f"{name}: {value} is not between 1 and {count}")
    layer = args.attention_layer - 1 if args.attention_layer else None
    head = args.attention_head - 1 if args.attention_head else None
    aligning, first = alignment_heads(translator.config)  # the default: the heads that give alignments
    which = f"layer {(aligning if layer is None else layer) % layers + 1}, "
    if head is not None:
        which += f"head {head + 1}"
    elif layer is None and first < heads:
        which += "head 1" if first == 1 else f"mean of heads 1-{first}"
    else:
        which += "mean of all heads"
    alignments = inspect_translations(translator, lines, results, args.attention, which, first_index, layer, head)
    return alignments if args.alignment else None


def _translate_interactively(args) -> None:
    """A terminal on stdin: translate each line as soon as it is entered, until end of input (Ctrl-D)."""
    translator = translator_from_args(args, args.nbest)
    if args.scores or args.nbest > 1:
        translator = translator.with_exact_scores()
    print("type a sentence and press Enter; Ctrl-D ends", file=sys.stderr, flush=True)
    for index, line in enumerate(sys.stdin):
        lines = [line.removesuffix("\n").removesuffix("\r")]
        if args.format == "html":
            from mt_transformer.markup.translation import translate_html

            print(translate_html(translator, lines)[0], flush=True)
            continue
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
