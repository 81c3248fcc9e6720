"""training/augment_fit.py: data.augment's shares scaled by the epochs a run will read."""

import pytest

from mt_transformer.config import AugmentConfig, TrainConfig
from mt_transformer.data.augment import PairAugmenter
from mt_transformer.data.prepare import SubwordEncoder
from mt_transformer.training.augment_fit import AugmentFit
from mt_transformer.training.state import TrainerState


def fit(state: TrainerState, **train) -> AugmentFit:
    settings = {"max_steps": 100, "max_minutes": 0, **train}
    return AugmentFit(TrainConfig(**settings), state, lambda: 20, announce=False)  # 20 updates an epoch


def test_each_epoch_is_scaled_by_the_epochs_the_run_will_read():
    state = TrainerState()
    assert fit(state).scale(0) == 1.0 and state.augment_scales == []  # the setting off: shares as given
    assert fit(state, augment_full_epochs=10).scale(1) == 0.5  # 100 updates = 5 epochs of 10
    assert state.augment_scales == [0.5, 0.5]  # every epoch up to the one asked for
    assert fit(TrainerState(), augment_full_epochs=4).scale(0) == 1.0  # 5 epochs >= 4: in full


def test_a_saved_scale_is_kept_and_a_timed_runs_epochs_before_its_speed_are_clean():
    state = TrainerState(augment_scales=[0.25])  # as a resumed run's state holds it
    assert fit(state, augment_full_epochs=10).scale(0) == 0.25
    assert fit(state, augment_full_epochs=10).scale(1) == 0.5
    timed = TrainerState(step=3, elapsed=10.0)  # 10 s of 60 minutes: the speed is not known yet
    assert fit(timed, augment_full_epochs=10, max_steps=10**6, max_minutes=60).scale(0) == 0.0
    timed.step, timed.elapsed = 60, 600.0  # 60 updates in 10 minutes: 360 in the hour, 18 epochs
    assert fit(timed, augment_full_epochs=10, max_steps=10**6, max_minutes=60).scale(1) == 1.0
    assert TrainerState.from_dict(timed.to_dict()).augment_scales == [0.0, 1.0]


def test_a_scaled_augmenter_keeps_its_changes_at_a_share_of_their_shares_without_sampling(tmp_path):
    setting = AugmentConfig(typos=0.5, remove_end_punct=0.3, case_target=False)
    full = PairAugmenter(SubwordEncoder(str(tmp_path), 0.5), [setting, AugmentConfig()], [30, 10], ["<2de>"])
    half = full.scaled(0.5)
    assert half.settings == [AugmentConfig(typos=0.25, remove_end_punct=0.15, case_target=False), AugmentConfig()]
    assert half.encoder.alpha == 0.0 and half.encoder.directory == str(tmp_path)
    assert half.ends == full.ends and half.tags == full.tags
    assert PairAugmenter(full.encoder, [AugmentConfig()], [40]).scaled(0.5) is None  # nothing left to change


@pytest.mark.parametrize("value", ["-1", "x"])
def test_a_bad_setting_is_one_line(corpus, tmp_path, value):
    from conftest import run_cli, tiny_config, write_config

    path = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "run")))
    result = run_cli("mt-train", "--config", path, "--set", f"train.augment_full_epochs={value}")
    assert result.returncode == 2 and result.stderr.startswith("error: train.augment_full_epochs:"), result.stderr
    assert not (tmp_path / "run").exists()
