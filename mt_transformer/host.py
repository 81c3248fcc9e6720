"""The host, read without torch (whose import takes about 2 s): its CPU's name and vector
extensions, the cores this process may use, and whether it may have a GPU. mt-translate on
CTranslate2 starts from these alone.
"""

from __future__ import annotations

import os
import sys

GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")  # NVIDIA's driver, ROCm's, WSL's


def may_have_gpu() -> bool:
    """False where no GPU can be used: no GPU driver's device file (CUDA and ROCm open one for
    every GPU call), or CUDA_VISIBLE_DEVICES hides them all. True: torch knows whether one is there."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    return any(os.path.exists(path) for path in GPU_DEVICE_FILES)


def default_threads() -> int:
    """The threads torch computes with by default: one per physical core this process may run on
    (hyperthreads of one core count once), fewer where OMP_NUM_THREADS asks for fewer."""
    if hasattr(os, "sched_getaffinity"):
        cores = set()
        for cpu in os.sched_getaffinity(0):
            try:
                with open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list") as f:
                    cores.add(f.read().strip())
            except OSError:
                cores.add(str(cpu))
        count = len(cores)
    else:  # macOS, Windows
        count = os.cpu_count() or 1
    asked = os.environ.get("OMP_NUM_THREADS", "")
    return max(1, min(count, int(asked) if asked.isdigit() and int(asked) > 0 else count))


def torch_threads() -> int:
    """The threads torch computes with: where torch is loaded, its setting now; else its default."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch else default_threads()


SIMD_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")  # what decides fp32 and bf16 matrix speed on x86


def cpu_fields(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str] | None:
    """Each field of /proc/cpuinfo at its first occurrence (the first processor's), stripped;
    None where the file cannot be read."""
    try:
        with open(cpuinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    fields: dict[str, str] = {}
    for key, value in (line.split(":", 1) for line in lines if ":" in line):
        fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_info() -> tuple[str, list[str]]:
    """The CPU's model name and flags from /proc/cpuinfo (no flags where it has none)."""
    import platform

    fields = cpu_fields()
    if fields is None:
        return platform.processor() or platform.machine(), []
    return fields.get("model name", platform.machine()), fields.get("flags", "").split()


def cpu_generation(cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """x86 CPU family and model numbers ("family 23, model 1": a Zen 1 core), which tell apart
    hosts whose model name a hypervisor reduces to "AMD EPYC"; None where `cpuinfo` lacks them."""
    fields = cpu_fields(cpuinfo) or {}
    if "cpu family" not in fields or "model" not in fields:
        return None
    return f"family {fields['cpu family']}, model {fields['model']}"


def cpu_model() -> str:
    """The CPU's model name, family and model numbers, and vector extensions ("AMD EPYC (family
    23, model 1) [avx2]"): speeds are comparable only between runs on the same kind of host."""
    name, flags = cpu_info()
    generation = cpu_generation()
    present = [flag for flag in SIMD_FLAGS if flag in flags]
    name = f"{name} ({generation})" if generation else name
    return f"{name} [{', '.join(present)}]" if present else name
