"""mt_transformer/host.py: the host read without torch."""

import subprocess
import sys

from conftest import ROOT, subprocess_env
from mt_transformer import host


def test_the_cpu_is_named_with_its_family_model_and_vector_extensions(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu family\t: 23\nmodel\t\t: 1\nmodel name\t: AMD EPYC\n\nprocessor\t: 1\n")
    assert host.cpu_generation(str(info)) == "family 23, model 1"
    info.write_text("processor\t: 0\nmodel name\t: Apple M2\n")
    assert host.cpu_generation(str(info)) is None
    assert host.cpu_generation(str(tmp_path / "absent")) is None
    monkeypatch.setattr(host, "cpu_info", lambda: ("AMD EPYC", ["fma", "avx2", "avx512f"]))
    monkeypatch.setattr(host, "cpu_generation", lambda: "family 25, model 17")
    assert host.cpu_model() == "AMD EPYC (family 25, model 17) [avx2, avx512f]"


def test_the_default_threads_are_torchs_in_a_process_without_omp_num_threads():
    code = "import torch; from mt_transformer import host; print(host.default_threads(), torch.get_num_threads())"
    env = {k: v for k, v in subprocess_env().items() if k != "OMP_NUM_THREADS"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, check=True)
    ours, torchs = done.stdout.split()
    assert ours == torchs


def test_omp_num_threads_lowers_the_default_threads_and_never_raises_them(monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = host.default_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert host.default_threads() == 1
    for ignored in ("64", "many", "0"):  # more than the cores (torch does not take them either), no number
        monkeypatch.setenv("OMP_NUM_THREADS", str(cores + 64) if ignored == "64" else ignored)
        assert host.default_threads() == cores


def test_a_gpu_is_ruled_out_only_where_none_can_be_used(monkeypatch):
    monkeypatch.setattr(host, "GPU_DEVICE_FILES", ("/dev/null",))  # a driver's file present
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert host.may_have_gpu()
    for hidden in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert not host.may_have_gpu()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert host.may_have_gpu()
    monkeypatch.setattr(host, "GPU_DEVICE_FILES", ("/nonexistent/nvidiactl",))
    assert not host.may_have_gpu()


def test_where_torch_is_loaded_its_threads_now_are_the_threads_in_use():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # conftest's fixture puts the count back
    assert host.torch_threads() == 1
    torch.set_num_threads(threads)
    assert host.torch_threads() == threads
