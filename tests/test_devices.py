"""Choosing the device: what each setting gives, and one-line errors for GPUs that are not there."""

import pytest
import torch

from mt_transformer.devices import select_device
from mt_transformer.errors import UserError


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine that reports two GPUs (nothing is run on them)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)


def test_auto_is_the_cpu_without_cuda_and_cuda_names_need_it():
    assert select_device("auto") == torch.device("cpu")
    assert select_device("cpu") == torch.device("cpu")
    with pytest.raises(UserError, match=r"^train.device: cuda:1 asked for, but CUDA is not available$"):
        select_device("cuda:1")


def test_auto_and_cuda_n_pick_gpus_that_exist(two_gpus):
    assert select_device("auto") == torch.device("cuda")
    assert select_device("cuda:1") == torch.device("cuda", 1)
    assert select_device("auto", local_rank=1) == torch.device("cuda", 1)
    with pytest.raises(UserError, match=r"^--device: cuda:2 asked for, but this machine has 2 GPU\(s\) \(cuda:0 to"):
        select_device("cuda:2", key="--device")
    with pytest.raises(UserError, match=r"^local rank 2 has no GPU: this machine has 2; lower torchrun"):
        select_device("cuda", local_rank=2)
