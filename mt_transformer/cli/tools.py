"""mt-export, mt-import, mt-average and mt-plot: what a user does with trained checkpoints and runs."""

from __future__ import annotations

import argparse
import os

from mt_transformer.cli.common import Parser, entry_point, whole
from mt_transformer.errors import UserError
from mt_transformer.outputs import check_output

FORCE_HELP = (
    "also replace another mt_transformer command's earlier output (argos: any Argos package); never a "
    "directory holding anything else, the home or current directory, or what holds them"
)


def _export_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mt-export", description="Convert a trained checkpoint for deployment with another inference engine."
    )
    parser.add_argument("--checkpoint", required=True, help="a run directory (its best checkpoint) or one checkpoint")
    parser.add_argument(
        "--format",
        required=True,
        choices=["ctranslate2", "huggingface", "argos"],
        help="ctranslate2: for mt-translate --engine ctranslate2; huggingface: a transformers model and tokenizer; "
        "argos: an Argos Translate package (.argosmodel) for Argos Translate and LibreTranslate",
    )
    parser.add_argument(
        "--quantization",
        choices=["float32", "int8", "int8_float32", "int16", "float16", "bfloat16"],
        help="ctranslate2 and argos: the weights' storage (default: float32 for ctranslate2, int8 for argos; "
        "the compute type can still be chosen at translation time)",
    )
    argos = parser.add_argument_group("argos")
    argos.add_argument("--from-name", help="the source language's name (default: known for common codes)")
    argos.add_argument("--to-name", help="the target language's name")
    argos.add_argument("--package-version", default="1.0", help="the package's version (default: 1.0)")
    argos.add_argument("--license", default="unspecified", help="the model's license, written into the package")
    argos.add_argument("--check-src", help="source lines to check the package with (default: the test split's)")
    parser.add_argument(
        "output_dir",
        help="the directory to write (an earlier mt-export output there is replaced); argos: the .argosmodel",
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    return parser


@entry_point
def export_main(argv=None):
    args = _export_parser().parse_args(argv)
    if args.quantization and args.format == "huggingface":
        raise UserError("--quantization: only for --format ctranslate2 or argos, not huggingface")
    quantization = None if args.quantization == "float32" else args.quantization
    from mt_transformer import checkpoint

    inputs = [args.checkpoint, checkpoint.resolve(args.checkpoint), *([args.check_src] if args.check_src else [])]
    if args.format != "argos":  # the Argos package paths are checked once the pairs are known
        check_output(args.output_dir, "mt-export", inputs, args.force)

    import torch

    if args.format == "huggingface":
        from mt_transformer.exchange import huggingface_export, m2m100_export

        huggingface_export.import_transformers()  # a clear message before the model is loaded
        loaded = checkpoint.load(args.checkpoint, torch.device("cpu"))
        fairseq = loaded.config.model.positions == "fairseq"  # an NLLB or M2M100 import
        settings = (m2m100_export if fairseq else huggingface_export).export(loaded, args.output_dir)
        print(
            f"wrote {args.output_dir} ({settings['architecture']}; load it with transformers' "
            f'AutoModelForSeq2SeqLM.from_pretrained("{args.output_dir}") and AutoTokenizer)'
        )
        return
    from mt_transformer.decoding import ctranslate2_export

    ctranslate2_export.import_ctranslate2()
    if args.format == "argos":
        return export_argos(args, quantization)
    ctranslate2_export.export(checkpoint.load(args.checkpoint, torch.device("cpu")), args.output_dir, quantization)
    print(
        f"wrote {args.output_dir} (CTranslate2; translate with: mt-translate --engine ctranslate2 "
        f"--checkpoint {args.output_dir})"
    )


def export_argos(args, quantization: str | None) -> None:
    import torch

    from mt_transformer import checkpoint
    from mt_transformer.decoding.engines import open_translator
    from mt_transformer.exchange import argos_export

    argos_export.argos_version()  # a clear message before the model is loaded
    quantization = "int8" if args.quantization is None else quantization

    def translate(lines: list[str], tgt_lang: str | None) -> list[str]:
        found = open_translator(args.checkpoint, "ctranslate2", "cpu", quantization or "float32", tgt_lang=tgt_lang)
        return [results[0].text for results in found(lines)]

    options = argos_export.PackageOptions(
        checkpoint=args.checkpoint,
        translate=translate,
        quantization=quantization,
        from_name=args.from_name,
        to_name=args.to_name,
        version=args.package_version,
        license=args.license,
        check_src=args.check_src,
        force=args.force,
    )
    reports = argos_export.export(checkpoint.load(args.checkpoint, torch.device("cpu")), args.output_dir, options)
    for report in reports:
        meta, equal, lines = report["metadata"], report["equal_to_ctranslate2_engine"], report["checked_lines"]
        print(
            f"wrote {report['path']} (Argos Translate {meta['from_code']} -> {meta['to_code']}; argostranslate "
            f"{meta['argos_version']} translated {lines} check lines as our tokenizer and its CTranslate2 model do "
            f"at its settings, {equal} of them as mt-translate --engine ctranslate2 does at ours)"
        )
    print(
        'install with argostranslate.package.install_from_path("PACKAGE"), or publish to an index: '
        "docs/exports.md#argos-translate-and-libretranslate"
    )


def _import_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mt-import",
        description="Import a pretrained model as a checkpoint directory like those mt-train writes, for "
        "mt-translate, mt-eval, mt-average, mt-export and train.init_from (fine-tuning). The model's "
        "log-probabilities are checked against the original before anything is written.",
        epilog="OUT/finetune.yaml is a config that fine-tunes the import: mt-train --config OUT/finetune.yaml "
        "--set data.train=PREFIX data.valid=PREFIX (text files PREFIX.SRC_LANG, PREFIX.TGT_LANG).",
    )
    parser.add_argument(
        "--format",
        required=True,
        choices=["huggingface"],
        help="huggingface: a transformers MarianMTModel (OPUS-MT, or our export) or our Pegasus export, with "
        "its Marian tokenizer files (source.spm, target.spm, vocab.json); an M2M100ForConditionalGeneration "
        "(NLLB-200, M2M100) with its tokenizer (sentencepiece.bpe.model, tokenizer.json or vocab.json)",
    )
    parser.add_argument(
        "--src-lang", help="the source language (default: the tokenizer config's source_lang); NLLB: eng_Latn"
    )
    parser.add_argument("--tgt-lang", help="the target language (default: the tokenizer config's target_lang)")
    parser.add_argument(
        "--keep-vocab",
        nargs="+",
        metavar="FILE",
        default=(),
        help="NLLB, M2M100: keep only the pieces these text files use (and the special tokens and those of "
        "--src-lang, --tgt-lang, --add-language and --init-from), shrinking the embedding and output matrices",
    )
    parser.add_argument(
        "--add-language",
        metavar="CODE",
        help="NLLB, M2M100: add a language the model lacks (xxx_Latn), for a fine-tune to learn",
    )
    parser.add_argument(
        "--init-from",
        metavar="CODE",
        help="with --add-language: the related language whose token the new one starts from (default: their mean)",
    )
    parser.add_argument("source", metavar="SRC", help="a model directory, or a Hugging Face hub id to download")
    parser.add_argument("--revision", help="a hub id's branch, tag or commit to download (default: its main branch)")
    parser.add_argument(
        "--allow-pickle",
        action="store_true",
        help="read weights that are only pickled (pytorch_model.bin), with torch's weights_only; without it only "
        "safetensors weights are read",
    )
    parser.add_argument(
        "output_dir", metavar="OUT", help="the checkpoint directory to write (an earlier mt-import output is replaced)"
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    return parser


@entry_point
def import_main(argv=None):
    args = _import_parser().parse_args(argv)

    from mt_transformer.exchange import huggingface_import
    from mt_transformer.exchange.huggingface_source import Source

    if args.init_from and not args.add_language:
        raise UserError("--init-from: goes with --add-language")
    local = [args.source] if os.path.exists(args.source) else []
    check_output(args.output_dir, "mt-import", [*local, *args.keep_vocab], args.force)
    edits = huggingface_import.VocabularyEdits(tuple(args.keep_vocab), args.add_language, args.init_from)
    source = Source(args.source, args.revision, args.allow_pickle)
    imported = huggingface_import.import_directory(source, args.output_dir, args.src_lang, args.tgt_lang, edits)
    data = imported["config"].data
    into = ", ".join(data.target_languages) if data.target_tags else data.tgt_lang
    sizes = imported["vocabulary"]
    trimmed = f", vocabulary {sizes[0]:,} -> {sizes[1]:,} pieces" if len(sizes) > 1 else ""
    print(
        f"wrote {args.output_dir} ({imported['architecture']}, {data.src_lang}->{into}{trimmed}); translate with "
        f"mt-translate --checkpoint {args.output_dir}, fine-tune with {os.path.join(args.output_dir, 'finetune.yaml')}"
    )


@entry_point
def average_main(argv=None):
    parser = Parser(
        prog="mt-average", description="Average the weights of several checkpoints of one run (paper section 6.1)."
    )
    parser.add_argument(
        "--inputs", nargs="+", required=True, help="checkpoint directories, or with --last one run directory"
    )
    parser.add_argument("--last", type=whole(1), help="average the N newest checkpoints of the run given in --inputs")
    parser.add_argument(
        "--output", required=True, help="the checkpoint directory to write (an earlier mt-average output is replaced)"
    )
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    args = parser.parse_args(argv)

    from mt_transformer.evaluation.average import average_checkpoints, last_checkpoints

    inputs = args.inputs
    if args.last is not None:
        if len(inputs) != 1:
            raise UserError("--last: give exactly one run directory in --inputs")
        check_output(args.output, "mt-average", inputs, args.force)  # the run itself is an input too
        inputs = last_checkpoints(inputs[0], args.last)
    check_output(args.output, "mt-average", inputs, args.force)
    average_checkpoints(inputs, args.output)
    print(
        f"wrote {args.output}: the average of {len(inputs)} checkpoints "
        f"({', '.join(os.path.basename(os.path.normpath(i)) for i in inputs)})"
    )


@entry_point
def plot_main(argv=None):
    parser = Parser(
        prog="mt-plot",
        description="Draw the training curves of one or several runs on shared axes (from their "
        "metrics.jsonl): loss, valid BLEU, learning rate and tokens/s against the step.",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories (train.output_dir)")
    parser.add_argument("-o", "--output", default="curves.png", help="the PNG to write (default: curves.png)")
    args = parser.parse_args(argv)

    from mt_transformer.training.curves import plot_curves
    from mt_transformer.training.run_log import METRICS_FILE, read_metrics

    runs = []
    for run_dir in args.runs:
        if not os.path.isfile(os.path.join(run_dir, METRICS_FILE)):
            raise UserError(f"{run_dir}: no metrics.jsonl (not a run directory, or no step logged yet)")
        runs.append((os.path.basename(os.path.normpath(run_dir)), read_metrics(run_dir)))
    plot_curves(runs, args.output)
    print(f"wrote {args.output}")
