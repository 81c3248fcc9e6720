"""mt-clean: data.clean's stage as a command, over two text files or a config's training corpora."""

from __future__ import annotations

import functools
import json
import os

from mt_transformer.cli.common import Parser, entry_point, whole
from mt_transformer.errors import UserError


def _parser() -> Parser:
    parser = Parser(
        prog="mt-clean",
        description="Clean a parallel corpus as mt-train does before it learns (data.clean): repaired text, "
        "less the pairs a rule drops; writes OUT.SRC_LANG, OUT.TGT_LANG and OUT.report.json (docs/cleaning.md).",
    )
    parser.add_argument("--src", help="the source text file, one sentence a line")
    parser.add_argument("--tgt", help="the target text file, line-aligned with --src")
    parser.add_argument("--src-lang", help="with --src: the source language's code (de, deu_Latn)")
    parser.add_argument("--tgt-lang", help="with --tgt: the target language's code")
    parser.add_argument(
        "--config", help="instead of --src/--tgt: a run's config, whose training corpora are cleaned with its rules"
    )
    parser.add_argument(
        "--set",
        nargs="+",
        action="extend",
        default=[],
        metavar="data.clean.KEY=VALUE",
        help="override rules, e.g. --set data.clean.max_words=80 data.clean.language_id=null",
    )
    parser.add_argument("-o", "--output", required=True, metavar="OUT", help="the prefix of the files written")
    parser.add_argument("--show", type=whole(0), default=0, metavar="N", help="print N dropped pairs of each rule")
    parser.add_argument("--plot", metavar="PNG", help="also draw the pairs each rule dropped as a bar chart")
    parser.add_argument(
        "--device", default="auto", help="with data.clean.scorers: where they run (auto, cpu, cuda[:N])"
    )
    parser.add_argument("--threads", type=whole(0), default=0, help="with data.clean.scorers: CPU threads (0: torch's)")
    return parser


def _corpora(args):
    """(settings, a function reading the pairs, source language, target language, output prefix)
    of each corpus to clean: the outputs are checked before anything is read."""
    from mt_transformer.config import config_from_dict, corpus_keys, load_config
    from mt_transformer.config.loading import apply_overrides
    from mt_transformer.data.corpus import TextPairs, pairs_to_clean

    if args.config:
        if args.src or args.tgt:
            raise UserError("--config: cleans the config's training corpora; leave out --src and --tgt")
        data = load_config(args.config, args.set).data
        found = [(c, key) for c, key in corpus_keys(data) if c.train is not None]
        for k, (corpus, key) in enumerate(found):
            out = args.output if len(found) == 1 else f"{args.output}-{k}"
            read = functools.partial(pairs_to_clean, corpus, key)
            yield data.clean_of(corpus), read, corpus.src_lang, corpus.tgt_lang, out
        return
    if not (args.src and args.tgt and args.src_lang and args.tgt_lang):
        raise UserError("--src, --tgt, --src-lang and --tgt-lang: all four, or --config")
    for name in args.set:
        if not name.startswith("data.clean."):
            raise UserError(f"--set {name}: only data.clean's rules go with --src and --tgt")
    raw = apply_overrides({"data": {"src_lang": args.src_lang, "tgt_lang": args.tgt_lang}}, args.set)
    data = config_from_dict(raw).data
    read = functools.partial(TextPairs, args.src, args.tgt)
    yield data.clean_of(data), read, args.src_lang, args.tgt_lang, args.output


@entry_point
def clean_main(argv=None):
    args = _parser().parse_args(argv)
    from mt_transformer.data.cleaning import clean_pairs
    from mt_transformer.files import write_text

    for settings, read, src_lang, tgt_lang, out in _corpora(args):
        written = [f"{out}.{src_lang}", f"{out}.{tgt_lang}", f"{out}.report.json"]
        _check_outputs(written, [args.src, args.tgt, args.config])
        settings.check_scorers("data.clean")
        scorer = _scorer(args, settings.scorers, src_lang, tgt_lang) if settings.scorers else None
        report = clean_pairs(read(), settings, src_lang, tgt_lang, out, max(args.show, 3), scorer)
        report["files"] = {os.path.basename(path): os.path.getsize(path) for path in written[:2]}
        write_text(written[2], json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        if args.plot:
            _plot(report, args.plot if out == args.output else f"{out}.png")
        print(_table(report, out, src_lang, tgt_lang))
        for reason, pairs_shown in report["examples"].items():
            for line, src, tgt in pairs_shown[: args.show]:
                print(f"{reason}\t{line}\t{src}\t{tgt}")


def _scorer(args, paths, src_lang: str, tgt_lang: str):
    from mt_transformer.decoding.scoring import PairCosts
    from mt_transformer.devices import select_device

    return PairCosts(select_device(args.device, key="--device"), args.threads).opened(paths, src_lang, tgt_lang)


def _check_outputs(written: list[str], inputs: list[str | None]) -> None:
    """Refuse before any work to write over an input, or over a file no earlier mt-clean wrote
    (its report, OUT.report.json, lists the files it wrote with their sizes)."""
    from mt_transformer.files import read_json

    directory = os.path.dirname(os.path.abspath(written[0]))
    if not os.path.isdir(directory):
        raise UserError(f"--output: {directory}: no such directory")
    given = {os.path.realpath(path) for path in inputs if path}
    earlier = {}
    if os.path.isfile(written[2]):
        found = read_json(written[2], "an earlier mt-clean report", dict).get("files")
        earlier = found if isinstance(found, dict) else {}
    for path in written:
        if os.path.realpath(path) in given:
            raise UserError(f"--output: {path} is an input; name another prefix")
        if not os.path.lexists(path):
            continue
        plain = os.path.isfile(path) and not os.path.islink(path)
        listed = bool(earlier) if path == written[2] else earlier.get(os.path.basename(path)) == os.path.getsize(path)
        if not (plain and listed):
            raise UserError(f"--output: {path} is there and no earlier mt-clean wrote it; name another prefix")


def _table(report: dict, out: str, src_lang: str, tgt_lang: str) -> str:
    total = report["pairs"] or 1
    rows = [f"| {reason} | {n:,} | {n / total:.1%} |" for reason, n in report["dropped"].items()]
    head = (
        f"wrote {out}.{src_lang} and {out}.{tgt_lang}: kept {report['kept']:,} of {report['pairs']:,} pairs "
        f"({report['pairs_per_second'] or 0:,} pairs/s); the report in {out}.report.json"
    )
    return "\n".join([head, "| dropped by | pairs | share |", "|---|---|---|", *rows])


def _plot(report: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mt_transformer.files import save_png

    reasons = list(report["dropped"]) or ["none"]
    figure, axes = plt.subplots(figsize=(7, 0.4 * len(reasons) + 1.2))
    axes.barh(reasons, [report["dropped"].get(r, 0) for r in reasons], color="#c0504d")
    axes.invert_yaxis()
    axes.set_xlabel(f"pairs dropped of {report['pairs']:,} (kept {report['kept']:,})")
    figure.tight_layout()
    save_png(figure, path)
    plt.close(figure)
