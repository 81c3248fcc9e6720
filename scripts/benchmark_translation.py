"""The benchmark's translation measurements (`make bench`, scripts/benchmark.py): greedy and
beam search at two batch sizes, time against beam size, and CTranslate2 on the same model; and
a checkpoint's beam search in each decode precision (`make gpu-check`)."""

from __future__ import annotations

import os

from measure import synchronize, timed
from mt_transformer.config import Config
from mt_transformer.decoding.engines import open_translator
from mt_transformer.decoding.translator import torch_translator, with_decode
from mt_transformer.errors import UserError
from mt_transformer.evaluation.scores import score


def translate_synchronized(translate, lines: list[str], device):
    """translate(lines), returning once the device has finished (a GPU runs asynchronously)."""
    results = translate(lines)
    synchronize(device)
    return results


def bench_translation(model, tokenizer, config: Config, lines: list[str], device, beam: int, max_tokens: int):
    translate = torch_translator(model, tokenizer, with_decode(config, beam_size=beam, max_tokens=max_tokens), device)
    results, seconds = timed(translate, lines)
    tokens = sum(len(r[0].tokens) + 1 for r in results)
    return {
        "beam": beam,
        "max_tokens": max_tokens,
        "sentences": len(lines),
        "sentences_per_s": round(len(lines) / seconds, 1),
        "output_tokens_per_s": round(tokens / seconds, 1),
    }, [r[0].text for r in results]


def bench_ctranslate2(loaded, lines: list[str], device, ours_greedy: list[str], workdir: str):
    """The same model through CTranslate2: fp32 and int8 speed, and the share of greedy outputs
    equal to ours, measured in a fresh process (torch's threads, busy here, would slow it)."""
    import concurrent.futures
    import multiprocessing

    from mt_transformer.decoding import ctranslate2_export

    out = os.path.join(workdir, "ct2")
    ctranslate2_export.export(loaded, out)
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        return pool.submit(_ctranslate2_rows, out, lines, device.type, ours_greedy).result()


def _ctranslate2_rows(out: str, lines: list[str], device: str, ours_greedy: list[str]) -> list[dict]:
    rows = []
    for compute_type in ("float32", "int8"):
        for beam in (1, 4):
            translate = open_translator(
                out, "ctranslate2", device, compute_type, beam_size=beam, n_best=1, max_tokens=8192
            )
            translate(lines[:50])  # warm-up
            results, seconds = timed(translate, lines)
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


def bench_decode_precisions(run_dir: str, prefix: str, device) -> dict:
    """Beam 4 over `prefix`.{source language} in fp32, bf16 and fp16: sentences/s after a warm-up,
    and BLEU against `prefix`.{target language}. A failure is reported in the rows, not raised."""
    from mt_transformer import checkpoint
    from mt_transformer.data.text import read_lines

    precisions = ("fp32", "bf16", "fp16")
    try:
        loaded = checkpoint.load(run_dir, device)
    except Exception as error:  # reported with the other checks' results
        return dict.fromkeys(precisions, failed(error))
    data = loaded.config.data
    sources, references = (read_lines(f"{prefix}.{lang}") for lang in (data.src_lang, data.tgt_lang))
    rows = {}
    for precision in precisions:
        try:
            config = with_decode(loaded.config, beam_size=4, precision=precision)
            translate = torch_translator(loaded.model, loaded.tokenizer, config, device)
            translate(sources[:50])  # warm-up
            synchronize(device)
            results, seconds = timed(translate_synchronized, translate, sources, device)
            hypotheses = [r[0].text for r in results]
            bleu = score(hypotheses, references, ("bleu",), data.tgt_lang)["bleu"]
            rows[precision] = {"ok": True, "sentences": len(sources), "per_s": len(sources) / seconds, "bleu": bleu}
        except Exception as error:
            rows[precision] = failed(error)
    return rows


def failed(error: Exception) -> dict:
    return {"ok": False, "error": f"{type(error).__name__}: {error}".splitlines()[0]}
