"""--engine auto, the default of every command that translates or scores and of mt.load: on a
CPU, CTranslate2 runs a call when it has every setting the call asks for, on the checkpoint's
CTranslate2 conversion (made once, exchange/ctranslate2_cache.py); our engine runs the rest.

    CTranslate2   greedy and beam search, n-best lists, prefixes, no repeated n-grams, the length
                  penalty and limits, scores, --avoid, --alignment and <unk> filled from the
                  source (through its attention: the last layer, mean of the heads), int8, mt-score
    ours          ensembles, --constraints, --attention heatmaps, other layers or heads,
                  mt.attention, sampling (CTranslate2's does not repeat for a seed, so
                  decode.seed would not hold), bf16 and fp16, GPUs; every call when ctranslate2
                  cannot be imported

decode.precision auto runs CTranslate2 in float32 where it runs the call (below).

Which engine runs is said once, on stderr, when the translator is loaded.
"""

from __future__ import annotations

import logging
import os

import torch

from mt_transformer import checkpoint
from mt_transformer.decoding.translator import Translator, load_translator, load_untagged
from mt_transformer.devices import select_device
from mt_transformer.errors import UserError
from mt_transformer.exchange.ctranslate2_cache import cached_conversion

log = logging.getLogger(__name__)

ENGINES = ("auto", "torch", "ctranslate2")
# what a call may ask for that only our engine does, and the flag that asks for it
TORCH_ONLY = {
    "constraints": "--constraints",
    "attention": "--attention",
    "attention_layer": "--attention-layer",
    "attention_head": "--attention-head",
}


def is_export(path: str) -> bool:
    """An mt-export --format ctranslate2 directory (which only CTranslate2 runs)."""
    return os.path.isfile(os.path.join(path, "model.bin"))


def torch_reason(paths: list[str], device: torch.device, decode: dict, needs=()) -> str | None:
    """Why our engine runs a call of these settings (None: CTranslate2 can run it)."""
    if len(paths) > 1:
        return "an ensemble"
    for need in needs:
        if need in TORCH_ONLY:
            return TORCH_ONLY[need]
    return settings_reason(device, {**decode, "precision": decode.get("precision") or _checkpoint_precision(paths[0])})


def settings_reason(device: torch.device, decode: dict) -> str | None:
    """Why our engine runs a call of these decode settings (precision given) on one model."""
    if device.type != "cpu":
        return f"{device.type}: CTranslate2 is chosen on CPUs"
    if decode.get("sampling"):
        return "--sampling"
    # auto: CTranslate2's float32, which has no bf16 on CPUs and outruns our bf16
    # (docs/benchmarks.md, "The decoding engine against CTranslate2")
    precision = decode["precision"]
    if precision not in ("fp32", "int8", "auto"):
        return f"{precision}, which CTranslate2 does not compute on CPUs"
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return "ctranslate2 cannot be imported (pip install ctranslate2)"
    return None


def _checkpoint_precision(path: str) -> str:
    return checkpoint.read_config(checkpoint.resolve(path)).decode.precision


def open_translator(
    path: str | list[str],
    engine: str = "auto",
    device: str = "auto",
    compute_type: str = "default",
    threads: int = 0,
    ensemble_mode: str = "logprob",
    *,
    needs=(),
    tgt_lang: str | None = None,
    src_lang: str | None = None,
    tagged: bool = True,
    **decode,
) -> Translator:
    """The translator of `path` (a checkpoint or run directory, an mt-export directory, several
    checkpoints: their ensemble) on `engine`; auto picks as the module says and logs its choice.
    `needs`: what the calls will ask for beyond decode settings (TORCH_ONLY's keys). `tagged`:
    with the target tag of `tgt_lang`, or the language tokens of `src_lang` and `tgt_lang`
    (decoding/translator.py, load_translator); else without (a server tags each pair itself)."""
    paths = [path] if isinstance(path, str) else list(path)
    settings = (device, compute_type, threads, ensemble_mode)
    if engine not in ENGINES:
        raise UserError(f"--engine: expected one of {', '.join(ENGINES)}, got {engine!r}")

    def load(engine: str, paths: list[str]) -> Translator:
        if tagged:
            return load_translator(paths, engine, *settings, tgt_lang=tgt_lang, src_lang=src_lang, **decode)
        return load_untagged(paths, engine, *settings, **decode)

    if engine == "ctranslate2" and not is_export(paths[0]) and len(paths) == 1:
        return _said(load(engine, [cached_conversion(paths[0])]), "--engine ctranslate2")
    if engine != "auto":
        return _said(load(engine, paths), f"--engine {engine}")
    if is_export(paths[0]):
        return _said(load("ctranslate2", paths), "a CTranslate2 export")
    reason = torch_reason(paths, select_device(device, key="--device"), decode, needs)
    if reason is None:
        try:
            converted = cached_conversion(paths[0])
        except UserError as error:
            reason = f"the CTranslate2 conversion failed: {error}"
        else:
            return _said(load("ctranslate2", [converted]), "auto")
    return _said(load("torch", paths), f"auto: {reason}")


def engine_name(translator: Translator) -> str:
    return "torch" if translator.model is not None else "ctranslate2"


def describe(translator: Translator) -> str:
    """The engine a translator runs, its precision and threads, for the one line that says so."""
    if translator.model is not None:
        where = translator.device
        threads = f", {torch.get_num_threads()} threads" if where.type == "cpu" else ""
        return f"ours (PyTorch) on {where}, {translator.decode.precision}{threads}"
    ct2, each = translator.search.translator, translator.search.worker_threads
    threads = f", {ct2.num_translators} worker(s) of {each} thread(s)" if ct2.device == "cpu" else ""
    return f"CTranslate2 on {ct2.device}, {ct2.compute_type}{threads}"


def _said(translator: Translator, why: str) -> Translator:
    log.info("engine: %s (%s)", describe(translator), why)
    return translator
