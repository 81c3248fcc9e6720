#!/usr/bin/env python3
"""Does training memory stay flat as the corpus grows? (docs/benchmarks.md)

For generated English-German corpora of each size (default 100k and 2M pairs): `mt-prepare`
(tokenizer + encoding into memory-mapped Arrow; wall time, pairs/s, peak RSS, size on disk),
then a short `mt-train` on the prepared data (peak RSS), each in its own process (its peak RSS
as the kernel reports it on exit). Prints a Markdown table and the ratio of the largest corpus's training RSS to the
smallest's.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import yaml

from measure import machine_line, markdown_table, run_process
from mt_transformer.data.demo_data import generate
from mt_transformer.files import directory_size, write_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config(corpus: str, run_dir: str, steps: int, spm_sample: int) -> dict:
    # the generated language has under 2,000 possible pieces: a vocabulary of 1,000
    return {
        "data": {
            "src_lang": "en",
            "tgt_lang": "de",
            "train": f"{corpus}/train",
            "valid": f"{corpus}/valid",
            "vocab_size": 1000,
            "spm_type": "bpe",
            "spm_max_sentences": spm_sample,
            "max_len": 128,
        },
        "model": {"d_model": 256, "n_heads": 4, "d_ff": 1024, "encoder_layers": 3, "decoder_layers": 3},
        "train": {
            "output_dir": run_dir,
            "max_tokens": 4096,
            "max_steps": steps,
            "warmup": 100,
            "log_every": 10,
            "valid_every": steps,
            "valid_max_sentences": 50,
        },
    }


def main(argv: list[str] | None = None) -> list[tuple]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 2_000_000])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument(
        "--spm-sample",
        type=int,
        default=200_000,
        help="sentences per side sentencepiece samples (data.spm_max_sentences)",
    )
    parser.add_argument("--workdir", default=None, help="default: a temporary directory, removed afterwards")
    parser.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE", help="config overrides")
    args = parser.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.workdir or scratch
        for size in args.sizes:
            corpus, run_dir = os.path.join(workdir, f"corpus_{size}"), os.path.join(workdir, f"run_{size}")
            generate(corpus, train=size, valid=500, test=10, seed=size)
            path = os.path.join(workdir, f"config_{size}.yaml")
            settings = config(corpus, run_dir, args.steps, args.spm_sample)
            for item in args.set:
                key, value = item.split("=", 1)
                section, name = key.split(".", 1)
                settings[section][name] = yaml.safe_load(value)
            write_text(path, yaml.safe_dump(settings))
            prep_s, prep_rss = run_process(["mt-prepare", "--config", path], cwd=ROOT)
            train_s, train_rss = run_process(["mt-train", "--config", path], cwd=ROOT)
            text_mb = sum(os.path.getsize(f"{corpus}/train.{lang}") for lang in ("en", "de")) / 2**20
            disk_mb = directory_size(os.path.join(run_dir, "cache")) / 2**20
            rows.append((size, text_mb, prep_s, size / prep_s, prep_rss, disk_mb, train_s, train_rss))
            print(
                f"{size} pairs: prepare {prep_s:.0f} s, train {train_s:.0f} s, training peak RSS {train_rss:.0f} MiB",
                file=sys.stderr,
            )

    header = ["pairs", "text (MB)", "mt-prepare (s)", "pairs/s", "mt-prepare peak RSS (MiB)"]
    header += ["encoded on disk (MB)", f"mt-train {args.steps} steps (s)", "mt-train peak RSS (MiB)"]
    cells = [[f"{size:,}", *(f"{v:,.0f}" for v in values)] for size, *values in rows]
    print(f"{machine_line()}\n\n{markdown_table(header, cells)}")
    print(f"\ntraining peak RSS, {rows[-1][0]:,} pairs over {rows[0][0]:,}: {rows[-1][-1] / rows[0][-1]:.2f}")
    return rows


if __name__ == "__main__":
    main()
