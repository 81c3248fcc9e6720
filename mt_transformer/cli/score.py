"""mt-score: the model's log-probability of given translations, one line per sentence pair."""

from __future__ import annotations

import argparse

from mt_transformer.cli.common import Parser, entry_point, model_options, runtime_options, translator_from_args, whole
from mt_transformer.cli.corpus import check_corpus_flags, corpus_options, merge, run_corpus_job
from mt_transformer.data.text import count_lines, stream_lines
from mt_transformer.errors import UserError


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mt-score",
        description="Score given translations: per line, TOTAL<TAB>PER_TOKEN, the model's log-probability "
        "of the target line given the source line (summed over its subwords and EOS) and that sum divided "
        "by their number. Line count and order are kept.",
    )
    model_options(parser, checkpoint_required=False)
    parser.add_argument("--src", help="source sentences, one per line (.gz: gzip; -: stdin)")
    parser.add_argument("--tgt", help="their translations to score, one per line (.gz: gzip; -: stdin)")
    parser.add_argument(
        "-o",
        "--output",
        help="output file, .gz written as gzip: built in FILE.partial, which a rerun after a kill continues, "
        "and renamed to FILE when complete (default and -: stdout, window by window)",
    )
    parser.add_argument(
        "--per-subword",
        action="store_true",
        help="add TAB + the log-probability of every target subword and of the EOS after them, space-separated",
    )
    parser.add_argument(
        "--max-tokens", type=whole(1), help="tokens per batch (default: the checkpoint's decode.max_tokens)"
    )
    parser.add_argument(
        "--tgt-lang", metavar="XX", help="for a model trained with data.target_tags: the target files' language"
    )
    runtime_options(parser)
    corpus_options(parser)
    return parser


@entry_point
def score_main(argv=None):
    args = _parser().parse_args(argv)
    check_corpus_flags(args)
    if args.merge:
        return merge(args)
    if not (args.checkpoint and args.src and args.tgt):
        raise UserError("--checkpoint, --src and --tgt: required (except with --merge)")
    from mt_transformer.decoding.scoring import score_lines

    total, targets = count_lines(args.src), count_lines(args.tgt)
    if None not in (total, targets) and total != targets:
        raise UserError(f"--tgt: {args.tgt} has {targets} lines, --src {args.src} {total}")

    def streams():
        return [stream_lines(args.src), stream_lines(args.tgt)], [f"--src {args.src}", f"--tgt: {args.tgt}"]

    def make_work():
        translator = translator_from_args(args)

        def work(window, advance) -> list[str]:
            sources, targets = (list(column) for column in zip(*window.rows))
            scores = score_lines(translator, sources, targets, window.first_line, advance)
            return [_format_score(score, args.per_subword) for score in scores]

        return work

    run_corpus_job(args, streams, total, make_work)


def _format_score(score, per_subword: bool) -> str:
    fields = [f"{score.log_prob:.4f}", f"{score.per_token:.4f}"]
    if per_subword:
        fields.append(" ".join(f"{p:.4f}" for p in score.token_log_probs))
    return "\t".join(fields) + "\n"
