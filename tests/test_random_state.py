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


def test_each_rank_takes_back_its_own_draws_and_a_new_world_size_starts_fresh_streams():
    cpu = torch.device("cpu")
    saved, next_draws = [], []
    for rank in range(2):  # what two ranks saved, and what each would have drawn next
        torch.manual_seed(100 + rank)
        saved.append(random_state.rng_state(cpu))
        next_draws.append(torch.rand(4))
    checkpoint = {"rng": saved[0], "rng_ranks": saved, "step": 7}
    for rank in (1, 0):
        torch.manual_seed(0)
        random_state.restore_rng(checkpoint, cpu, rank, 2, seed=3)
        assert torch.equal(torch.rand(4), next_draws[rank])
    # resumed on three processes: rank 0 continues rank 0's stream, the others start anew, apart
    fresh = []
    for rank in (1, 2):
        random_state.restore_rng(checkpoint, cpu, rank, 3, seed=3)
        fresh.append(torch.rand(4))
    assert not any(torch.equal(draw, other) for draw in fresh for other in [*next_draws, *fresh] if draw is not other)
    random_state.restore_rng(checkpoint, cpu, 0, 3, seed=3)
    assert torch.equal(torch.rand(4), next_draws[0])
