import os

import pytest
import torch
from test_train import read_metrics

from conftest import run_cli, tiny_config, write_config
from mt_transformer.checkpoint import load_trainer_state
from mt_transformer.config import Config, ModelConfig, TrainConfig
from mt_transformer.model.attention import MultiHeadAttention
from mt_transformer.model.dropout import Dropout
from mt_transformer.model.transformer import Transformer
from mt_transformer.training.dropout_fit import DropoutFit, expected_epochs, set_dropout
from mt_transformer.training.state import TrainerState


def test_expected_epochs_follow_the_step_and_epoch_limits():
    assert expected_epochs(TrainConfig(max_steps=1000), 100, step=0, elapsed_s=0.0) == 10
    assert expected_epochs(TrainConfig(max_steps=1000, max_epochs=3), 100, step=0, elapsed_s=0.0) == 3


def test_expected_epochs_under_a_time_limit_wait_for_the_runs_speed():
    train = TrainConfig(max_steps=100_000, max_minutes=10)
    # 5% of 10 minutes is 30 seconds: before it the speed is not yet known
    assert expected_epochs(train, 100, step=40, elapsed_s=20.0) is None
    # 100 updates a minute for 10 minutes: 1,000 updates, 10 epochs of 100
    assert expected_epochs(train, 100, step=50, elapsed_s=30.0) == pytest.approx(10)
    # the step limit still caps it
    assert expected_epochs(TrainConfig(max_steps=300, max_minutes=10), 100, step=50, elapsed_s=30.0) == 3


def residual_rates(model) -> set[float]:
    return {m.p for m in model.modules() if isinstance(m, Dropout)}


def small_model(**rates) -> Transformer:
    sizes = {"d_model": 16, "n_heads": 2, "d_ff": 32, "encoder_layers": 1, "decoder_layers": 1}
    return Transformer(ModelConfig(**sizes, **rates), 50, 50, share_vocab=True)


def test_set_dropout_turns_every_dropout_off_and_back_to_the_configured_rates():
    model = small_model(dropout=0.3, attention_dropout=0.2, word_dropout=0.1)
    residual = [m for m in model.modules() if isinstance(m, Dropout)]
    attention = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    assert len(residual) == 3 and len(attention) == 3
    set_dropout(model, False, 0.3, 0.2, 0.1)
    assert {m.p for m in residual} == {0.0} and {m.dropout for m in attention} == {0.0}
    assert model.word_dropout.p == 0.0
    model.train()
    src, tgt = torch.randint(4, 50, (2, 5)), torch.randint(4, 50, (2, 6))
    assert torch.equal(model(src, tgt), model(src, tgt))  # nothing random left in training mode
    set_dropout(model, True, 0.3, 0.2, 0.1)
    assert {m.p for m in residual} == {0.3} and {m.dropout for m in attention} == {0.2}
    assert model.word_dropout.p == 0.1


def losses_and_decision(corpus, out, model, train):
    config = write_config(out.with_suffix(".yaml"), tiny_config(corpus, str(out), model=model, train=train))
    result = run_cli("mt-train", "--config", config)
    assert result.returncode == 0, result.stderr
    state = load_trainer_state(os.path.join(out, "checkpoints", "step_00000006"))
    return [m["loss"] for m in read_metrics(str(out)) if "loss" in m], state["dropout_on"], result.stderr


def test_a_run_too_short_for_its_dropout_trains_as_one_without(corpus, tmp_path):
    train = {"max_steps": 6, "valid_every": 6, "log_every": 1, "max_tokens": 256}
    # 6 updates of 256 tokens read a small part of the 2,000 training pairs
    fitted, decided, stderr = losses_and_decision(
        corpus, tmp_path / "fitted", {"dropout": 0.3}, {**train, "dropout_min_epochs": 1}
    )
    assert decided is False and "dropout off (train.dropout_min_epochs 1)" in stderr
    without, _, _ = losses_and_decision(corpus, tmp_path / "without", {"dropout": 0.0}, train)
    assert fitted == without
    kept, decided, stderr = losses_and_decision(
        corpus, tmp_path / "kept", {"dropout": 0.3}, {**train, "dropout_min_epochs": 0.01}
    )
    assert decided is True and "dropout kept at 0.3 (model.dropout)" in stderr and kept != without


def test_a_resumed_run_keeps_its_decision_and_an_unset_one_measures_nothing():
    config = Config(model=ModelConfig(dropout=0.3), train=TrainConfig(max_steps=1000, dropout_min_epochs=2))
    model = small_model(dropout=0.3)
    # 1,000 updates of 100 per epoch would keep dropout; the saved decision turned it off
    DropoutFit(model, config, TrainerState(step=500, dropout_on=False), lambda: 100, announce=False)
    assert residual_rates(model) == {0.0}
    fresh = TrainerState()
    DropoutFit(small_model(dropout=0.3), config, fresh, lambda: 100, announce=False)
    assert fresh.dropout_on is True
    unset = Config(model=ModelConfig(dropout=0.3), train=TrainConfig())

    def never():
        raise AssertionError("the epoch's batches were counted with the setting off")

    DropoutFit(small_model(dropout=0.3), unset, TrainerState(), never, announce=False)


def word_rate(model) -> float:
    return model.word_dropout.p


@pytest.mark.parametrize(
    "min_epochs, long_run, rates, decided, word",
    [
        (2, (5.0, 0.2), {0.2}, 0.2, 0.15),  # 10 epochs: a long run
        (2, (20.0, 0.2), {0.3}, None, 0.05),  # 10 epochs: not long enough, the model's rates kept
        (15.0, (5.0, 0.2), {0.0}, None, 0.0),  # too short for any dropout
        (0, (5.0, 0.2), {0.2}, 0.2, 0.15),  # the long-run rates alone
    ],
)
def test_a_long_run_trains_with_the_long_run_rate(min_epochs, long_run, rates, decided, word):
    train = TrainConfig(
        max_steps=1000, dropout_min_epochs=min_epochs, long_run_dropout=long_run, long_run_word_dropout=0.15
    )
    built = {"dropout": 0.3, "attention_dropout": 0.1, "word_dropout": 0.05}
    config = Config(model=ModelConfig(**built), train=train)
    model, state = small_model(**built), TrainerState()
    DropoutFit(model, config, state, lambda: 100, announce=False)  # 1,000 updates of 100 per epoch
    assert residual_rates(model) == rates and state.dropout_rate == decided and word_rate(model) == word
    attention = {m.dropout for m in model.modules() if isinstance(m, MultiHeadAttention)}
    assert attention == ({0.0} if rates == {0.0} else {0.1})
    # a resumed run takes the saved decision back, whatever its limits now say
    resumed = small_model(**built)
    shorter = Config(
        model=config.model,
        train=TrainConfig(max_steps=10, dropout_min_epochs=2, long_run_dropout=long_run, long_run_word_dropout=0.15),
    )
    DropoutFit(
        resumed,
        shorter,
        TrainerState(step=500, dropout_on=state.dropout_on, dropout_rate=decided),
        lambda: 100,
        announce=False,
    )
    assert residual_rates(resumed) == rates and word_rate(resumed) == word


def test_late_dropout_starts_once_its_part_of_the_run_is_spent():
    train = TrainConfig(max_steps=1000, long_run_dropout=(5.0, 0.2), dropout_from=0.5)
    config = Config(model=ModelConfig(dropout=0.3, attention_dropout=0.1), train=train)
    model, state = small_model(dropout=0.3, attention_dropout=0.1), TrainerState()
    fit = DropoutFit(model, config, state, lambda: 100, announce=False)  # 10 epochs: the long-run rate
    assert state.dropout_on is True and state.dropout_rate == 0.2
    assert residual_rates(model) == {0.0}  # decided, not yet started
    fit.check(499, 0.0)
    assert residual_rates(model) == {0.0}
    fit.check(500, 0.0)
    assert residual_rates(model) == {0.2}
    assert {m.dropout for m in model.modules() if isinstance(m, MultiHeadAttention)} == {0.1}
    # a run resumed past the start trains with it at once, one resumed before it without
    for step, rates in ((600, {0.2}), (100, {0.0})):
        resumed = small_model(dropout=0.3, attention_dropout=0.1)
        saved = TrainerState(step=step, dropout_on=True, dropout_rate=0.2)
        DropoutFit(resumed, config, saved, lambda: 100, announce=False)
        assert residual_rates(resumed) == rates


def test_late_dropout_follows_the_minutes_and_waits_off_for_the_decision():
    train = TrainConfig(max_steps=100_000, max_minutes=10, dropout_from=0.5)
    config = Config(model=ModelConfig(dropout=0.3), train=train)
    model, state = small_model(dropout=0.3), TrainerState()
    fit = DropoutFit(model, config, state, lambda: 100, announce=False)
    assert state.dropout_on is None and residual_rates(model) == {0.0}  # the speed is not yet known
    fit.check(50, 30.0)  # 1,000 updates in 10 minutes: kept
    assert state.dropout_on is True and residual_rates(model) == {0.0}
    fit.check(400, 299.0)
    assert residual_rates(model) == {0.0}
    fit.check(401, 300.0)  # half the minutes
    assert residual_rates(model) == {0.3}


def test_late_dropout_on_a_run_that_drops_dropout_keeps_it_off():
    train = TrainConfig(max_steps=1000, dropout_min_epochs=20, dropout_from=0.5)
    model, state = small_model(dropout=0.3), TrainerState()
    fit = DropoutFit(model, Config(model=ModelConfig(dropout=0.3), train=train), state, lambda: 100, announce=False)
    fit.check(900, 0.0)
    assert state.dropout_on is False and residual_rates(model) == {0.0}
