#!/usr/bin/env python3
"""A checkpoint translated three ways: our translator, its `mt-export --format huggingface`
export through transformers' generate(), and its CTranslate2 export. For greedy search and beam 4:
how many lines equal ours, BLEU, and sentences/s (the search only: models loaded and warmed up
first; batches as each engine is usually run).

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

from measure import machine, machine_line, markdown_table, texts, timed, write_json
from mt_transformer import checkpoint
from mt_transformer.data.text import read_lines
from mt_transformer.decoding import ctranslate2_export
from mt_transformer.decoding.engines import open_translator
from mt_transformer.decoding.search import output_limit
from mt_transformer.exchange import huggingface_export


def generate_all(model, tokenizer, lines: list[str], decode, beam: int, batch_size: int) -> list[str]:
    outputs = []
    for start in range(0, len(lines), batch_size):
        batch = tokenizer(lines[start : start + batch_size], return_tensors="pt", padding=True)
        lengths = batch.attention_mask.sum(1) - 1  # without EOS
        limit = max(output_limit(int(n), decode, model.config.max_position_embeddings) for n in lengths)
        with torch.inference_mode():
            ids = model.generate(**batch, num_beams=beam, max_new_tokens=limit + 1)
        outputs += tokenizer.batch_decode(ids, skip_special_tokens=True)
    return outputs


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--tgt-lang", help="for a model trained with target tags")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per generate() call")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    import transformers

    transformers.logging.set_verbosity_error()  # not a warning per call that max_new_tokens overrides max_length
    lines, refs = read_lines(args.src), read_lines(args.ref)
    loaded = checkpoint.load(args.checkpoint, torch.device("cpu"))
    with tempfile.TemporaryDirectory() as work:
        rows = compare(args, loaded, lines, refs, work, transformers)
    header = ["search", "engine", "sent/s", "BLEU", "lines equal to ours"]
    cells = [[r["search"], r["engine"], f"{r['sentences_per_s']:.1f}", f"{r['bleu']:.2f}", f"{r['equal_to_ours']:.1%}"]
             for r in rows]  # fmt: skip
    print("\n" + markdown_table(header, cells))
    if args.json:
        write_json(args.json, {**machine(), "transformers": transformers.__version__, "rows": rows})
    return rows


def compare(args, loaded, lines: list[str], refs: list[str], work: str, transformers) -> list[dict]:
    """Greedy and beam 4 in each of the three engines: a row each."""
    hf_dir, ct2_dir = os.path.join(work, "hf"), os.path.join(work, "ct2")
    settings = huggingface_export.export(loaded, hf_dir)
    ctranslate2_export.export(loaded, ct2_dir)
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(hf_dir).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(hf_dir)
    hf_lines = [f">>{args.tgt_lang}<< {line}" for line in lines] if args.tgt_lang else lines
    print(f"{machine_line()}, transformers {transformers.__version__}")
    gap = settings["largest_log_prob_difference"]
    print(f"{args.checkpoint}: {settings['architecture']}, {len(lines)} lines, export check {gap:.1e}")
    rows = []
    for beam in (1, 4):
        ours_translate = open_translator(args.checkpoint, "torch", "cpu", tgt_lang=args.tgt_lang, beam_size=beam)
        ct2_translate = open_translator(
            ct2_dir, "ctranslate2", "cpu", threads=args.threads, tgt_lang=args.tgt_lang, beam_size=beam
        )
        decode = ours_translate.config.decode
        for warm in (ours_translate, ct2_translate):
            warm(lines[:8])
        generate_all(hf_model, hf_tokenizer, hf_lines[:8], decode, beam, args.batch_size)
        ours, ours_s = timed(texts, ours_translate, lines)
        hf, hf_s = timed(generate_all, hf_model, hf_tokenizer, hf_lines, decode, beam, args.batch_size)
        ct2, ct2_s = timed(texts, ct2_translate, lines)
        for name, output, seconds in (
            ("mt_transformer", ours, ours_s),
            ("transformers", hf, hf_s),
            ("ctranslate2", ct2, ct2_s),
        ):
            same = sum(a == b for a, b in zip(output, ours)) / len(lines)
            bleu = sacrebleu.corpus_bleu(output, [refs]).score
            row = dict(search="greedy" if beam == 1 else f"beam {beam}", engine=name, bleu=bleu, equal_to_ours=same)
            rows.append({**row, "sentences_per_s": len(lines) / seconds})
    return rows


if __name__ == "__main__":
    main()
