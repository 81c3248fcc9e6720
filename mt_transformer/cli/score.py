"""mt-score: the model's log-probability of given translations, one line per sentence pair."""

from __future__ import annotations

import argparse

from mt_transformer.cli.common import (
    entry_point,
    model_options,
    read_input,
    runtime_options,
    translator_from_args,
    write_output,
)
from mt_transformer.errors import UserError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mt-score",
        description="Score given translations: per line, TOTAL<TAB>PER_TOKEN, the model's log-probability "
        "of the target line given the source line (summed over its subwords and EOS) and that sum divided "
        "by their number. Line count and order are kept.",
    )
    model_options(parser, checkpoint_required=True)
    parser.add_argument("--src", required=True, help="source sentences, one per line")
    parser.add_argument("--tgt", required=True, help="their translations to score, one per line")
    parser.add_argument("-o", "--output", help="output file, written atomically (default: stdout)")
    parser.add_argument(
        "--per-subword",
        action="store_true",
        help="add TAB + the log-probability of every target subword and of the EOS after them, space-separated",
    )
    parser.add_argument("--max-tokens", type=int, help="tokens per batch (default: the checkpoint's decode.max_tokens)")
    parser.add_argument(
        "--tgt-lang", metavar="XX", help="for a model trained with data.target_tags: the target files' language"
    )
    runtime_options(parser)
    return parser


@entry_point
def score_main(argv=None):
    args = _parser().parse_args(argv)
    from mt_transformer.decoding.scoring import score_lines

    sources, targets = read_input(args.src), read_input(args.tgt)
    if len(sources) != len(targets):
        raise UserError(f"--tgt: {args.tgt} has {len(targets)} lines, --src {args.src} {len(sources)}")
    scores = score_lines(translator_from_args(args), sources, targets)
    lines = []
    for score in scores:
        fields = [f"{score.log_prob:.4f}", f"{score.per_token:.4f}"]
        if args.per_subword:
            fields.append(" ".join(f"{p:.4f}" for p in score.token_log_probs))
        lines.append("\t".join(fields) + "\n")
    write_output(args.output, "".join(lines))
