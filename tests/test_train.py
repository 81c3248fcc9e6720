import json
import math
import os

import torch

from conftest import run_cli, tiny_config, write_config
from mt_transformer.tokenizer import PAD_ID
from mt_transformer.train import label_smoothed_loss


def test_label_smoothed_loss_matches_the_formula():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7)
    target = torch.tensor([[4, 5, PAD_ID], [6, PAD_ID, PAD_ID]])
    eps = 0.1
    expected = 0.0
    log_probs = logits.log_softmax(-1)
    for b in range(2):
        for t in range(3):
            y = target[b, t].item()
            if y == PAD_ID:
                continue
            # (1 - eps) on the reference plus eps spread uniformly over the vocabulary
            expected += -(1 - eps) * log_probs[b, t, y] - eps / 7 * log_probs[b, t].sum()
    assert math.isclose(label_smoothed_loss(logits, target, eps).item(), expected.item(), rel_tol=1e-5)
    nll = label_smoothed_loss(logits, target, 0.0).item()
    manual = -(log_probs[0, 0, 4] + log_probs[0, 1, 5] + log_probs[1, 0, 6]).item()
    assert math.isclose(nll, manual, rel_tol=1e-5)


def read_metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def test_training_writes_metrics_checkpoints_and_learns(trained_run):
    metrics = read_metrics(trained_run)
    train = [m for m in metrics if "loss" in m]
    valid = [m for m in metrics if "valid_bleu" in m]
    assert [m["step"] for m in train] == [10, 20, 30, 40]
    assert [m["step"] for m in valid] == [20, 40]
    assert train[-1]["loss"] < train[0]["loss"]
    assert all(k in valid[0] for k in ("valid_loss", "valid_ppl", "valid_nll"))
    names = sorted(os.listdir(os.path.join(trained_run, "checkpoints")))
    assert names == ["best.json", "step_00000020", "step_00000040"]
    assert sorted(os.listdir(os.path.join(trained_run, "checkpoints", "step_00000040"))) == \
        ["config.json", "model.safetensors", "spm.model", "trainer.pt"]


def test_resume_continues_from_the_saved_step_like_an_uninterrupted_run(corpus, tmp_path):
    whole_dir, split_dir = str(tmp_path / "whole"), str(tmp_path / "split")
    whole = write_config(tmp_path / "whole.yaml", tiny_config(corpus, whole_dir, train={"max_steps": 40}))
    split = write_config(tmp_path / "split.yaml", tiny_config(corpus, split_dir, train={"max_steps": 40}))
    assert run_cli("mt-train", "--config", whole).returncode == 0
    first = run_cli("mt-train", "--config", split, "--set", "train.max_steps=20")
    assert first.returncode == 0, first.stderr
    second = run_cli("mt-train", "--config", split)
    assert second.returncode == 0, second.stderr
    assert "resuming from" in second.stderr and "step 20" in second.stderr
    whole_losses = [(m["step"], m["loss"]) for m in read_metrics(whole_dir) if "loss" in m]
    split_losses = [(m["step"], m["loss"]) for m in read_metrics(split_dir) if "loss" in m]
    assert split_losses == whole_losses  # same batches, same dropout masks, same updates


def test_resume_refuses_a_changed_model(trained_run, corpus, tmp_path):
    config = write_config(tmp_path / "c.yaml", tiny_config(corpus, trained_run, model={"d_model": 64}))
    result = run_cli("mt-train", "--config", config)
    assert result.returncode == 2
    assert "model.d_model: 64 in the config but 32 in" in result.stderr
