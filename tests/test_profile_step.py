"""scripts/profile_step.py: a config's update timed and profiled in two precisions."""

import os
import sys

import numpy as np
import pytest
import torch

import profile_step
from conftest import tiny_config, write_config
from mt_transformer.data.batching import token_batches


@pytest.mark.slow
def test_profile_step_times_and_profiles_each_precision(corpus, tmp_path, monkeypatch, capsys):
    config = write_config(tmp_path / "tiny.yaml", tiny_config(corpus, str(tmp_path / "run")))
    args = ["--config", config, "--workdir", str(tmp_path / "work"), "--precisions", "fp32", "bf16", "fp32-bf16mm"]
    args += ["--updates", "1", "--warmup", "0", "--rounds", "2", "--profile", "--top", "5"]
    monkeypatch.setattr(sys, "argv", ["profile_step.py", *args])
    profile_step.main()
    printed = capsys.readouterr().out
    rows = [line.split("|") for line in printed.splitlines() if line.startswith(("| 1 |", "| 2 |"))]
    assert len(rows) == 2
    for row in rows:
        fp32, bf16, implicit = (float(cell.replace(",", "")) for cell in row[2:5])
        ratios = [float(r) for r in row[5].split("/")]
        assert min(fp32, bf16, implicit) > 0
        for rate, ratio in zip((bf16, implicit), ratios):
            assert abs(ratio - rate / fp32) < 0.01 + 0.01 * ratio
    assert printed.count("Self CPU time total") == 3  # one operator table per precision
    assert not os.path.exists(tmp_path / "run")  # nothing written where mt-train would write


def test_fp32_bf16mm_allows_bf16_products_only_while_its_updates_run():
    flags = torch.backends.mkldnn.matmul
    before = flags.fp32_precision
    with profile_step.matmul_precision("fp32-bf16mm"):
        assert flags.fp32_precision == "bf16"
    assert flags.fp32_precision == before
    with profile_step.matmul_precision("bf16"):  # autocast's bf16 leaves the fp32 setting alone
        assert flags.fp32_precision == before


def test_same_batch_puts_the_first_update_s_batches_in_every_place():
    batches = ["a", "b", "c", "d", "e", "f"]
    assert profile_step.update_groups(batches, 2, same_batch=False) == [["a", "b"], ["c", "d"], ["e", "f"]]
    assert profile_step.update_groups(batches, 2, same_batch=True) == [["a", "b"]] * 3
    assert profile_step.update_groups(batches, 1, same_batch=True) == [["a"]] * 6


class _Batch:
    target_tokens = 10

    def to(self, device):
        return self


def test_interleave_runs_each_update_in_every_precision_in_turn_the_order_reversed_every_other():
    calls = []

    def step_for(precision):
        return lambda batches: calls.append((precision, len(batches)))

    steps = {"fp32": step_for("fp32"), "bf16": step_for("bf16")}
    groups = [[_Batch()], [_Batch()], [_Batch(), _Batch()]]
    rates = profile_step.run_interleaved(steps, groups, torch.device("cpu"))
    assert calls == [("fp32", 1), ("bf16", 1), ("bf16", 1), ("fp32", 1), ("fp32", 2), ("bf16", 2)]
    assert set(rates) == {"fp32", "bf16"} and min(rates.values()) > 0


def test_batches_run_on_into_later_epochs_as_mt_train_draws_them():
    src_lens, tgt_lens = np.array([3, 5, 7, 9, 4, 6]), np.array([4, 6, 8, 9, 5, 5])
    epoch0 = token_batches(src_lens, tgt_lens, 20, seed=3, epoch=0)
    epoch1 = token_batches(src_lens, tgt_lens, 20, seed=3, epoch=1)
    needed = len(epoch0) + 1
    drawn = profile_step.epochs_of_batches(src_lens, tgt_lens, 20, 3, needed)
    assert len(drawn) == needed
    assert all(np.array_equal(a, b) for a, b in zip(drawn, epoch0 + epoch1[:1]))
    with pytest.raises(SystemExit):
        profile_step.epochs_of_batches(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 20, 3, 1)
