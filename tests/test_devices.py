"""Choosing the device: what each setting gives, and one-line errors for GPUs that are not there."""

import os

import pytest
import torch

from mt_transformer import devices
from mt_transformer.devices import decode_precision, is_out_of_memory, select_device, slow_precision
from mt_transformer.errors import UserError


@pytest.fixture
def two_gpus(monkeypatch) -> list:
    """A machine that reports two GPUs (nothing is run on them); the list receives the devices
    made current."""
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    return current


def test_auto_is_the_cpu_without_cuda_and_cuda_names_need_it():
    assert select_device("auto") == torch.device("cpu")
    assert select_device("cpu") == torch.device("cpu")
    with pytest.raises(UserError, match=r"^train.device: cuda:1 asked for, but CUDA is not available$"):
        select_device("cuda:1")


def test_auto_and_cuda_n_pick_gpus_that_exist(two_gpus):
    assert select_device("auto") == torch.device("cuda")
    assert two_gpus == []  # the current device stays CUDA's default
    assert select_device("cuda:1") == torch.device("cuda", 1)
    assert two_gpus == [torch.device("cuda", 1)]  # cuBLAS workspaces and streams go to cuda:1 too
    assert select_device("auto", local_rank=1) == torch.device("cuda", 1)
    with pytest.raises(UserError, match=r"^--device: cuda:2 asked for, but this machine has 2 GPU\(s\) \(cuda:0 to"):
        select_device("cuda:2", key="--device")
    with pytest.raises(UserError, match=r"^local rank 2 has no GPU: this machine has 2; lower torchrun"):
        select_device("cuda", local_rank=2)


@pytest.mark.parametrize(
    "error",
    [
        torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
        RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported"),
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
        RuntimeError("[enforce fail at alloc_cpu.cpp:117] err == 0. DefaultCPUAllocator: can't allocate memory"),
    ],
)
def test_out_of_memory_is_recognised_in_each_form(error):
    assert is_out_of_memory(error)


def test_other_errors_are_not_out_of_memory():
    assert not is_out_of_memory(RuntimeError("CUDA error: device-side assert triggered"))
    assert not is_out_of_memory(ValueError("out of memory"))


def test_bf16_without_bf16_units_is_named_slow(two_gpus, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "Tesla V100")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (7, 0))
    gpu = torch.device("cuda", 0)
    assert slow_precision(gpu, "bf16").startswith("Tesla V100 (compute capability 7.0) has no bf16 units")
    assert slow_precision(gpu, "fp16") is None
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: (9, 0))
    assert slow_precision(gpu, "bf16") is None

    cpu = torch.device("cpu")
    monkeypatch.setattr(devices, "cpu_info", lambda: ("AMD EPYC", ["avx2", "fma"]))
    assert (
        slow_precision(cpu, "bf16")
        == "AMD EPYC has no bf16 units (no avx512_bf16 or amx_bf16): bf16 runs slower than fp32 here"
    )
    assert (
        slow_precision(cpu, "fp16")
        == "AMD EPYC has no fp16 units (no avx512_fp16 or amx_fp16): fp16 runs slower than fp32 here"
    )
    assert slow_precision(cpu, "fp32") is None
    monkeypatch.setattr(devices, "cpu_info", lambda: ("AMD EPYC 9R14", ["avx2", "avx512f", "avx512_bf16"]))
    assert slow_precision(cpu, "bf16") is None
    monkeypatch.setattr(devices, "cpu_info", lambda: ("Intel Xeon", ["avx2", "avx512f", "avx512_fp16", "amx_bf16"]))
    assert slow_precision(cpu, "bf16") is None and slow_precision(cpu, "fp16") is None


def test_decode_precision_auto_is_bf16_only_on_a_cpu_with_bf16_units(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(devices, "cpu_info", lambda: ("AMD EPYC", ["avx2", "fma", "avx512f"]))
    assert decode_precision(cpu, "auto") == "fp32"
    assert decode_precision(cpu, "bf16") == "bf16"  # a setting other than auto is kept
    for flags in (["avx2", "avx512f", "avx512_bf16"], ["avx2", "amx_bf16"]):
        monkeypatch.setattr(devices, "cpu_info", lambda flags=flags: ("x86", flags))
        assert decode_precision(cpu, "auto") == "bf16"
        assert decode_precision(cpu, "fp32") == "fp32"
    monkeypatch.setattr(devices, "cpu_info", lambda: ("Apple M2", None))  # no flags to read
    assert decode_precision(cpu, "auto") == "fp32"
    for capability in ((7, 0), (8, 0), (9, 0)):  # bf16 units or not, a GPU decodes in fp32
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device, c=capability: c)
        assert decode_precision(torch.device("cuda", 0), "auto") == "fp32"
        assert decode_precision(torch.device("cuda", 0), "bf16") == "bf16"


def test_the_cpu_gets_a_small_onednn_kernel_cache_unless_the_user_set_one(monkeypatch):
    for flags, capacity in (
        (["avx2", "avx512f", "avx512_bf16"], devices.ONEDNN_KERNEL_CACHE),
        (["avx512_bf16", "amx_bf16"], devices.AMX_TRAINING_KERNEL_CACHE),  # training on AMX keeps more
        (None, devices.ONEDNN_KERNEL_CACHE),
    ):
        monkeypatch.setattr(devices, "cpu_info", lambda flags=flags: ("x86", flags))
        monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
        devices.use_fast_matmul(torch.device("cpu"))
        assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(capacity)
    assert devices.AMX_TRAINING_KERNEL_CACHE > devices.ONEDNN_KERNEL_CACHE
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    devices.limit_kernel_cache(torch.device("cpu"))  # decoding's size, whatever the CPU
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(devices.ONEDNN_KERNEL_CACHE)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "4096")
    devices.use_fast_matmul(torch.device("cpu"))
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "4096"
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY")
    devices.limit_kernel_cache(torch.device("cuda", 0))  # a GPU's products do not go through it
    assert "ONEDNN_PRIMITIVE_CACHE_CAPACITY" not in os.environ
