"""mt-eval: sacreBLEU scores of translations (or of a checkpoint's translations), significance
tests against a baseline, and per-sentence scores."""

from __future__ import annotations

import argparse
import json

from mt_transformer.cli.common import Parser, decode_options, entry_point, translator_from_args, write_output
from mt_transformer.cli.corpus import translate_file
from mt_transformer.errors import UserError


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mt-eval", description="Score translations with sacreBLEU (BLEU, chrF, TER), or translate and score."
    )
    parser.add_argument("--hyp", help="hypothesis file (detokenized)")
    parser.add_argument("--ref", help="reference file")
    parser.add_argument("--src", help="with --checkpoint: source file to translate, then score")
    parser.add_argument(
        "--split",
        help="with --checkpoint: translate this split of the data the checkpoint was trained on (train, "
        "valid or test: a hub split or local files, as in its config) and score against its references",
    )
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
    parser.add_argument(
        "--variants",
        action="store_true",
        help="with --checkpoint (--src and --ref, or --split): the test set as people type it, in capitals, "
        "title case, without its final punctuation and with typos, each translated and scored, with the drop "
        "from clean (docs/techniques.md#input-as-people-type-it)",
    )
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

    if args.variants:
        return _variants(args)
    if args.split:
        hypotheses, references, tgt_lang = _translate_split(args)
        _check_lines(hypotheses, "the translations", references, f"the {args.split} split")
    else:
        if not args.ref:
            raise UserError("--ref: required (or --checkpoint with --split)")
        references = read_lines(args.ref)
        hypotheses, tgt_lang = _hypotheses(args)
        _check_lines(hypotheses, args.hyp or args.src, references, args.ref)
    system = args.hyp or "translations"
    result = score(hypotheses, references, args.metrics, tgt_lang)
    text = [format_scores(result)]
    if args.compare:
        baseline = read_lines(args.compare)
        _check_lines(baseline, args.compare, references, "the references")
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


def _check_lines(lines: list[str], name: str, references: list[str], references_name: str) -> None:
    """One line saying why these lines cannot be scored against the references: a count that
    differs, or none at all (sacreBLEU has nothing to score)."""
    if len(lines) != len(references):
        raise UserError(f"{name} has {len(lines)} lines but {references_name} has {len(references)}")
    if not lines:
        raise UserError(f"{name} and {references_name}: no lines to score")


def _hypotheses(args) -> tuple[list[str], str | None]:
    """The lines to score (--hyp, or the translations of --src by --checkpoint) and the target
    language BLEU tokenizes for."""
    from mt_transformer.data.text import read_lines

    if args.checkpoint:
        if not args.src:
            raise UserError("--src: required with --checkpoint")
        translator = translator_from_args(args)
        hypotheses = translate_file(translator, args.src)
        if args.output:
            write_output(args.output, "".join(h + "\n" for h in hypotheses))
        return hypotheses, args.tgt_lang or translator.target_language
    if args.hyp:
        return read_lines(args.hyp), args.tgt_lang
    raise UserError("--hyp: required (or --checkpoint with --src)")


def _variants(args) -> None:
    """mt-eval --variants: one table of the test set's variants (evaluation/variants.py)."""
    from mt_transformer.data.text import read_lines
    from mt_transformer.evaluation.variants import evaluate_variants, format_variants

    if not args.checkpoint or args.hyp or args.compare or args.output:
        raise UserError("--variants: translates with --checkpoint; leave out --hyp, --compare and --output")
    if args.split:
        sources, references = _split_pairs(args)
    elif args.src and args.ref:
        sources, references = read_lines(args.src), read_lines(args.ref)
    else:
        raise UserError("--variants: needs --src and --ref, or --split")
    _check_lines(sources, args.src or "the split's sources", references, args.ref or "its references")
    translator = translator_from_args(args)
    rows = evaluate_variants(
        lambda lines: [r[0].text for r in translator(lines, progress=True)],
        sources,
        references,
        args.tgt_lang or translator.target_language,
        args.metrics,
    )
    print(json.dumps({"variants": rows}) if args.json else format_variants(rows, args.metrics))


def _split_pairs(args) -> tuple[list[str], list[str]]:
    """The sources and references of --split of the checkpoint's training config; with several
    corpora, --tgt-lang picks the one to score (and sets the target tag)."""
    from mt_transformer import checkpoint
    from mt_transformer.config import corpus_keys
    from mt_transformer.data.corpus import load_pairs
    from mt_transformer.decoding.runtime import is_export

    if not args.checkpoint or is_export(args.checkpoint[0]):
        raise UserError("--split: needs --checkpoint with an mt_transformer checkpoint, not an export")
    if args.src or args.hyp or args.ref:
        raise UserError("--split: takes the sources and references from the data; leave out --src, --hyp and --ref")
    if args.split not in ("train", "valid", "test"):
        raise UserError(f"--split: expected train, valid or test, got {args.split!r}")
    data = checkpoint.read_config(checkpoint.resolve(args.checkpoint[0])).data
    found = [
        (corpus, key)
        for corpus, key in corpus_keys(data)
        if getattr(corpus, args.split) is not None and args.tgt_lang in (None, corpus.tgt_lang)
    ]
    into = f" into {args.tgt_lang}" if args.tgt_lang else ""
    if not found:
        raise UserError(f"--split: the checkpoint's config has no {args.split} split{into} (data.{args.split})")
    if len(found) > 1:
        pairs = ", ".join(f"{c.src_lang}->{c.tgt_lang}" for c, _ in found)
        raise UserError(f"--split: {len(found)} corpora have a {args.split} split ({pairs}); --tgt-lang picks one")
    corpus, key = found[0]
    pairs = load_pairs(corpus, args.split, f"{key}.{args.split}")
    args.tgt_lang = args.tgt_lang or (corpus.tgt_lang if data.target_tags else None)
    return pairs["src"][:], pairs["tgt"][:]


def _translate_split(args) -> tuple[list[str], list[str], str]:
    """The translations of one split of the checkpoint's training config by --checkpoint, its
    references and their language."""
    sources, references = _split_pairs(args)
    translator = translator_from_args(args)
    hypotheses = [r[0].text for r in translator(sources, progress=True)]
    if args.output:
        write_output(args.output, "".join(h + "\n" for h in hypotheses))
    return hypotheses, references, args.tgt_lang or translator.target_language
