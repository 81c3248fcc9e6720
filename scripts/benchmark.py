#!/usr/bin/env python3
"""Training and translation speed on whatever device is present (`make bench`).

Training: steady-state target tokens/s and source+target tokens/s (the first updates are
excluded), seconds per update, the padding fraction of the batches, peak memory, and model
FLOPs utilisation (flops.py's count over the measured matrix-multiply ceilings of the device).
Translation: greedy and beam-4 sentences/s and output tokens/s at two batch sizes.
How cost grows: time per update against sentence length (16 to 512 at a fixed token budget),
and translation time against beam size (1, 2, 4, 8, 16).
CTranslate2 (when installed and a trained checkpoint is given): the same model exported, its
fp32 and int8 speed, and how many greedy outputs equal ours.

Model: the peers' size (d_model 256, 3+3 layers, 4 heads, d_ff 1024, pre-norm, shared 8k
vocabulary) on ../shared/corpora/multi30k-de-en when present, else on the generated demo
corpus (said in the output). Prints Markdown tables and replaces this device's section of
docs/benchmarks.md (--markdown); --json PATH also writes the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import tempfile
import time

import numpy as np
import torch

from mt_transformer import checkpoint
from mt_transformer.config import Config, DataConfig, ModelConfig, TrainConfig
from mt_transformer.data.batching import batch_loader, token_batches
from mt_transformer.data.demo_data import generate
from mt_transformer.data.prepare import prepare_data
from mt_transformer.decoding.translator import load_translator, torch_translator, with_decode
from mt_transformer.devices import cpu_model, use_fast_matmul
from mt_transformer.errors import UserError
from mt_transformer.model.flops import training_flops
from mt_transformer.model.transformer import Transformer
from mt_transformer.training.precision import choose_precision
from mt_transformer.training.state import TrainerState
from mt_transformer.training.step import PRECISIONS, TrainingStep, optimizer_for

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

MULTI30K = os.path.join(ROOT, "..", "shared", "corpora", "multi30k-de-en")
MODEL = dict(
    d_model=256,
    n_heads=4,
    d_ff=1024,
    encoder_layers=3,
    decoder_layers=3,
    dropout=0.1,
    attention_dropout=0.1,
    norm="pre",
)


def corpus(workdir: str) -> tuple[DataConfig, str]:
    if os.path.isfile(os.path.join(MULTI30K, "train.de")):
        return DataConfig(
            src_lang="de",
            tgt_lang="en",
            train=f"{MULTI30K}/train",
            valid=f"{MULTI30K}/valid",
            vocab_size=8000,
            max_len=128,
        ), "multi30k-de-en"
    generate(os.path.join(workdir, "demo"), train=30000, valid=1000, test=10)
    return DataConfig(
        src_lang="en",
        tgt_lang="de",
        train=f"{workdir}/demo/train",
        valid=f"{workdir}/demo/valid",
        vocab_size=1000,
        spm_type="bpe",
        max_len=128,
    ), "generated demo corpus (multi30k not found)"


def peak_memory_mb(device: torch.device) -> float:
    """On CUDA the most allocated since reset_peak_memory(); on CPU the process's peak resident size."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak_memory(device: torch.device) -> None:
    """Start a measured section: on CUDA, forget the peak of what ran before (the CPU's peak
    resident size cannot be reset)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def precision_name(device: torch.device, precision: str) -> str:
    """What a precision setting computes in: fp32 on CUDA is TF32 in the matrix products."""
    if precision == "fp32" and device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32:
        return "fp32 (TF32 matmuls)"
    return precision


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_ceiling(device: torch.device, dtype: torch.dtype) -> float:
    """The best measured FLOP/s of square and model-shaped matrix products in this dtype."""
    shapes = (
        [(2048, 2048, 2048), (4096, 256, 1024), (4096, 1024, 256)]
        if device.type == "cpu"
        else [(8192, 8192, 8192), (16384, 4096, 4096)]
    )
    best = 0.0
    for m, k, n in shapes:
        a, b = torch.randn(m, k, device=device, dtype=dtype), torch.randn(k, n, device=device, dtype=dtype)
        a @ b
        synchronize(device)
        repeats, start = 0, time.perf_counter()
        while time.perf_counter() - start < 1.0 or repeats < 2:
            a @ b
            synchronize(device) if repeats % 8 == 7 else None
            repeats += 1
        synchronize(device)
        best = max(best, 2 * m * k * n * repeats / (time.perf_counter() - start))
    return best


def training_step(model, device: torch.device, precision: str, forward=None) -> TrainingStep:
    """mt-train's own update (training/step.py) for `model` with the default train settings in
    `precision`: Adam with the Noam schedule, gradient scaling for fp16, the non-finite check."""
    train = TrainConfig(precision=precision)
    optimizer, scheduler, scaler = optimizer_for(model, train, model.output.in_features, device)
    return TrainingStep(model, optimizer, scheduler, scaler, train, TrainerState(), device, forward)


def batch_flops(batch, vocab: int) -> int:
    src_lens, tgt_lens = (batch.src != 0).sum(1).tolist(), (batch.tgt_out != 0).sum(1).tolist()
    return training_flops(
        src_lens, tgt_lens, MODEL["d_model"], MODEL["d_ff"], MODEL["encoder_layers"], MODEL["decoder_layers"], vocab
    )


def bench_training(model, dataset, device, precision: str, max_tokens: int, warmup_updates: int, updates: int):
    src_lens, tgt_lens = np.asarray(dataset["src_len"]), np.asarray(dataset["tgt_len"])
    batches = token_batches(src_lens, tgt_lens, max_tokens, seed=1)
    reset_peak_memory(device)
    step = training_step(model, device, precision)
    vocab = model.output.out_features
    model.train()
    real = padded = target = source = flops = 0
    start = None
    loader = batch_loader(dataset.select_columns(["src_ids", "tgt_ids"]), batches[: warmup_updates + updates])
    for i, batch in enumerate(loader):
        if i == warmup_updates:
            synchronize(device)
            start = time.perf_counter()
        step([batch])
        if i >= warmup_updates:
            target += batch.target_tokens
            source += int((batch.src != 0).sum())
            real += int((batch.src != 0).sum() + (batch.tgt_out != 0).sum())
            padded += batch.src.numel() + batch.tgt_out.numel()
            flops += batch_flops(batch, vocab)
    synchronize(device)
    seconds = time.perf_counter() - start
    return {
        "target_tokens_per_s": round(target / seconds, 1),
        "source_target_tokens_per_s": round((source + target) / seconds, 1),
        "seconds_per_update": round(seconds / updates, 4),
        "padding_fraction": round(1 - real / padded, 4),
        "updates_timed": updates,
        "peak_memory_mb": round(peak_memory_mb(device), 1),
        "model_flops_per_s": round(flops / seconds),
    }


def random_batch(vocab: int, sentences: int, length: int, generator, device):
    """Sentences of `length` random tokens, the same ones as source and target."""
    from mt_transformer.data.batching import Batch

    ids = torch.randint(4, vocab, (sentences, length + 1), generator=generator)
    return Batch(src=ids[:, 1:], tgt_in=ids[:, :-1], tgt_out=ids[:, 1:]).to(device)


def seconds_per_update(step, batch, device, warmups: int, updates: int) -> float:
    for _ in range(warmups):
        step([batch])
    synchronize(device)
    start = time.perf_counter()
    for _ in range(updates):
        step([batch])
    synchronize(device)
    return (time.perf_counter() - start) / updates


def bench_lengths(model, device, precision: str, vocab: int, budget: int = 4096, updates: int = 3):
    """Seconds per update of `budget` target tokens in sentences of one length (sources as long)."""

    step = training_step(model, device, precision)
    model.train()
    rows = []
    generator = torch.Generator().manual_seed(1)
    for length in (16, 32, 64, 128, 256, 512):
        sentences = budget // length
        batch = random_batch(vocab, sentences, length, generator, device)
        seconds = seconds_per_update(step, batch, device, 1, updates)
        rows.append(
            {
                "length": length,
                "sentences": sentences,
                "seconds_per_update": round(seconds, 4),
                "target_tokens_per_s": round(sentences * length / seconds, 1),
                "model_flops_per_s": round(batch_flops(batch, vocab) / seconds),
            }
        )
    return rows


def bench_translation(model, tokenizer, config: Config, lines: list[str], device, beam: int, max_tokens: int):
    translate = torch_translator(model, tokenizer, with_decode(config, beam_size=beam, max_tokens=max_tokens), device)
    start = time.perf_counter()
    results = translate(lines)
    seconds = time.perf_counter() - start
    tokens = sum(len(r[0].tokens) + 1 for r in results)
    return {
        "beam": beam,
        "max_tokens": max_tokens,
        "sentences": len(lines),
        "sentences_per_s": round(len(lines) / seconds, 1),
        "output_tokens_per_s": round(tokens / seconds, 1),
    }, [r[0].text for r in results]


def bench_ctranslate2(loaded, lines: list[str], device, ours_greedy: list[str], workdir: str):
    """The same model through CTranslate2: fp32 and int8 speed, and the share of greedy outputs equal to ours."""
    from mt_transformer.decoding import ctranslate2_engine

    out = os.path.join(workdir, "ct2")
    ctranslate2_engine.export(loaded, out)
    rows = []
    for compute_type in ("float32", "int8"):
        for beam in (1, 4):
            translate = load_translator(
                out, "ctranslate2", device.type, compute_type, beam_size=beam, n_best=1, max_tokens=8192
            )
            translate(lines[:50])  # warm-up
            start = time.perf_counter()
            results = translate(lines)
            seconds = time.perf_counter() - start
            row = {
                "compute_type": compute_type,
                "beam": beam,
                "sentences_per_s": round(len(lines) / seconds, 1),
                "output_tokens_per_s": round(sum(len(r[0].tokens) + 1 for r in results) / seconds, 1),
            }
            if beam == 1:
                same = sum(r[0].text == ours for r, ours in zip(results, ours_greedy))
                row["greedy_equal_to_ours"] = round(same / len(lines), 4)
            rows.append(row)
    return rows


def bench_paper_configs(device, tokens: int, updates: int, runs=None):
    """Speed of the paper's base and big models (configs/base.yaml, big.yaml) on batches of
    `tokens` target tokens (random sentences of 32 tokens). `runs`: (config, precision, compile)
    triples, by default both configs in bf16 with and without torch.compile. Peak memory is each
    run's own."""
    import yaml

    runs = runs or [(name, "bf16", compiled) for name in ("base", "big") for compiled in (False, True)]
    rows = []
    for name, precision, compiled in runs:
        with open(os.path.join(ROOT, "configs", f"{name}.yaml"), encoding="utf-8") as f:
            config = yaml.safe_load(f)
        model_args, vocab = config["model"], config["data"]["vocab_size"]
        reset_peak_memory(device)
        torch.manual_seed(1)
        model = Transformer(vocab, vocab, **model_args).to(device)
        runner = torch.compile(model) if compiled else model
        step = training_step(model, device, precision, forward=runner)
        length = 32
        sentences = max(1, tokens // length)
        batch = random_batch(vocab, sentences, length, torch.Generator().manual_seed(1), device)
        model.train()
        seconds = seconds_per_update(step, batch, device, 3, updates)  # 3 warm-ups: compilation too
        flops = training_flops(
            [length] * sentences,
            [length] * sentences,
            model_args["d_model"],
            model_args["d_ff"],
            model_args["encoder_layers"],
            model_args["decoder_layers"],
            vocab,
        )
        rows.append(
            {
                "config": name,
                "precision": precision_name(device, precision),
                "compile": compiled,
                "target_tokens": sentences * length,
                "seconds_per_update": round(seconds, 4),
                "target_tokens_per_s": round(sentences * length / seconds, 1),
                "model_flops_per_s": round(flops / seconds),
                "peak_memory_mb": round(peak_memory_mb(device), 1),
            }
        )
        del model, runner, step
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def machine(device: torch.device) -> str:
    gpu = f", GPU {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    return f"{cpu_model()}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads{gpu}"


def markdown(results: dict) -> str:
    t, ceilings = results["training"], results["ceilings_gflops"]
    achieved = t["model_flops_per_s"] / 1e9
    ceiling = ceiling_for(results["precision"], ceilings)
    mfu = f"{achieved / ceilings[ceiling]:.1%} of {ceiling}"
    lines = [
        f"machine: {results['machine']}  ",
        f"corpus: {results['corpus']}, {results['precision']}; translation model: {results['translation_model']}  ",
        "matrix-multiply ceilings measured: " + ", ".join(f"{n} {c:.0f} GFLOP/s" for n, c in ceilings.items()),
        "",
        "| training | target tok/s | src+tgt tok/s | s/update | padding | peak MB | model GFLOP/s | MFU |",
        "|---|---|---|---|---|---|---|---|",
        f"| d256 3+3 | {t['target_tokens_per_s']:,.0f} | {t['source_target_tokens_per_s']:,.0f} | "
        f"{t['seconds_per_update']} | {t['padding_fraction']:.1%} | {t['peak_memory_mb']:,.0f} | "
        f"{t['model_flops_per_s'] / 1e9:.1f} | {mfu} |",
        "",
        "| sentence length | sentences | s/update | target tok/s | model GFLOP/s |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['length']} | {r['sentences']} | {r['seconds_per_update']} | {r['target_tokens_per_s']:,.0f} | "
        f"{r['model_flops_per_s'] / 1e9:.1f} |"
        for r in results["lengths"]
    ]
    lines += ["", "| translation | max_tokens | sentences | sent/s | output tok/s |", "|---|---|---|---|---|"]
    lines += [
        f"| {'greedy' if r['beam'] == 1 else 'beam ' + str(r['beam'])} | {r['max_tokens']} | {r['sentences']} | "
        f"{r['sentences_per_s']} | {r['output_tokens_per_s']} |"
        for r in results["translation"] + results["beams"]
    ]
    if results.get("paper_configs"):
        lines += ["", paper_configs_table(results["paper_configs"], ceilings)]
    if results.get("ctranslate2_error"):
        lines += ["", f"CTranslate2: {results['ctranslate2_error']}"]
    if results.get("ctranslate2"):
        lines += [
            "",
            "| CTranslate2 | search | sent/s | output tok/s | greedy outputs equal to ours |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['compute_type']} | {'greedy' if r['beam'] == 1 else 'beam ' + str(r['beam'])} | "
            f"{r['sentences_per_s']} | {r['output_tokens_per_s']} | "
            f"{format(r['greedy_equal_to_ours'], '.1%') if 'greedy_equal_to_ours' in r else ''} |"
            for r in results["ctranslate2"]
        ]
    return "\n".join(lines) + "\n"


def ceiling_for(precision: str, ceilings: dict) -> str:
    """The measured ceiling that a precision's matrix products run against: bf16's for bf16 and
    fp16, else the float32 one (TF32 on CUDA)."""
    return "bf16" if precision in ("bf16", "fp16") else next(n for n in ceilings if n != "bf16")


def paper_configs_table(rows: list[dict], ceilings: dict) -> str:
    """The base and big configs' speed, MFU against the measured ceiling of the matrix products
    each precision runs on (TF32 or fp32 for fp32, bf16 for bf16 and fp16)."""
    lines = [
        "| config | precision | torch.compile | target tokens/update | s/update | target tok/s | "
        "model TFLOP/s | MFU | peak MB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        name = ceiling_for(r["precision"], ceilings)
        achieved = r["model_flops_per_s"] / 1e9
        lines.append(
            f"| {r['config']} | {r['precision']} | {'yes' if r['compile'] else 'no'} | {r['target_tokens']:,} | "
            f"{r['seconds_per_update']} | {r['target_tokens_per_s']:,.0f} | {achieved / 1000:.1f} | "
            f"{achieved / ceilings[name]:.1%} of {name} | {r['peak_memory_mb']:,.0f} |"
        )
    return "\n".join(lines)


def write_section(path: str, device: str, text: str) -> None:
    """Replace this machine's section of the benchmarks page (between its two markers, named by the
    device kind and the processor), or add it: each host keeps its own numbers."""
    begin, end = f"<!-- make bench: {device} -->", f"<!-- /make bench: {device} -->"
    page = open(path, encoding="utf-8").read() if os.path.isfile(path) else "# Benchmarks\n"
    block = f"{begin}\n{text}{end}"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    page = pattern.sub(lambda _: block, page) if pattern.search(page) else page.rstrip("\n") + "\n\n" + block + "\n"
    from mt_transformer.files import write_text

    write_text(path, page)


def bench_translations(model, tokenizer, config: Config, lines: list[str], device, loaded, workdir: str) -> dict:
    """Greedy and beam 4 at two batch sizes, beams 1-16, and CTranslate2 on a trained `loaded`
    checkpoint where it is installed."""
    model.eval()
    results, outputs = {"translation": []}, {}
    for beam in (1, 4):
        for max_tokens in (2048, 8192):
            row, outputs[beam] = bench_translation(model, tokenizer, config, lines, device, beam, max_tokens)
            results["translation"].append(row)
    results["beams"] = [
        bench_translation(model, tokenizer, config, lines[:300], device, beam, 8192)[0] for beam in (1, 2, 4, 8, 16)
    ]
    if loaded is None:
        return results
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return results
    try:
        results["ctranslate2"] = bench_ctranslate2(loaded, lines, device, outputs[1], workdir)
    except UserError as error:  # its GPU build needs its own CUDA libraries
        results["ctranslate2_error"] = str(error)
    return results


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument(
        "--markdown",
        default=os.path.join(ROOT, "docs", "benchmarks.md"),
        help="replace this device's section of this page ('' for none)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--precision", default="fp32", choices=["auto", *PRECISIONS], help="auto: what mt-train would choose here"
    )
    parser.add_argument("--updates", type=int, default=30, help="timed training updates")
    parser.add_argument("--sentences", type=int, default=1000, help="sentences translated per setting")
    parser.add_argument(
        "--checkpoint",
        help="time translation with this trained run or checkpoint "
        "(default: the freshly initialised model, whose outputs run to the length limit)",
    )
    parser.add_argument(
        "--paper-configs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="bf16 MFU of the base and big configs with and without torch.compile (default: on CUDA only)",
    )
    parser.add_argument("--paper-tokens", type=int, default=16384, help="target tokens per update for --paper-configs")
    parser.add_argument("--paper-updates", type=int, default=10, help="timed updates for --paper-configs")
    parser.add_argument("--no-compile", action="store_true", help="--paper-configs without the torch.compile runs")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    device = torch.device(args.device)
    use_fast_matmul(device)  # fp32 on CUDA is TF32, as in mt-train
    torch.manual_seed(1)

    with tempfile.TemporaryDirectory() as workdir:
        data, corpus_name = corpus(workdir)
        tokenizer, encoded, _ = prepare_data(data, workdir, seed=1)
        model = Transformer(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, **MODEL).to(device)
        if args.precision == "auto":
            args.precision, why = choose_precision("auto", device, model, 4096)
            print(f"precision: {args.precision} ({why})")
        ceilings = {
            ("tf32" if precision_name(device, "fp32") != "fp32" else "fp32"): matmul_ceiling(device, torch.float32)
            / 1e9,
            "bf16": matmul_ceiling(device, torch.bfloat16) / 1e9,
        }
        results = {
            "machine": machine(device),
            "corpus": corpus_name,
            "precision": precision_name(device, args.precision),
            "ceilings_gflops": {k: round(v, 1) for k, v in ceilings.items()},
            "training": bench_training(model, encoded["train"], device, args.precision, 4096, 5, args.updates),
            "lengths": bench_lengths(model, device, args.precision, tokenizer.tgt_vocab_size),
        }
        lines = list(encoded["valid"]["src"])[: args.sentences]
        loaded = checkpoint.load(args.checkpoint, device) if args.checkpoint else None
        if loaded is not None:
            model, tokenizer, config = loaded.model, loaded.tokenizer, loaded.config
        else:
            config = Config(data=data, model=ModelConfig(**MODEL))
        results["translation_model"] = args.checkpoint or "untrained (outputs run to the length limit)"
        results.update(bench_translations(model, tokenizer, config, lines, device, loaded, workdir))

        if args.paper_configs or (args.paper_configs is None and device.type == "cuda"):
            compiled = (False,) if args.no_compile else (False, True)
            runs = [(name, "bf16", c) for name in ("base", "big") for c in compiled]
            results["paper_configs"] = bench_paper_configs(device, args.paper_tokens, args.paper_updates, runs)

    text = markdown(results)
    print(text)
    if args.markdown:
        processor = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
        write_section(args.markdown, f"{device.type}, {processor}", text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
