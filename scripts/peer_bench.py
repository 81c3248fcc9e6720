#!/usr/bin/env python3
"""mt_transformer in the peers' benchmark: the same data, model and settings as fairseq and OpenNMT-py.

Run after the peers' `prepare_data.sh` (it writes $PEERS_DIR/data). Trains with mt-train on
configs/bench/peers.yaml (the settings the toolkits share: d_model 256, 3+3 layers, 300 updates
of 4,096 target tokens, ...) with the peers' data, for STEPS updates, in --precision. Then
translates the same 500 test sentences with beam 4 and scores them with sacreBLEU, in fp32 and
each other of --decode-precisions.

Measured as the peers' scripts measure: training target tokens/s is the mean of the per-log-
interval rates after the first interval; decoding sentences/s counts the search only (model
loading excluded). Prints one `peer=mt_transformer ...` line and writes result.json.

    python3 scripts/peer_bench.py [--peers-dir ~/.cache/mt-peers] [--tag r1] [--decode-only]
        [--precision auto] [--decode-precisions fp32 bf16]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

from measure import machine_line, run_process, timed, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS_CONFIG = os.path.join(ROOT, "configs", "bench", "peers.yaml")


def steady_rate(run_dir: str) -> float:
    """Mean of the logged tokens/s after the first interval (startup and warm-up)."""
    from mt_transformer.training.run_log import read_metrics

    return statistics.mean([e["tokens_per_s"] for e in read_metrics(run_dir) if "tokens_per_s" in e][1:])


def decode(args, data: str, out: str) -> dict:
    """Beam-4 translation of the test sentences with the trained model, at each of --max-tokens
    (and through CTranslate2 with --ctranslate2), the settings alternating within each round."""
    import torch

    from mt_transformer import checkpoint
    from mt_transformer.decoding.engines import open_translator
    from mt_transformer.decoding.translator import torch_translator, with_decode
    from mt_transformer.evaluation.scores import score

    torch.set_num_threads(2)
    loaded = checkpoint.load(os.path.join(out, "run"), torch.device("cpu"))
    sources = open(f"{data}/raw/test.de", encoding="utf-8").read().splitlines()
    references = open(f"{data}/raw/test.en", encoding="utf-8").read().splitlines()
    engines = {}
    for precision in args.decode_precisions:
        for max_tokens in args.max_tokens:
            settings = with_decode(loaded.config, beam_size=4, alpha=0.6, max_tokens=max_tokens, precision=precision)
            name = str(max_tokens) if precision == "fp32" else f"{max_tokens}-{precision}"
            engines[name] = torch_translator(loaded.model, loaded.tokenizer, settings, torch.device("cpu"))
    if args.ctranslate2:
        from mt_transformer.decoding import ctranslate2_export

        ctranslate2_export.export(loaded, os.path.join(out, "ct2"))
        engines["ct2"] = open_translator(
            os.path.join(out, "ct2"), "ctranslate2", "cpu", "float32", threads=2, beam_size=4, alpha=0.6
        )
    result = {}
    for round_ in range(args.rounds):
        for name, translate in engines.items():
            translate(sources[:20])  # warm-up
            results, seconds = timed(translate, sources)
            hypotheses = [r[0].text for r in results]
            tokens = sum(len(r[0].tokens) for r in results)
            result[f"decode_sent_per_s@{name}/round{round_ + 1}"] = round(len(sources) / seconds, 2)
            result[f"decode_tok_per_s@{name}/round{round_ + 1}"] = round(tokens / seconds, 1)
            result[f"out_tokens@{name}"] = tokens
            result[f"bleu@{name}"] = score(hypotheses, references, ["bleu"])["bleu"]
            with open(os.path.join(out, f"hyp.test.{name}"), "w", encoding="utf-8") as f:
                f.write("".join(h + "\n" for h in hypotheses))
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peers-dir", default=os.environ.get("PEERS_DIR", os.path.expanduser("~/.cache/mt-peers")))
    parser.add_argument("--tag", default="r1")
    parser.add_argument("--steps", type=int, default=int(os.environ.get("STEPS", 300)))
    parser.add_argument("--decode-only", action="store_true", help="translate again with the model of --tag")
    parser.add_argument(
        "--max-tokens", type=int, nargs="+", default=[2048, 8192], help="decoding batch sizes in source tokens"
    )
    parser.add_argument("--rounds", type=int, default=1, help="decode this many times, alternating the settings")
    parser.add_argument(
        "--ctranslate2", action="store_true", help="also decode with the same model exported to CTranslate2 (fp32)"
    )
    parser.add_argument("--precision", default="fp32", choices=["auto", "fp32", "bf16"], help="train.precision")
    parser.add_argument(
        "--decode-precisions", nargs="+", default=["fp32"], choices=["fp32", "bf16", "fp16"], help="decode.precision"
    )
    parser.add_argument("--set", nargs="*", default=[], metavar="SECTION.KEY=VALUE", help="more config overrides")
    args = parser.parse_args(argv)
    data = os.path.join(args.peers_dir, "data")
    out = os.path.join(args.peers_dir, "runs", f"mt_transformer-{args.tag}")
    if not os.path.isfile(f"{data}/raw/test.de"):
        sys.exit(f"{data}/raw/test.de not found: run the peers' prepare_data.sh first")
    os.makedirs(out, exist_ok=True)
    result = {"peer": "mt_transformer", "machine": machine_line()}

    if not args.decode_only:
        settings = [
            f"data.train={data}/raw/train",
            f"data.valid={data}/raw/valid",
            f"train.output_dir={os.path.join(out, 'run')}",
            f"train.max_steps={args.steps}",
            f"train.valid_every={args.steps}",
            f"train.precision={args.precision}",
            *args.set,
        ]
        train = "import sys; from mt_transformer.cli import train_main; sys.argv[0] = 'mt-train'; train_main()"
        command = [sys.executable, "-c", train, "--config", PEERS_CONFIG, "--set", *settings]
        seconds, peak_mb = run_process(command, env={**os.environ, "OMP_NUM_THREADS": "2", "PYTHONPATH": ROOT})
        result["train_wall_s"], result["train_peak_rss_mb"] = round(seconds, 1), round(peak_mb, 1)
    result["train_tok_per_s"] = round(steady_rate(os.path.join(out, "run")), 1)

    result.update(decode(args, data, out))
    write_json(os.path.join(out, "result.json"), result)
    print(" ".join(f"{k}={v}" for k, v in result.items()))
    return result


if __name__ == "__main__":
    main()
