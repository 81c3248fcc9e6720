import math

import torch

from mt_transformer.training.schedule import noam_factor, noam_scheduler


def test_noam_known_values():
    d_model, warmup = 512, 4000
    assert math.isclose(noam_factor(1, d_model, warmup), 512**-0.5 * 4000**-1.5)
    peak = 512**-0.5 * 4000**-0.5  # ~7.0e-4 at the end of warmup
    assert math.isclose(noam_factor(4000, d_model, warmup), peak)
    assert math.isclose(noam_factor(16000, d_model, warmup), 512**-0.5 * 16000**-0.5)
    assert noam_factor(2000, d_model, warmup) < peak and noam_factor(8000, d_model, warmup) < peak


def test_lambda_lr_gives_update_n_the_factor_of_step_n():
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=2.0)
    scheduler = noam_scheduler(optimizer, d_model=64, warmup=10)
    seen = []
    for _ in range(20):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    expected = [2.0 * noam_factor(n, 64, 10) for n in range(1, 21)]
    assert all(math.isclose(a, b) for a, b in zip(seen, expected))
    assert max(seen) == seen[9]  # the peak is update 10 = warmup
