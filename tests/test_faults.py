"""Faults injected into training: diverging losses and out-of-memory batches."""

import json
import os

import pytest
import torch

import mt_transformer.train as train_module
from conftest import tiny_config, write_config
from mt_transformer.config import UserError, load_config
from mt_transformer.model import Transformer


def config_for(corpus, tmp_path, **train):
    values = {"max_steps": 100, "valid_every": 5, "log_every": 1, "max_tokens": 256, "valid_max_sentences": 4}
    values.update(train)
    return load_config(write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "run"), train=values)))


def test_diverging_run_stops_and_names_the_last_good_checkpoint(corpus, tmp_path, monkeypatch):
    real_loss = train_module.label_smoothed_loss
    calls = {"training": 0}

    def loss_that_diverges(logits, target, smoothing):
        loss = real_loss(logits, target, smoothing)
        if torch.is_grad_enabled():  # training, not validation
            calls["training"] += 1
            if calls["training"] > 10:
                return loss * float("nan")
        return loss

    monkeypatch.setattr(train_module, "label_smoothed_loss", loss_that_diverges)
    with pytest.raises(UserError) as error:
        train_module.train(config_for(corpus, tmp_path, max_bad_updates=3))
    message = str(error.value)
    assert "training diverged: 3 updates in a row had a non-finite loss or gradient" in message
    assert "train.lr_scale" in message and message.endswith("step_00000010")
    assert "\n" not in message
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert max(m["step"] for m in logged) == 10  # no update was applied after the losses went bad


def test_out_of_memory_batch_is_skipped_and_counted(corpus, tmp_path, monkeypatch):
    real_forward = Transformer.forward
    calls = {"training": 0}

    def forward_that_runs_out_of_memory_once(self, src, tgt_in):
        if torch.is_grad_enabled():
            calls["training"] += 1
            if calls["training"] == 3:
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_forward(self, src, tgt_in)

    monkeypatch.setattr(Transformer, "forward", forward_that_runs_out_of_memory_once)
    train_module.train(config_for(corpus, tmp_path, max_steps=6, valid_every=6))
    state = torch.load(os.path.join(tmp_path, "run", "checkpoints", "step_00000006", "trainer.pt"), weights_only=True)
    assert state["out_of_memory"] == 1 and state["step"] == 6
    assert state["batch_in_epoch"] == 7  # six updates plus the batch that was dropped
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl") if '"loss"' in line]
    assert logged[-1]["out_of_memory"] == 1


def test_max_bad_updates_must_not_be_negative(corpus, tmp_path):
    with pytest.raises(UserError, match="train.max_bad_updates: must be zero or positive"):
        config_for(corpus, tmp_path, max_bad_updates=-1)
