from mt_transformer.config import TrainConfig
from mt_transformer.processes import Processes
from mt_transformer.training.state import TrainerState
from mt_transformer.training.stop_policy import StopPolicy


def test_one_process_follows_its_own_clock_from_the_elapsed_time_it_resumed_at():
    policy = StopPolicy(TrainConfig(max_minutes=10), TrainerState(elapsed=120.0), Processes())
    time_up, signalled, elapsed = policy.local_view()
    assert (time_up, signalled) == (False, False)
    assert 120.0 <= elapsed < 130.0
    assert 120.0 <= policy.elapsed_at_update() < 130.0


def test_ranks_follow_the_clock_they_agreed_on_and_stop_together():
    # Two ranks whose clocks differ: each takes the mean they pooled, so the budget schedule and
    # the dropout decision see the same elapsed time on both.
    train = TrainConfig(max_minutes=1)
    policies = [StopPolicy(train, TrainerState(elapsed=e), Processes(r, 2)) for r, e in enumerate((30.0, 70.0))]
    views = [policy.local_view() for policy in policies]
    assert [view[0] for view in views] == [False, True]  # only the second rank's clock is past the minute
    for policy in policies:
        policy.agree(any(view[0] for view in views), False, sum(view[2] for view in views) / 2)
    assert {policy.elapsed_at_update() for policy in policies} == {policies[0].shared_elapsed}
    assert 50.0 <= policies[0].elapsed_at_update() < 60.0
    assert all(policy.finished() for policy in policies)
    assert all(policy.signal_to_stop() is None for policy in policies)
