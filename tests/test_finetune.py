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


def lora_run(corpus, tmp_path, trained_run, name, **train):
    lora = {"rank": 4, "alpha": 8, "targets": ["q_proj", "kv_proj", "linear2"]}
    settings = {"lr_scale": 1.0, "max_steps": 4, "valid_every": 2, "max_tokens": 256, "lora": lora, **train}
    return finetune_config(corpus, tmp_path, trained_run, name, **settings), tmp_path / name


def test_a_lora_run_trains_adapters_alone_resumes_exactly_and_loads_merged(trained_run, corpus, tmp_path, caplog):
    from test_faults import losses

    from mt_transformer.errors import UserError
    from mt_transformer.evaluation.average import average_checkpoints
    from mt_transformer.model import lora

    whole, whole_dir = lora_run(corpus, tmp_path, trained_run, "whole")
    assert "train.lora: rank 4 adapters on 16 layers" in train_logging(whole, caplog)
    split, split_dir = lora_run(corpus, tmp_path, trained_run, "split")
    train_module.train(load_config(split, ["train.max_steps=2"]))
    assert "resuming from" in train_logging(split, caplog)
    assert losses(split_dir) == losses(whole_dir)
    last = checkpoint.list_checkpoints(str(whole_dir))[-1][1]
    adapters = weights(last)
    assert all(name.rsplit(".", 1)[-1] in lora.ADAPTER_NAMES for name in adapters) and len(adapters) == 32
    for name, tensor in weights(checkpoint.list_checkpoints(str(split_dir))[-1][1]).items():
        assert torch.equal(tensor, adapters[name])

    # loaded anywhere: the base's weights with the adapters merged, the same model as in training
    base = checkpoint.resolve(trained_run)
    assert checkpoint.read_metadata(last)["adapters"]["base"] == os.path.abspath(base)
    merged = checkpoint.load(last, torch.device("cpu")).model
    training = checkpoint.load(base, torch.device("cpu")).model
    parent = {name: t.clone() for name, t in training.state_dict().items()}
    lora.add_adapters(training, 4, 8.0, ("q_proj", "kv_proj", "linear2"))
    checkpoint.load_weights(training, last)
    src, tgt = torch.randint(4, 200, (2, 9)), torch.randint(4, 200, (2, 6))
    with torch.no_grad():
        ours, theirs = merged.logits(merged(src, tgt)), training.eval().logits(training(src, tgt))
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-4)
    changed = {n for n, t in merged.state_dict().items() if not torch.equal(t, parent[n])}
    assert changed and all(n.endswith(("q_proj.weight", "kv_proj.weight", "linear2.weight")) for n in changed)

    # the commands load it as any checkpoint: CTranslate2's conversion translates as our engine does
    pytest.importorskip("ctranslate2")
    lines = "a red apple\nthe green apples\n"
    by_engine = [
        run_cli("mt-translate", "--checkpoint", last, "--engine", e, input=lines) for e in ("torch", "ctranslate2")
    ]
    assert by_engine[0].returncode == 0 and by_engine[0].stdout == by_engine[1].stdout, by_engine[1].stderr
    assert run_cli("mt-export", "--checkpoint", last, "--format", "ctranslate2", str(tmp_path / "ct2")).returncode == 0

    # mt-average: the mean of the merged models, a whole model of its own
    average = average_checkpoints([p for _, p in checkpoint.list_checkpoints(str(whole_dir))], str(tmp_path / "avg"))
    assert "adapters" not in average and weights(tmp_path / "avg").keys() == weights(base).keys()

    with pytest.raises(UserError, match="train.lora: .* in the config but .* in "):
        train_module.train(load_config(whole, ["train.max_steps=6", "train.lora.rank=8"]))
    moved = tmp_path / "moved"
    os.rename(trained_run, moved)
    try:
        with pytest.raises(UserError, match=f"holds adapters of the model in {base}, which is gone"):
            checkpoint.load(last, torch.device("cpu"))
    finally:
        os.rename(moved, trained_run)


def test_adapters_refuse_a_base_that_changed(trained_run, corpus, tmp_path):
    import shutil

    from mt_transformer.errors import UserError

    base = shutil.copytree(checkpoint.resolve(trained_run), tmp_path / "base")
    config, run_dir = lora_run(corpus, tmp_path, str(base), "run", max_steps=2)
    train_module.train(load_config(config))
    tensors = weights(base)
    name = next(iter(tensors))
    tensors[name] = tensors[name] + 1
    from safetensors.torch import save_file

    save_file(tensors, str(base / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(UserError, match="its adapters were trained on another model than"):
        checkpoint.load(str(run_dir), torch.device("cpu"))


def test_hostile_adapter_metadata_is_one_line_naming_the_field(trained_run, corpus, tmp_path):
    """config.json's adapters record of another shape, or a base that leads back to an adapter
    checkpoint (itself, or one naming it): a one-line error of mt-translate, never a traceback."""
    import json
    import shutil

    base = shutil.copytree(checkpoint.resolve(trained_run), tmp_path / "base")
    config, run_dir = lora_run(corpus, tmp_path, str(base), "run", max_steps=2)
    train_module.train(load_config(config))
    last = checkpoint.list_checkpoints(str(run_dir))[-1][1]
    other = shutil.copytree(last, tmp_path / "other")
    settings = json.loads(open(os.path.join(last, "config.json"), encoding="utf-8").read())
    record = settings["adapters"]
    cases = [
        ({**record, "base": 5}, "adapters.base: missing or of another type (5)"),
        ({k: v for k, v in record.items() if k != "scale"}, "adapters.scale: missing or of another type (None)"),
        ({**record, "scale": "2"}, "adapters.scale: missing or of another type ('2')"),
        ([record["base"]], "adapters: expected an object with base, base_sha256 and scale"),
        ({**record, "base": last}, "leads back to an adapter checkpoint, not a model"),
        ({**record, **checkpoint.adapted_base(other)}, "leads back to an adapter checkpoint, not a model"),
    ]
    with open(os.path.join(other, "config.json"), "w", encoding="utf-8") as f:  # other's base: the first
        json.dump({**settings, "adapters": {**record, **checkpoint.adapted_base(last)}}, f)
    for adapters, says in cases:
        with open(os.path.join(last, "config.json"), "w", encoding="utf-8") as f:
            json.dump({**settings, "adapters": adapters}, f)
        result = run_cli("mt-translate", "--checkpoint", last, "--engine", "torch", input="a red apple\n")
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].endswith(says), result.stderr[-500:]


@pytest.mark.parametrize(
    "setting, says",
    [
        ("train.init_from=null", "train.lora: adapts a trained model: name it in train.init_from"),
        ("train.lora.targets=[q_proj, fc1]", "train.lora.targets: each one of q_proj, kv_proj, out_proj, linear1, "),
        ("train.init_from_reset=false", "train.lora: trains new adapters; train.init_from_reset must be true"),
        ("train.distributed=fsdp", "train.distributed: fsdp shards a whole model's training; unset train.lora"),
    ],
)
def test_a_bad_lora_setting_is_one_line(trained_run, corpus, tmp_path, setting, says):
    config, run_dir = lora_run(corpus, tmp_path, trained_run, "run")
    result = run_cli("mt-train", "--config", config, "--set", setting)
    assert result.returncode == 2 and result.stderr.strip().startswith(f"error: {says}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not run_dir.exists()
