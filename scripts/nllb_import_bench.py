"""What importing an NLLB-200 model costs, and what trimming its vocabulary to a pair's text saves.

No hub weights here: the model is a random M2M100ForConditionalGeneration in the shape of
NLLB-200-distilled-600M (d_model 1,024, 12+12 layers, FFN 4,096, 256,206 vocabulary rows; 615M
parameters), its NLLB tokenizer made from a sentencepiece model trained on --text (its other rows
are unused pieces). Measured, each in a process of its own:
- mt-import: wall seconds, peak RSS, and the peak of its own memory (RSS less the file pages of
  the model.safetensors transformers maps, which the kernel can drop), against that file's size;
- mt-import --keep-vocab (the --text files): the same, and the pieces and bytes kept;
- greedy translation of --lines lines by the full and the trimmed import, one model per process,
  alternating, the outputs held at --out-len subwords (a random model rarely ends one itself).

    python scripts/nllb_import_bench.py --text corpus/test.de corpus/test.en [--size tiny] [--json F]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from measure import machine, machine_line, markdown_table, peak_own_memory, timed, write_json  # noqa: E402

SHAPES = {  # NLLB-200-distilled-600M's config.json, and a tiny one for the tests
    "600M": dict(d_model=1024, layers=12, heads=16, ffn=4096, rows=256206, pieces=8000),
    "tiny": dict(d_model=32, layers=2, heads=2, ffn=64, rows=5000, pieces=300),
}
CODES = ["deu_Latn", "eng_Latn", "fra_Latn"]


def make_model(directory: str, text: list[str], shape: dict) -> None:
    """A random NLLB-shaped model with its tokenizer in `directory`."""
    import sentencepiece
    import torch
    import transformers

    os.makedirs(directory)
    buffer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=buffer,
        vocab_size=shape["pieces"],
        model_type="bpe",
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    with open(os.path.join(directory, "sentencepiece.bpe.model"), "wb") as f:
        f.write(buffer.getvalue())
    settings = {"tokenizer_class": "NllbTokenizer", "src_lang": "deu_Latn", "tgt_lang": "eng_Latn"}
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({**settings, "additional_special_tokens": CODES}, f)
    transformers.AutoTokenizer.from_pretrained(directory).save_pretrained(directory)
    config = transformers.M2M100Config(
        vocab_size=shape["rows"],
        d_model=shape["d_model"],
        encoder_layers=shape["layers"],
        decoder_layers=shape["layers"],
        encoder_attention_heads=shape["heads"],
        decoder_attention_heads=shape["heads"],
        encoder_ffn_dim=shape["ffn"],
        decoder_ffn_dim=shape["ffn"],
        max_position_embeddings=1024,
        scale_embedding=True,
    )
    torch.manual_seed(0)
    transformers.M2M100ForConditionalGeneration(config).save_pretrained(directory)


def translate_speed(checkpoint: str, lines_path: str, out_len: int) -> float:
    """Sentences/s of our engine's greedy search on the lines (in this process)."""
    import mt_transformer as mt

    with open(lines_path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    model = mt.load(checkpoint, engine="torch", beam_size=1, max_len_a=0.0, max_len_b=out_len)
    model.translate(lines[:2])  # warm up
    return len(lines) / timed(model.translate, lines)[1]


def speed_in_process(checkpoint: str, lines_path: str, out_len: int) -> float:
    command = [sys.executable, __file__, "--speed-of", checkpoint, "--text", lines_path, "--out-len", str(out_len)]
    return float(subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip())


def measure(text_files: list[str], size: str, lines: int, out_len: int, work: str, rounds: int = 2) -> dict:
    text = []
    for path in text_files:
        with open(path, encoding="utf-8") as f:
            text += [line.strip() for line in f if line.strip()]
    source, full, trimmed = (os.path.join(work, name) for name in ("hf", "full", "trimmed"))
    make_model(source, text, SHAPES[size])
    stored = os.path.getsize(os.path.join(source, "model.safetensors")) / 2**20
    importer = [os.path.join(os.path.dirname(sys.executable), "mt-import"), "--format", "huggingface", source]
    results = {"machine": machine(), "size": size, "model_mib": round(stored, 1)}
    for name, out, extra in (("full", full, []), ("trimmed", trimmed, ["--keep-vocab", *text_files])):
        seconds, peak, own = peak_own_memory([*importer, out, *extra])
        with open(os.path.join(out, "vocab.json"), encoding="utf-8") as f:
            pieces = len(json.load(f))
        results[name] = {
            "import_s": round(seconds, 1),
            "peak_rss_mib": round(peak),
            "rss_over_model": round(peak / stored, 2),
            "own_mib": round(own),  # less the file pages of the mapped model.safetensors
            "own_over_model": round(own / stored, 2),
            "pieces": pieces,
            "checkpoint_mib": round(os.path.getsize(os.path.join(out, "model.safetensors")) / 2**20, 1),
        }
    sample = os.path.join(work, "lines.txt")
    with open(sample, "w", encoding="utf-8") as f:
        f.write("\n".join(text[:lines]) + "\n")
    speeds = {"full": [], "trimmed": []}
    for _ in range(rounds):  # alternating, each model in a process of its own
        for name, out in (("full", full), ("trimmed", trimmed)):
            speeds[name].append(speed_in_process(out, sample, out_len))
    for name in speeds:
        results[name]["sent_per_s"] = round(max(speeds[name]), 2)
    results["speedup"] = round(results["trimmed"]["sent_per_s"] / results["full"]["sent_per_s"], 2)
    return results


def main(argv=None) -> dict | None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", nargs="+", required=True, help="text files: the tokenizer's and the trim's")
    parser.add_argument("--size", choices=sorted(SHAPES), default="600M")
    parser.add_argument("--lines", type=int, default=100, help="lines translated per speed measurement")
    parser.add_argument("--out-len", type=int, default=20, help="subwords per translation")
    parser.add_argument("--rounds", type=int, default=2, help="speed measurements of each model, alternating")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--speed-of", help=argparse.SUPPRESS)  # the child process of one speed measurement
    args = parser.parse_args(argv)
    if args.speed_of:
        print(translate_speed(args.speed_of, args.text[0], args.out_len))
        return None
    with tempfile.TemporaryDirectory() as work:
        results = measure(args.text, args.size, args.lines, args.out_len, work, args.rounds)
    print(machine_line())
    rows = [
        [
            name,
            r["pieces"],
            r["checkpoint_mib"],
            r["import_s"],
            r["peak_rss_mib"],
            r["own_mib"],
            r["own_over_model"],
            r["sent_per_s"],
        ]
        for name, r in ((name, results[name]) for name in ("full", "trimmed"))
    ]
    header = [
        "import",
        "pieces",
        "checkpoint MiB",
        "import s",
        "peak RSS MiB",
        "own MiB",
        "own / model",
        "sent/s greedy",
    ]
    print(f"random NLLB-shaped model ({args.size}), model.safetensors {results['model_mib']} MiB")
    print(markdown_table(header, rows))
    print(f"trimmed / full speed: {results['speedup']}x")
    if args.json:
        write_json(args.json, results)
    return results


if __name__ == "__main__":
    main()
