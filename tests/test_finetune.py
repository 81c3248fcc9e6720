"""train.init_from: a new run starts from a trained model's weights and tokenizer."""

import os

import pytest
import torch
from safetensors.torch import load_file

from conftest import run_cli, tiny_config, write_config
from mt_transformer import checkpoint
from mt_transformer.config import ConfigError, load_config
from mt_transformer.training import train as train_module


def finetune_config(corpus, tmp_path, parent, name="child", **train):
    settings = {"init_from": parent, "max_steps": 2, "valid_every": 2, "log_every": 1, "lr_scale": 1e-9, **train}
    return write_config(tmp_path / f"{name}.yaml", tiny_config(corpus, str(tmp_path / name), train=settings))


def weights(checkpoint_dir) -> dict:
    return load_file(os.path.join(checkpoint_dir, "model.safetensors"))


def train_logging(config_path: str, caplog) -> str:
    """Train in this process; returns what it logged."""
    caplog.clear()
    with caplog.at_level("INFO"):
        train_module.train(load_config(config_path))
    return caplog.text


def test_a_fine_tuned_run_starts_from_the_parent_weights_and_tokenizer(trained_run, corpus, tmp_path, caplog):
    logged = train_logging(finetune_config(corpus, tmp_path, trained_run), caplog)
    assert "fine-tuning from" in logged and "a fresh optimizer" in logged
    assert "training sentencepiece" not in logged
    child = tmp_path / "child"
    assert (child / "spm.model").read_bytes() == open(os.path.join(trained_run, "spm.model"), "rb").read()
    assert sorted(os.listdir(child / "checkpoints")) == ["best.json", "step_00000002"]  # its own step count
    # at a learning rate of 1e-9 two updates leave the parent's weights as they were
    parent = weights(checkpoint.resolve(trained_run))  # the run's best checkpoint
    for name, tensor in weights(child / "checkpoints" / "step_00000002").items():
        torch.testing.assert_close(tensor, parent[name], rtol=0, atol=1e-6)

    # running it again resumes the fine-tuning run, not the parent
    logged = train_logging(finetune_config(corpus, tmp_path, trained_run, max_steps=3), caplog)
    assert "resuming from" in logged and "fine-tuning from" not in logged


def test_keeping_the_parent_optimizer_continues_its_adam_state(trained_run, corpus, tmp_path, caplog):
    logged = train_logging(finetune_config(corpus, tmp_path, trained_run, init_from_reset=False), caplog)
    assert "its optimizer state" in logged
    state = torch.load(tmp_path / "child" / "checkpoints" / "step_00000002" / "trainer.pt", weights_only=True)
    parent = torch.load(os.path.join(checkpoint.resolve(trained_run), "trainer.pt"), weights_only=True)
    assert state["step"] == 2
    # Adam's own count goes on from the parent's
    assert {int(s["step"]) for s in state["optimizer"]["state"].values()} == {parent["step"] + 2}


def test_a_parent_of_another_tokenizer_or_model_is_refused_before_any_work(trained_run, corpus, tmp_path):
    config = tiny_config(corpus, str(tmp_path / "child"), train={"init_from": trained_run})
    config["data"]["vocab_size"] = 300
    result = run_cli("mt-train", "--config", write_config(tmp_path / "c.yaml", config))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: data.vocab_size: 300 in the config but 200 in ")
    assert "fine-tuning keeps the model and tokenizer of train.init_from" in result.stderr
    assert not (tmp_path / "child").exists()

    missing = load_config(finetune_config(corpus, tmp_path, str(tmp_path / "nowhere")))
    with pytest.raises(ConfigError) as error:  # a ConfigError is a one-line error, exit code 2
        train_module.train(missing)
    assert str(error.value) == f"train.init_from: {tmp_path / 'nowhere'}: no such checkpoint or run directory"
