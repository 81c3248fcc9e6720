"""A translator opened on its runtime's engine (decoding/runtime.py settles which): ours on the
checkpoint(s), or CTranslate2 on an mt-export directory or a checkpoint's conversion. Which
engine runs is said once, on stderr, when the translator is opened.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mt_transformer import checkpoint
from mt_transformer.config import config_from_dict
from mt_transformer.decoding.ctranslate2_cache import cached_conversion
from mt_transformer.decoding.runtime import Runtime, fallback, is_export, settle
from mt_transformer.decoding.translator import Translator, input_limit, torch_translator, with_decode
from mt_transformer.errors import UserError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


def open_translator(
    path: str | list[str],
    engine: str = "auto",
    device: str | torch.device = "auto",
    compute_type: str = "default",
    threads: int = 0,
    ensemble_mode: str = "logprob",
    *,
    needs=(),
    tgt_lang: str | None = None,
    src_lang: str | None = None,
    tagged: bool = True,
    worker_threads: int = 1,
    **decode,
) -> Translator:
    """The translator of `path` (a checkpoint or run directory, an mt-export directory, several
    checkpoints: their ensemble), its runtime settled from these settings (runtime.settle) and
    `decode` overriding the (first) checkpoint's decode settings. `needs`: what the calls will ask
    for beyond decode settings (runtime.TORCH_ONLY's keys). `tagged`: with the target tag of
    `tgt_lang`, or the language tokens of `src_lang` and `tgt_lang`; else without (a server tags
    each pair itself). `worker_threads`: CTranslate2's threads per worker on a CPU (runtime.Runtime)."""
    paths = [path] if isinstance(path, str) else list(path)
    if decode.get("sampling") and decode.get("beam_size") is None:
        decode["beam_size"] = 1  # the checkpoint's beam size is for search
    runtime = settle(
        paths,
        engine,
        device,
        compute_type,
        threads,
        ensemble_mode,
        needs=needs,
        decode=decode,
        worker_threads=worker_threads,
    )
    translator = None
    if runtime.engine == "ctranslate2" and not is_export(paths[0]):
        try:
            translator = _ctranslate2(cached_conversion(paths[0]), runtime, decode)
        except UserError as error:
            if engine != "auto":
                raise
            why = f"auto: the CTranslate2 conversion failed: {error}"
            runtime = fallback(paths, runtime.device, decode, runtime.threads, runtime.ensemble_mode, why)
    if translator is None:
        translator = (
            _ctranslate2(paths[0], runtime, decode)
            if runtime.engine == "ctranslate2"
            else _torch(paths, runtime, decode)
        )
    if tagged:
        translator.leads = translator.languages.leads(src_lang, tgt_lang)
    log.info("engine: %s (%s)", describe(translator), runtime.why)
    return translator


def _ctranslate2(directory: str, runtime: Runtime, decode: dict) -> Translator:
    from mt_transformer.decoding import ctranslate2_engine

    settings = ctranslate2_engine.read_settings(directory)
    config = with_decode(config_from_dict(settings["config"]), **decode)
    ct2, tokenizer, intra = ctranslate2_engine.load(
        directory, runtime.device, runtime.compute_type, runtime.threads, runtime.worker_threads
    )
    max_positions = config.model.max_positions
    search = ctranslate2_engine.Ct2Search(ct2, tokenizer, config.decode, max_positions, intra)
    found = Translator(
        search, tokenizer, config.decode, input_limit(config, max_positions), runtime=runtime, config=config
    )
    found.leads = found.languages.token_leads()
    return found


def _torch(paths: list[str], runtime: Runtime, decode: dict) -> Translator:
    import torch

    from mt_transformer.devices import limit_kernel_cache, slow_precision

    device = torch.device(runtime.device)
    limit_kernel_cache(device)
    members = [checkpoint.load(p, device) for p in paths]
    first = members[0]
    config = with_decode(first.config, **decode)
    slow = slow_precision(device, runtime.precision)
    if slow:
        log.warning("decode.precision: %s", slow)
    if len(members) == 1:
        return torch_translator(first.model, first.tokenizer, config, runtime)
    from mt_transformer.decoding.ensemble import Ensemble

    for member in members[1:]:
        if member.tokenizer.fingerprint() != first.tokenizer.fingerprint():
            raise UserError(
                f"--checkpoint: {member.directory} and {first.directory} have different tokenizers; "
                f"an ensemble needs models of one tokenizer"
            )
    ensemble = Ensemble([m.model for m in members], runtime.ensemble_mode)
    return torch_translator(ensemble, first.tokenizer, config, runtime)


def describe(translator: Translator) -> str:
    """The engine a translator runs, its precision and threads, for the one line that says so."""
    runtime = translator.runtime
    if runtime.engine == "torch":
        import torch

        threads = f", {torch.get_num_threads()} threads" if runtime.device == "cpu" else ""
        return f"ours (PyTorch) on {runtime.device}, {runtime.precision}{threads}"
    ct2, each = translator.search.translator, translator.search.worker_threads
    threads = f", {ct2.num_translators} worker(s) of {each} thread(s)" if ct2.device == "cpu" else ""
    return f"CTranslate2 on {ct2.device}, {ct2.compute_type}{threads}"
