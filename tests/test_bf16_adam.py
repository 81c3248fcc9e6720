"""training/bf16_adam.py: Adam for bf16 weights, unbiased rounding, and a run that resumes exactly."""

import pytest
import torch

from conftest import run_cli, tiny_config, write_config
from mt_transformer.training.bf16_adam import StochasticRoundingAdam, stochastic_round


def test_stochastic_rounding_is_unbiased_and_keeps_what_bf16_holds():
    torch.manual_seed(0)
    exact = torch.tensor([1.0, -2.5, 0.0, 3.0 * 2**-20])
    assert torch.equal(stochastic_round(exact).float(), exact)
    value = torch.full((200_000,), 1.0 + 2**-10)  # between bf16's 1 and 1 + 2^-7, an eighth of the way
    rounded = stochastic_round(value).float()
    assert set(rounded.unique().tolist()) == {1.0, 1.0 + 2**-7}
    assert rounded.mean().item() == pytest.approx(1.0 + 2**-10, abs=2e-5)
    assert stochastic_round(-value).float().mean().item() == pytest.approx(-(1.0 + 2**-10), abs=2e-5)


@pytest.mark.parametrize("decoupled", [False, True])
def test_on_fp32_parameters_it_is_torchs_adam(decoupled):
    torch.manual_seed(0)
    ours, theirs = torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(5, 3))
    theirs.data.copy_(ours.data)
    kind = torch.optim.AdamW if decoupled else torch.optim.Adam
    settings = {"lr": 0.01, "betas": (0.9, 0.98), "eps": 1e-9, "weight_decay": 0.1}
    optimizers = StochasticRoundingAdam([ours], decoupled=decoupled, **settings), kind([theirs], **settings)
    for _ in range(5):
        gradient = torch.randn(5, 3)
        for parameter, optimizer in zip((ours, theirs), optimizers):
            parameter.grad = gradient.clone()
            optimizer.step()
    torch.testing.assert_close(ours.data, theirs.data, rtol=1e-6, atol=1e-7)


def test_updates_below_bf16s_resolution_still_add_up():
    torch.manual_seed(0)
    weight = torch.nn.Parameter(torch.ones(10_000, dtype=torch.bfloat16))
    optimizer = StochasticRoundingAdam([weight], lr=1e-4)  # each step moves a weight by ~1e-4: < 2^-8 / 2
    for _ in range(50):
        weight.grad = torch.ones_like(weight)
        optimizer.step()
    # 50 steps of ~1e-4 each: about 0.005 down on average; rounding to nearest would leave 1.0
    assert weight.float().mean().item() == pytest.approx(1 - 50e-4, abs=5e-4)


@pytest.mark.slow
def test_a_bf16_weights_run_keeps_bf16_matrices_and_resumes_exactly(corpus, tmp_path):
    from safetensors.torch import load_file
    from test_faults import assert_same_run

    from mt_transformer import checkpoint

    def run(name, *more):
        settings = {"precision": "bf16", "weights_dtype": "bf16", "max_steps": 4, "valid_every": 2, "log_every": 1}
        config = write_config(tmp_path / f"{name}.yaml", tiny_config(corpus, str(tmp_path / name), train=settings))
        result = run_cli("mt-train", "--config", config, *more)
        assert result.returncode == 0, result.stderr
        return tmp_path / name

    whole = run("whole")
    run("split", "--set", "train.max_steps=2")
    assert_same_run(run("split"), whole)
    saved = load_file(f"{checkpoint.list_checkpoints(str(whole))[-1][1]}/model.safetensors")
    assert {t.dtype for n, t in saved.items() if t.dim() >= 2} == {torch.bfloat16}
    assert {t.dtype for n, t in saved.items() if t.dim() < 2} == {torch.float32}
    result = run_cli("mt-train", "--config", str(tmp_path / "whole.yaml"), "--set", "train.precision=fp32")
    assert result.returncode == 2 and "train.weights_dtype: bf16 weights compute in bf16" in result.stderr
