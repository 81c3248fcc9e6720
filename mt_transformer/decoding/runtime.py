"""Where and how a translator runs: its engine, device, precision, threads and ensemble mode,
settled once where a command or mt.load starts (`settle`) and passed whole as a `Runtime`.

--engine auto, the default of every command that translates or scores and of mt.load: on a
CPU, CTranslate2 runs a call when it has every setting the call asks for, on the checkpoint's
CTranslate2 conversion (made once, decoding/ctranslate2_cache.py); our engine runs the rest.

    CTranslate2   greedy and beam search, n-best lists, prefixes, no repeated n-grams, the length
                  penalty and limits, scores, --avoid, --alignment and <unk> filled from the
                  source (through its attention: the last layer, mean of the heads), int8, mt-score
    ours          ensembles, --constraints, --attention heatmaps, other layers or heads,
                  mt.attention, sampling (CTranslate2's does not repeat for a seed, so
                  decode.seed would not hold), bf16 and fp16, GPUs; every call when ctranslate2
                  cannot be imported

decode.precision is the setting as given (auto, fp32, bf16, fp16, int8); a Runtime's precision
is what our engine runs: bf16 or fp32 for auto (devices.decode_precision) and fp32 for int8
(int8 is CTranslate2's); its compute_type, what CTranslate2 runs (float32 for auto, which
outruns our bf16 on CPUs: docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mt_transformer import checkpoint, host
from mt_transformer.errors import UserError

if TYPE_CHECKING:
    import torch

ENGINES = ("auto", "torch", "ctranslate2")
# what a call may ask for that only our engine does, and the flag that asks for it
TORCH_ONLY = {
    "constraints": "--constraints",
    "attention": "--attention",
    "attention_layer": "--attention-layer",
    "attention_head": "--attention-head",
}


@dataclass(frozen=True)
class Runtime:
    engine: str  # "torch" (ours) or "ctranslate2"
    device: str  # "cpu", "cuda", "cuda:N": torch.device(device) for ours
    precision: str  # ours: fp32, bf16 or fp16 ("" on CTranslate2, whose setting is compute_type)
    threads: int = 0  # 0: as many as torch uses (host.torch_threads)
    ensemble_mode: str = "logprob"  # how an ensemble's members combine (decoding/ensemble.py)
    why: str = ""  # why this engine and precision, for the line that says which engine runs
    worker_threads: int = 1  # CTranslate2 on a CPU: each worker's threads, threads // this workers
    compute_type: str = ""  # CTranslate2's: float32, int8, ... ("default": the export's own); "" for ours

    def with_precision(self, setting: str) -> Runtime:
        """Our engine at another decode.precision setting (a call's own)."""
        return dataclasses.replace(self, precision=ours(self.device, setting))


def is_export(path: str) -> bool:
    """An mt-export --format ctranslate2 directory (which only CTranslate2 runs)."""
    return os.path.isfile(os.path.join(path, "model.bin"))


def settle(
    paths: list[str],
    engine: str,
    device: str | torch.device,
    compute_type: str,
    threads: int,
    ensemble_mode: str,
    *,
    needs,
    decode: dict,
    worker_threads: int,
) -> Runtime:
    """The runtime of `paths` (a checkpoint or run directory, an mt-export directory, several
    checkpoints: their ensemble) for calls with these `decode` settings (over the checkpoint's)
    and `needs` (TORCH_ONLY's keys), the settings as engines.open_translator takes them (its
    defaults): the one place engine and precision are chosen together.
    CTranslate2 chosen by auto still needs the checkpoint's conversion; where that fails, the
    caller takes `fallback`'s runtime."""
    if engine not in ENGINES:
        raise UserError(f"--engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    selected = device_name(device)
    settings = (threads, ensemble_mode)

    def on_ctranslate2(why: str) -> Runtime:
        chosen = _compute_type(compute_type, decode, paths)
        return Runtime("ctranslate2", selected, "", *settings, why, worker_threads=worker_threads, compute_type=chosen)

    if is_export(paths[0]):
        if engine == "torch":
            raise UserError(f"{paths[0]}: a CTranslate2 export runs on --engine ctranslate2 or auto, not torch")
        return on_ctranslate2("a CTranslate2 export" if engine == "auto" else "--engine ctranslate2")
    if engine == "ctranslate2":
        return on_ctranslate2("--engine ctranslate2")
    # the precision asked for, else the checkpoint's: its config read once for both choices below
    asked = decode if decode.get("precision") else {**decode, "precision": _checkpoint_precision(paths[0])}
    if engine == "auto":
        reason = torch_reason(paths, selected, asked, needs)
        if reason is None:
            return on_ctranslate2("auto")
        return fallback(paths, selected, asked, *settings, f"auto: {reason}")
    return fallback(paths, selected, asked, *settings, "--engine torch")


def device_name(device: str | torch.device) -> str:
    """The device a --device setting (auto, cpu, cuda, cuda:N) names. cpu, and auto where no GPU can
    be used (host.may_have_gpu), are settled without torch: CTranslate2 on a CPU runs without it."""
    if not isinstance(device, str):
        return str(device)
    if device == "cpu" or (device == "auto" and not host.may_have_gpu()):
        return "cpu"
    from mt_transformer.devices import select_device

    return str(select_device(device, key="--device"))


def device_kind(device: str | torch.device) -> str:
    """cpu or cuda."""
    return str(device).split(":")[0]


def fallback(paths: list[str], device: str, decode: dict, threads: int, mode: str, why: str) -> Runtime:
    """Our engine's runtime for `paths`, at decode.precision (given, else the checkpoint's)."""
    setting = decode.get("precision") or _checkpoint_precision(paths[0])
    precision = ours(device, setting)
    if setting in ("auto", "int8"):
        why += f"; decode.precision {setting}: {precision} on this {device_kind(device)}"
    return Runtime("torch", device, precision, threads, mode, why)


def ours(device: str | torch.device, setting: str) -> str:
    """The precision our engine computes a decode.precision setting in: int8 is CTranslate2's
    (ours computes those calls in fp32, on the CPU only); auto as devices.decode_precision says."""
    if setting != "int8":
        import torch

        from mt_transformer.devices import decode_precision

        return decode_precision(torch.device(device), setting)
    if device_kind(device) != "cpu":
        raise UserError("--precision int8: for the CPU; on a GPU use bf16 or fp16")
    return "fp32"


def _compute_type(compute_type: str, decode: dict, paths: list[str]) -> str:
    """CTranslate2's compute type: --compute-type, else int8 for --precision int8, else the
    export's own ("default"); what CTranslate2 cannot run is a one-line error."""
    if decode.get("sampling") or len(paths) > 1:
        raise UserError("--sampling and ensembles (several --checkpoint) need --engine torch")
    if decode.get("precision") not in (None, "fp32", "int8", "auto"):
        raise UserError("--precision: bf16 and fp16 are for --engine torch; CTranslate2 takes --compute-type")
    if compute_type == "default" and decode.get("precision") == "int8":
        return "int8"
    return compute_type


def torch_reason(paths: list[str], device: str | torch.device, decode: dict, needs=()) -> str | None:
    """Why our engine runs a call of these settings (None: CTranslate2 can run it)."""
    if len(paths) > 1:
        return "an ensemble"
    for need in needs:
        if need in TORCH_ONLY:
            return TORCH_ONLY[need]
    return settings_reason(device, {**decode, "precision": decode.get("precision") or _checkpoint_precision(paths[0])})


def settings_reason(device: str | torch.device, decode: dict) -> str | None:
    """Why our engine runs a call of these decode settings (precision given) on one model."""
    if device_kind(device) != "cpu":
        return f"{device_kind(device)}: CTranslate2 is chosen on CPUs"
    if decode.get("sampling"):
        return "--sampling"
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
