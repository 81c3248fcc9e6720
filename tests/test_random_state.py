"""The random generators saved with a checkpoint: which are saved, and where they are restored."""

import torch

from mt_transformer.training import random_state


def test_only_the_training_gpu_random_state_is_saved_and_restored(monkeypatch):
    # CUDA's generators are faked: what matters is which device's state is read and written
    written = []
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device: torch.tensor([device.index], dtype=torch.uint8))
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: written.append((int(state[0]), device)))

    saved = random_state.rng_state(torch.device("cuda", 3))
    assert int(saved["cuda"][0]) == 3
    assert "cuda" not in random_state.rng_state(torch.device("cpu"))
    # rank 3 of 8 resumed as rank 0 of a run that sees one GPU
    random_state.set_rng_state(saved, torch.device("cuda", 0))
    assert written == [(3, torch.device("cuda", 0))]
    random_state.set_rng_state(saved, torch.device("cpu"))  # a GPU run resumed on the CPU
    assert len(written) == 1

    # older checkpoints saved every visible GPU's state: the device's own is taken if it was there
    every_gpu = {**saved, "cuda": [torch.tensor([i], dtype=torch.uint8) for i in range(8)]}
    random_state.set_rng_state(every_gpu, torch.device("cuda", 1))
    random_state.set_rng_state(every_gpu, torch.device("cuda", 9))
    assert written[1:] == [(1, torch.device("cuda", 1))]
