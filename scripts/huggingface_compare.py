#!/usr/bin/env python3
"""A checkpoint translated three ways: our translator, its `mt-export --format huggingface`
export through transformers' generate(), and its CTranslate2 export. For greedy search and beam 4:
how many lines equal ours, BLEU, and sentences/s of all lines (each engine in a process of its
own, loaded and warmed up first, the engines taking turns: engine_turns.py; batches as each
engine is usually run).

    python3 scripts/huggingface_compare.py --checkpoint runs/demo --src data/demo/test.en \
        --ref data/demo/test.de [--tgt-lang de] [--threads 2]

generate() takes one output limit per call: each batch gets the largest of its sentences'
limits (ours: max_len_a * source length + max_len_b per sentence), so a line whose search runs
to its limit can come out longer there.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import sacrebleu
import torch

from engine_turns import take_turns
from measure import machine, machine_line, markdown_table, write_json
from mt_transformer import checkpoint
from mt_transformer.data.text import read_lines
from mt_transformer.decoding import ctranslate2_export
from mt_transformer.exchange import huggingface_export

ENGINES = ("mt_transformer", "transformers", "ctranslate2")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--tgt-lang", help="for a model trained with target tags")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per generate() call")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    import transformers

    refs = read_lines(args.ref)
    loaded = checkpoint.load(args.checkpoint, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as work:
        hf_dir, ct2_dir = os.path.join(work, "hf"), os.path.join(work, "ct2")
        settings = huggingface_export.export(loaded, hf_dir)
        ctranslate2_export.export(loaded, ct2_dir)
        print(f"{machine_line()}, transformers {transformers.__version__}")
        gap = settings["largest_log_prob_difference"]
        print(f"{args.checkpoint}: {settings['architecture']}, {len(refs)} lines, export check {gap:.1e}")
        rows = []
        for beam in (1, 4):
            specs = engines(args, hf_dir, ct2_dir, beam, work, len(refs))
            measured = take_turns(specs, args.rounds, ("whole",))
            outputs = {spec["name"]: read_lines(spec["out"]) for spec in specs}
            for name, output in outputs.items():
                same = sum(a == b for a, b in zip(output, outputs["mt_transformer"])) / len(refs)
                bleu = sacrebleu.corpus_bleu(output, [refs]).score
                search = "greedy" if beam == 1 else f"beam {beam}"
                rows.append(dict(search=search, engine=name, bleu=bleu, equal_to_ours=same,
                                 sentences_per_s=measured[name]["whole"]))  # fmt: skip
    header = ["search", "engine", "sent/s", "BLEU", "lines equal to ours"]
    cells = [[r["search"], r["engine"], f"{r['sentences_per_s']:.1f}", f"{r['bleu']:.2f}", f"{r['equal_to_ours']:.1%}"]
             for r in rows]  # fmt: skip
    print("\n" + markdown_table(header, cells))
    if args.json:
        write_json(args.json, {**machine(), "transformers": transformers.__version__, "rows": rows})
    return rows


def engines(args, hf_dir: str, ct2_dir: str, beam: int, work: str, lines: int) -> list[dict]:
    """The three engines at one beam size, each to run all lines in one call (generate() in
    batches of --batch-size)."""
    common = dict(src=args.src, lines=lines, single=0, beam=beam, torch_threads=args.threads)
    tagged = dict(tgt_lang=args.tgt_lang) if args.tgt_lang else {}
    prefix = f">>{args.tgt_lang}<< " if args.tgt_lang else ""
    loads = {
        "mt_transformer": dict(path=args.checkpoint, load=dict(engine="torch", **tagged)),
        "transformers": dict(
            path=hf_dir, transformers=dict(checkpoint=args.checkpoint, batch_size=args.batch_size, prefix=prefix)
        ),
        "ctranslate2": dict(path=ct2_dir, load=dict(engine="ctranslate2", threads=args.threads, **tagged)),
    }
    return [dict(name=name, out=os.path.join(work, f"{name}-{beam}.txt"), **common, **loads[name]) for name in ENGINES]


if __name__ == "__main__":
    main()
