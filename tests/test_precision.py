"""train.precision: auto: what it chooses on each kind of machine, and the calibration behind it."""

import json
import os

import datasets
import numpy as np
import pytest
import torch

from conftest import tiny_config, tiny_model, write_config
from mt_transformer import devices
from mt_transformer.config import load_config
from mt_transformer.data.batching import Batch, token_batches
from mt_transformer.training import precision as precision_module
from mt_transformer.training import train as train_module
from mt_transformer.training.precision import calibration, choose_precision, first_batches, pass_seconds, speedup

CPU = torch.device("cpu")
AVX2 = ("AMD EPYC", ["avx2", "fma"])
AMX = ("Intel Xeon", ["avx2", "avx512f", "avx512_bf16", "amx_bf16"])


def never(*args):
    raise AssertionError("no calibration (and no batches for one) expected")


def test_a_precision_that_is_set_is_kept():
    assert choose_precision("fp16", CPU, None, never, never) == ("fp16", "train.precision")


@pytest.mark.parametrize(
    "capability, expected", [((9, 0), "bf16"), ((8, 0), "bf16"), ((7, 0), "fp16"), ((6, 1), "fp32")]
)
def test_on_a_gpu_auto_follows_its_compute_capability(monkeypatch, capability, expected):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device: capability)
    chosen, why = choose_precision("auto", torch.device("cuda", 0), None, never, never)
    assert chosen == expected and why.startswith(f"auto: compute capability {capability[0]}.{capability[1]}")


def test_on_a_cpu_without_bf16_units_auto_is_fp32_without_calibrating(monkeypatch):
    monkeypatch.setattr(devices, "cpu_info", lambda: AVX2)
    chosen, why = choose_precision("auto", CPU, None, never, never)
    assert (
        chosen == "fp32"
        and why == "auto: AMD EPYC has no bf16 units (no avx512_bf16 or amx_bf16): bf16 runs slower than fp32 here"
    )


def test_on_a_cpu_with_bf16_units_auto_keeps_bf16_only_when_clearly_faster(monkeypatch):
    monkeypatch.setattr(devices, "cpu_info", lambda: AMX)
    assert choose_precision("auto", CPU, None, list, lambda *a: 1.6)[0] == "bf16"
    chosen, why = choose_precision("auto", CPU, None, list, lambda *a: 1.05)
    assert chosen == "fp32" and "only 1.05x" in why


def test_a_run_too_short_to_repay_a_calibration_is_fp32_without_one(monkeypatch):
    monkeypatch.setattr(devices, "cpu_info", lambda: AMX)
    chosen, why = choose_precision("auto", CPU, None, never, never, steps=999)
    assert chosen == "fp32" and why == "auto: a run of 999 updates is too short to repay a calibration of bf16"
    assert choose_precision("auto", CPU, None, list, lambda *a: 1.6, steps=1000)[0] == "bf16"


def test_calibration_times_both_precisions_and_leaves_the_random_state_alone():
    torch.manual_seed(0)
    model = tiny_model(40, 40, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1)
    batches = []
    for sentences, length in ((8, 5), (6, 7), (4, 9)):  # a new shape each pass, as in training
        ids = torch.randint(4, 40, (sentences, length + 1))
        batches.append(Batch(src=ids[:, 1:], tgt_in=ids[:, :-1], tgt_out=ids[:, 1:]))
    before = torch.get_rng_state()
    speedup = calibration(model, CPU, batches)
    assert 0 < speedup < float("inf")
    assert torch.equal(torch.get_rng_state(), before)
    assert all(p.grad is None for p in model.parameters())


def test_calibration_times_each_batch_in_both_precisions_back_to_back_in_alternating_order(monkeypatch):
    passes = []
    real_loss = precision_module.training_loss

    def recorded(model, batch, smoothing, precision):
        passes.append((batch.src.size(0), precision))
        return real_loss(model, batch, smoothing, precision)

    monkeypatch.setattr(precision_module, "training_loss", recorded)
    model = tiny_model(40, 40, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1)
    batches = [
        Batch(src=torch.full((n, 3), 5), tgt_in=torch.full((n, 3), 5), tgt_out=torch.full((n, 3), 5))
        for n in (1, 2, 3, 4)
    ]
    timings = pass_seconds(model, CPU, batches)
    assert passes == [
        (1, "fp32"),
        (1, "bf16"),
        (2, "bf16"),
        (2, "fp32"),
        (3, "fp32"),
        (3, "bf16"),
        (4, "bf16"),
        (4, "fp32"),
    ]
    assert len(timings) == 3 and all(set(t) == {"fp32", "bf16"} and min(t.values()) > 0 for t in timings)
    passes.clear()
    pass_seconds(model, CPU, batches[:2], repeat=True)  # each pass twice: the second is timed
    assert passes == [
        (1, "fp32"),
        (1, "fp32"),
        (1, "bf16"),
        (1, "bf16"),
        (2, "bf16"),
        (2, "bf16"),
        (2, "fp32"),
        (2, "fp32"),
    ]


def test_calibration_times_second_passes_where_training_keeps_its_kernels(monkeypatch):
    seen = []
    monkeypatch.setattr(precision_module, "pass_seconds", lambda *a, repeat: seen.append(repeat) or [])
    monkeypatch.setattr(precision_module, "speedup", lambda timings: 1.0)
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    for flags, repeat in ((["avx512_bf16", "amx_bf16"], True), (["avx512f", "avx512_bf16"], False)):
        monkeypatch.setattr(devices, "cpu_info", lambda flags=flags: ("x86", flags))
        calibration(None, CPU, [])
        assert seen.pop() is repeat
    # the cache in effect decides, wherever its size came from: a user's setting on either CPU
    for flags in (["avx512_bf16", "amx_bf16"], ["avx512f", "avx512_bf16"]):
        monkeypatch.setattr(devices, "cpu_info", lambda flags=flags: ("x86", flags))
        for capacity, repeat in (("4096", True), ("64", False)):
            monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", capacity)
            calibration(None, CPU, [])
            assert seen.pop() is repeat
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "not a number")  # the CPU's size: no AMX here
    calibration(None, CPU, [])
    assert seen.pop() is False


def test_the_speedup_weighs_each_batch_by_its_seconds():
    # a large batch twice as fast in bf16 outweighs two small ones that are not faster at all
    timings = [{"fp32": 4.0, "bf16": 2.0}, {"fp32": 0.5, "bf16": 0.5}, {"fp32": 0.5, "bf16": 0.5}]
    assert speedup(timings) == pytest.approx(5.0 / 3.0)


def test_calibration_batches_are_the_first_that_training_draws():
    rng = np.random.default_rng(0)
    src_lens, tgt_lens = rng.integers(1, 30, 200), rng.integers(1, 30, 200)
    dataset = datasets.Dataset.from_dict(
        {
            "src_ids": [[5 + i % 7] * n for i, n in enumerate(src_lens)],
            "tgt_ids": [[6 + i % 5] * n for i, n in enumerate(tgt_lens)],
            "src_len": src_lens,
            "tgt_len": tgt_lens,
        }
    )
    batches = first_batches(dataset, max_tokens=128, seed=3)
    expected = token_batches(src_lens, tgt_lens, 128, seed=3)[: precision_module.CALIBRATION_BATCHES]
    assert len(batches) == precision_module.CALIBRATION_BATCHES
    for batch, rows in zip(batches, expected):
        assert batch.src.size(0) == len(rows) and batch.src.numel() <= 128 and batch.tgt_in.numel() <= 128
        assert batch.target_tokens == int((tgt_lens[rows] + 1).sum())  # each target and its EOS
    assert len({tuple(b.src.shape) + tuple(b.tgt_in.shape) for b in batches}) > 1  # shapes change


def test_mt_train_with_auto_trains_and_records_the_precision_chosen(corpus, tmp_path, monkeypatch, caplog):
    # a CPU with bf16 units on which the calibration found bf16 twice as fast
    monkeypatch.setattr(devices, "cpu_info", lambda: AMX)
    monkeypatch.setattr(precision_module, "calibration", lambda *args: 2.0)
    monkeypatch.setattr(precision_module, "MIN_CALIBRATED_STEPS", 2)
    train = {"precision": "auto", "max_steps": 2, "valid_every": 2, "max_tokens": 256, "valid_max_sentences": 4}
    config = load_config(write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "run"), train=train)))
    with caplog.at_level("INFO"):
        train_module.train(config)
    assert (
        "train.precision: bf16 (auto: bf16 trained 2.00x as fast as fp32 in a calibration on this CPU)" in caplog.text
    )
    assert "model: " in caplog.text and "bf16 on cpu" in caplog.text
    saved = json.load(open(os.path.join(tmp_path, "run", "checkpoints", "step_00000002", "config.json")))
    assert saved["config"]["train"]["precision"] == "bf16"
