import math

import torch

from mt_transformer.config import TrainConfig
from mt_transformer.training.schedule import budget_factor, budget_progress, noam_factor, noam_scheduler
from mt_transformer.training.step import optimizer_for


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


def test_budget_factor_rises_over_the_warmup_fraction_and_ends_at_zero():
    assert budget_factor(0.0, 0.1) == 0.0
    assert math.isclose(budget_factor(0.05, 0.1), 0.5)
    assert budget_factor(0.1, 0.1) == 1.0
    assert math.isclose(budget_factor(0.55, 0.1), 0.5)
    assert budget_factor(1.0, 0.1) == 0.0
    assert budget_factor(1.3, 0.1) == 0.0  # past the budget (the last update of a time limit)
    assert budget_factor(0.0, 0.0) == 1.0  # no warmup: the peak from the first update


def test_budget_decays_hold_then_cool_down_to_zero():
    # rsqrt: Noam's inverse square root in parts of the budget, from the peak at the warmup's end
    assert budget_factor(0.25, 0.25, "rsqrt") == 1.0
    assert math.isclose(budget_factor(0.5, 0.25, "rsqrt"), 0.5**0.5)
    assert math.isclose(budget_factor(0.8, 0.2, "rsqrt", cooldown=0.2), 0.5)  # sqrt(0.2 / 0.8), cooldown starts
    assert math.isclose(budget_factor(0.9, 0.2, "rsqrt", cooldown=0.2), (0.2 / 0.9) ** 0.5 * 0.5)
    # constant: the peak until the cooldown, then a straight line to zero
    assert budget_factor(0.5, 0.1, "constant", cooldown=0.2) == 1.0
    assert math.isclose(budget_factor(0.9, 0.1, "constant", cooldown=0.2), 0.5)
    for decay in ("linear", "rsqrt", "constant"):
        assert budget_factor(1.0, 0.1, decay) == 0.0
        assert math.isclose(budget_factor(0.05, 0.1, decay), 0.5)  # the same warmup


def test_budget_progress_is_the_larger_of_steps_and_minutes():
    by_steps = TrainConfig(max_steps=1000)
    assert budget_progress(250, by_steps, elapsed_s=1e6) == 0.25  # no time limit: minutes do not count
    both = TrainConfig(max_steps=1000, max_minutes=10)
    assert budget_progress(250, both, elapsed_s=60) == 0.25
    assert budget_progress(250, both, elapsed_s=300) == 0.5


def _lrs(train: TrainConfig, updates: int, clock) -> list[float]:
    optimizer, scheduler, _ = optimizer_for(torch.nn.Linear(1, 1), train, 64, torch.device("cpu"), clock)
    seen = []
    for _ in range(updates):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


def test_the_budget_schedule_by_steps_peaks_at_the_warmup_and_spends_the_last_update_near_zero():
    train = TrainConfig(schedule="budget", peak_lr=2e-3, warmup_fraction=0.2, max_steps=20)
    seen = _lrs(train, 20, lambda: 0.0)
    assert math.isclose(max(seen), 2e-3) and seen.index(max(seen)) == 3  # update 4 = 20% of 20
    assert all(a < b for a, b in zip(seen[:4], seen[1:4]))
    assert all(a > b for a, b in zip(seen[3:], seen[4:]))
    assert math.isclose(seen[-1], 2e-3 * (1 - 20 / 20) / 0.8, abs_tol=1e-12)


def test_the_budget_schedule_follows_the_clock_under_a_time_limit():
    clock = [0.0]
    train = TrainConfig(schedule="budget", peak_lr=1e-3, warmup_fraction=0.0, max_minutes=1.0)
    optimizer, scheduler, _ = optimizer_for(torch.nn.Linear(1, 1), train, 64, torch.device("cpu"), lambda: clock[0])
    for seconds, expected in ((15.0, 0.75e-3), (45.0, 0.25e-3), (60.0, 0.0)):
        clock[0] = seconds
        optimizer.step()
        scheduler.step()
        assert math.isclose(optimizer.param_groups[0]["lr"], expected, abs_tol=1e-6)


def test_noam_stays_the_default():
    train = TrainConfig(lr_scale=2.0, warmup=10)
    seen = _lrs(train, 12, lambda: 0.0)
    assert all(math.isclose(a, 2.0 * noam_factor(n, 64, 10)) for n, a in enumerate(seen, start=1))


def test_the_budget_schedule_takes_its_decay_from_the_config():
    train = TrainConfig(
        schedule="budget", peak_lr=1e-3, warmup_fraction=0.1, decay="constant", cooldown_fraction=0.5, max_steps=20
    )
    seen = _lrs(train, 20, lambda: 0.0)
    assert all(math.isclose(lr, 1e-3) for lr in seen[1:10])  # updates 2-10: the peak held
    assert all(a > b for a, b in zip(seen[9:], seen[10:]))  # then the cooldown over the last half
    assert math.isclose(seen[-1], 0.0, abs_tol=1e-12)
