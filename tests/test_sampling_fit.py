"""training/sampling_fit.py: data.spm_alpha's sampled segmentations only in runs long enough."""

import dataclasses
import re

import pytest

from mt_transformer.config import AugmentConfig, Config, TrainConfig
from mt_transformer.data.augment import PairAugmenter
from mt_transformer.data.prepare import SubwordEncoder
from mt_transformer.training.sampling_fit import SamplingFit
from mt_transformer.training.state import TrainerState


def fit(state: TrainerState, spm_alpha: float = 0.5, **train) -> SamplingFit:
    config = Config()
    config = dataclasses.replace(
        config,
        data=dataclasses.replace(config.data, spm_alpha=spm_alpha),
        train=TrainConfig(**{"max_steps": 100, "max_minutes": 0, **train}),
    )
    return SamplingFit(config, state, lambda: 20, announce=False)  # 20 updates an epoch: 100 are 5 epochs


def test_an_epoch_samples_only_where_the_run_reads_enough_epochs():
    state = TrainerState()
    assert fit(state).sampled(3) and state.sampled_epochs == []  # the setting off: always
    assert fit(state, spm_alpha=0.0, sampling_min_epochs=4).sampled(0) and state.sampled_epochs == []
    assert not fit(state, sampling_min_epochs=6).sampled(1)  # 5 epochs < 6
    assert state.sampled_epochs == [False, False]  # every epoch up to the one asked for
    assert fit(TrainerState(), sampling_min_epochs=5).sampled(0)  # 5 >= 5


def test_a_saved_decision_is_kept_and_a_timed_runs_epochs_before_its_speed_do_not_sample():
    state = TrainerState(sampled_epochs=[True])  # as a resumed run's state holds it
    assert fit(state, sampling_min_epochs=6).sampled(0) and not fit(state, sampling_min_epochs=6).sampled(1)
    timed = TrainerState(step=3, elapsed=10.0)  # 10 s of 60 minutes: the speed is not known yet
    assert not fit(timed, sampling_min_epochs=10, max_steps=10**6, max_minutes=60).sampled(0)
    timed.step, timed.elapsed = 60, 600.0  # 60 updates in 10 minutes: 360 in the hour, 18 epochs
    assert fit(timed, sampling_min_epochs=10, max_steps=10**6, max_minutes=60).sampled(1)
    assert TrainerState.from_dict(timed.to_dict()).sampled_epochs == [False, True]


def test_without_sampling_the_pairs_are_changed_as_before_and_encoded_plainly(tmp_path):
    setting = AugmentConfig(typos=0.5, remove_end_punct=0.3)
    full = PairAugmenter(SubwordEncoder(str(tmp_path), 0.5), [setting, AugmentConfig()], [30, 10], ["<2de>"])
    plain = full.without_sampling()
    assert plain.settings == full.settings and plain.ends == full.ends and plain.tags == full.tags
    assert plain.encoder.alpha == 0.0 and plain.encoder.directory == str(tmp_path)
    assert PairAugmenter(full.encoder, [AugmentConfig()], [40]).without_sampling() is None  # nothing to change


def test_a_run_that_reads_too_few_epochs_trains_as_one_without_sampling(corpus, tmp_path):
    from test_faults import assert_same_run

    from conftest import run_cli, tiny_config, write_config

    data = {"spm_alpha": 0.3, "spm_type": "unigram", "augment": {"typos": 0.3}}
    path = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "fitted"), data=data))
    result = run_cli("mt-train", "--config", path, "--set", "train.sampling_min_epochs=100")
    assert result.returncode == 0, result.stderr
    assert re.search(
        r"epoch 0: segmentations not sampled \(~0\.\d epochs expected, train.sampling_min_epochs 100\)", result.stderr
    )
    plain = ["train.output_dir=" + str(tmp_path / "plain"), "data.spm_alpha=0"]
    assert run_cli("mt-train", "--config", path, "--set", *plain).returncode == 0
    assert_same_run(tmp_path / "fitted", tmp_path / "plain")  # the same typos, the same plain pieces


@pytest.mark.parametrize("value", ["-1", "x"])
def test_a_bad_setting_is_one_line(corpus, tmp_path, value):
    from conftest import run_cli, tiny_config, write_config

    path = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "run")))
    result = run_cli("mt-train", "--config", path, "--set", f"train.sampling_min_epochs={value}")
    assert result.returncode == 2 and result.stderr.startswith("error: train.sampling_min_epochs:"), result.stderr
    assert not (tmp_path / "run").exists()
