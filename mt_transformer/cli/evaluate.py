"""mt-eval: sacreBLEU scores of translations (or of a checkpoint's translations), significance
tests against a baseline, and per-sentence scores."""

from __future__ import annotations

import argparse
import json

from mt_transformer.cli.common import decode_options, entry_point, translator_from_args, write_output
from mt_transformer.errors import UserError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mt-eval", description="Score translations with sacreBLEU (BLEU, chrF, TER), or translate and score."
    )
    parser.add_argument("--hyp", help="hypothesis file (detokenized)")
    parser.add_argument("--ref", required=True, help="reference file")
    parser.add_argument("--src", help="with --checkpoint: source file to translate, then score")
    decode_options(parser, checkpoint_required=False)
    parser.add_argument("-o", "--output", help="with --checkpoint: also write the translations here")
    parser.add_argument("--metrics", nargs="+", default=["bleu", "chrf"], choices=["bleu", "chrf", "ter"])
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
    return parser


@entry_point
def eval_main(argv=None):
    args = _parser().parse_args(argv)

    from mt_transformer.data.text import read_lines
    from mt_transformer.evaluation.scores import (
        format_scores,
        format_significance,
        paired_significance,
        score,
        sentence_scores,
    )

    references = read_lines(args.ref)
    hypotheses, tgt_lang = _hypotheses(args)
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


def _hypotheses(args) -> tuple[list[str], str | None]:
    """The lines to score (--hyp, or the translations of --src by --checkpoint) and the target
    language BLEU tokenizes for."""
    from mt_transformer.data.text import read_lines

    if args.checkpoint:
        if not args.src:
            raise UserError("--src: required with --checkpoint")
        translator = translator_from_args(args)
        hypotheses = [r[0].text for r in translator(read_lines(args.src), progress=True)]
        if args.output:
            write_output(args.output, "".join(h + "\n" for h in hypotheses))
        return hypotheses, args.tgt_lang or translator.target_language
    if args.hyp:
        return read_lines(args.hyp), args.tgt_lang
    raise UserError("--hyp: required (or --checkpoint with --src)")
