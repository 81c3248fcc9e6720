"""Faults injected into training: diverging losses, out-of-memory batches, kills, a full disk."""

import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

import mt_transformer.training.step as training_step
import mt_transformer.training.train as train_module
from conftest import Payload, run_cli, subprocess_env, tiny_config, write_config
from mt_transformer import checkpoint
from mt_transformer.config import load_config
from mt_transformer.errors import UserError
from mt_transformer.model.transformer import Transformer


def config_for(corpus, tmp_path, **train):
    values = {"max_steps": 100, "valid_every": 5, "log_every": 1, "max_tokens": 256, "valid_max_sentences": 4}
    values.update(train)
    return load_config(write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "run"), train=values)))


def saved_state(tmp_path, step: int) -> dict:
    """The trainer state that the run in tmp_path/run saved at `step`, read as mt-train reads it."""
    return checkpoint.load_trainer_state(checkpoint.step_dir(str(tmp_path / "run"), step))


def test_diverging_run_stops_and_names_the_last_good_checkpoint(corpus, tmp_path, monkeypatch):
    real_loss = training_step.linear_cross_entropy  # the training loss (validation computes its own)
    calls = {"training": 0}

    def loss_that_diverges(*args, **kwargs):
        loss = real_loss(*args, **kwargs)
        calls["training"] += 1
        return loss * float("nan") if calls["training"] > 10 else loss

    monkeypatch.setattr(training_step, "linear_cross_entropy", loss_that_diverges)
    with pytest.raises(UserError) as error:
        train_module.train(config_for(corpus, tmp_path, max_bad_updates=3))
    message = str(error.value)
    assert "training diverged: 3 updates in a row had a non-finite loss or gradient" in message
    assert "train.lr_scale" in message and message.endswith("step_00000010")
    assert "\n" not in message
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert max(m["step"] for m in logged) == 10  # no update was applied after the losses went bad


def out_of_memory_when(monkeypatch, too_big):
    """Make training forward passes raise CUDA's out-of-memory error when too_big(src, tgt_in, call)."""
    real_forward = Transformer.forward
    calls = {"training": 0}

    def forward(self, src, tgt_in):
        if torch.is_grad_enabled():
            calls["training"] += 1
            if too_big(src, tgt_in, calls["training"]):
                raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_forward(self, src, tgt_in)

    monkeypatch.setattr(Transformer, "forward", forward)
    return calls


def test_out_of_memory_batch_is_split_and_retried(corpus, tmp_path, monkeypatch):
    # dropout off: the updates from pieces must equal the updates from the whole batches
    settings = dict(max_steps=6, valid_every=6, accumulate=2)
    reference = tmp_path / "reference"
    reference.mkdir()
    train_module.train(config_for(corpus, reference, **settings))

    # the second micro-batch of the second update: the first one's gradients must be cleared too
    out_of_memory_when(monkeypatch, lambda src, tgt_in, call: call == 4)
    train_module.train(config_for(corpus, tmp_path, **settings))
    state = saved_state(tmp_path, 6)
    assert state["out_of_memory"] == 1 and state["oom_dropped"] == 0
    assert state["step"] == 6 and state["batch_in_epoch"] == 12  # nothing dropped
    # the same losses step by step (to float rounding); gradients counted twice drift by 1e-2 at step 3
    ours, theirs = losses(tmp_path / "run"), losses(reference / "run")
    assert [step for step, _ in ours] == [step for step, _ in theirs] == list(range(1, 7))
    assert all(abs(a - b) <= 2e-4 for (_, a), (_, b) in zip(ours, theirs))
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl") if '"loss"' in line]
    assert logged[-1]["out_of_memory"] == state["out_of_memory"]


def test_sentence_too_big_for_memory_drops_its_update_and_is_counted(corpus, tmp_path, monkeypatch):
    out_of_memory_when(monkeypatch, lambda src, tgt_in, call: tgt_in.size(1) > 28)
    train_module.train(config_for(corpus, tmp_path, max_steps=8, valid_every=8))
    state = saved_state(tmp_path, 8)
    assert state["step"] == 8 and state["oom_dropped"] > 0
    assert state["batch_in_epoch"] == 8 + state["oom_dropped"]


@pytest.mark.gpu
def test_a_batch_too_big_for_the_gpu_is_retried_in_pieces_and_the_run_goes_on(corpus, tmp_path, caplog):
    """A real CUDA out-of-memory: the process may take 2 GiB of the GPU, and a batch of the whole
    corpus through FFNs 4,096 wide needs more."""
    model = {"d_model": 256, "n_heads": 4, "d_ff": 4096, "encoder_layers": 2, "decoder_layers": 2}
    train = {"device": "cuda", "max_tokens": 200_000, "max_steps": 2, "valid_every": 2, "log_every": 1}
    config = load_config(
        write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "run"), model=model, train=train))
    )
    torch.cuda.empty_cache()  # what earlier tests left cached would count against the cap
    torch.cuda.set_per_process_memory_fraction(2 * 2**30 / torch.cuda.get_device_properties(0).total_memory)
    try:
        with caplog.at_level("WARNING"):
            train_module.train(config)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0)
        torch.cuda.empty_cache()
    state = saved_state(tmp_path, 2)
    assert state["step"] == 2 and state["out_of_memory"] >= 1 and state["oom_dropped"] == 0
    assert "retrying in 2 pieces each" in caplog.text


def test_an_epoch_without_a_single_update_is_an_error_not_an_endless_loop(corpus, tmp_path, monkeypatch):
    out_of_memory_when(monkeypatch, lambda src, tgt_in, call: True)
    with pytest.raises(UserError, match=r"^epoch 1 ended without a single update \(\d+ dropped for lack of memory"):
        train_module.train(config_for(corpus, tmp_path, max_steps=5))


def test_fp16_overflows_are_skipped_while_the_grad_scaler_lowers_its_scale(corpus, tmp_path, monkeypatch):
    # fp16 autocast runs on CPU too; a loss scale of 2^16 overflows at first
    monkeypatch.setattr(training_step, "FP16_INITIAL_SCALE", 2.0**16)
    train_module.train(config_for(corpus, tmp_path, precision="fp16", device="cpu", max_steps=10, valid_every=10))
    state = saved_state(tmp_path, 10)
    scale = state["scaler"]["scale"]
    assert state["step"] == 10 and 0 < state["skipped"] < 20
    assert scale == 2.0**16 / 2 ** state["skipped"]  # each skipped update halved the scale, nothing else did
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl") if '"loss"' in line]
    # the skipped updates' overflowing losses stay out of the logged loss
    assert logged[-1]["skipped"] == state["skipped"] and all(math.isfinite(m["loss"]) for m in logged)


def test_max_bad_updates_must_not_be_negative(corpus, tmp_path):
    with pytest.raises(UserError, match="train.max_bad_updates: must be zero or positive"):
        config_for(corpus, tmp_path, max_bad_updates=-1)


# --- killing the process: the restarted run must end exactly where an uninterrupted one does ---


KILL_TRAIN = {"max_steps": 20, "valid_every": 5, "log_every": 1, "max_tokens": 512, "dropout": None}


def kill_config(corpus, tmp_path, name):
    train = {k: v for k, v in KILL_TRAIN.items() if v is not None}
    config = tiny_config(corpus, str(tmp_path / name), train=train, model={"dropout": 0.1})
    return write_config(tmp_path / f"{name}.yaml", config), tmp_path / name


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [(m["step"], m["loss"]) for m in map(json.loads, f) if "loss" in m]


def final_weights_file(run_dir) -> str:
    return os.path.join(checkpoint.list_checkpoints(str(run_dir))[-1][1], checkpoint.MODEL_FILE)


def assert_same_run(run_dir, reference_dir):
    assert losses(run_dir) == losses(reference_dir)
    ours, theirs = load_file(final_weights_file(run_dir)), load_file(final_weights_file(reference_dir))
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)  # bit for bit
    with open(final_weights_file(run_dir), "rb") as a, open(final_weights_file(reference_dir), "rb") as b:
        assert a.read() == b.read()  # and so are the files


def start_training(config, prelude: str = ""):
    """mt-train in a child process, after running `prelude` there."""
    return subprocess.Popen(
        [sys.executable, "-c", prelude + "from mt_transformer.cli import train_main; train_main()", "--config", config],
        stderr=subprocess.DEVNULL,
        env=subprocess_env(),
    )


# Widens the moment to kill: the save of one step pauses after writing the weights.
SLOW_SAVE = """
import time
from mt_transformer.checkpoint import saving
write_weights = saving.save_file
def save_file(tensors, path, *args, **kwargs):
    write_weights(tensors, path, *args, **kwargs)
    if ".step_{step:08d}" in path:
        time.sleep({seconds})
saving.save_file = save_file
"""


def wait_for(condition, process, seconds=180):
    deadline = time.monotonic() + seconds
    while not condition() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert condition(), "the training process ended before the moment to kill it"


@pytest.fixture(scope="module")
def uninterrupted(corpus, tmp_path_factory):
    config, run_dir = kill_config(corpus, tmp_path_factory.mktemp("reference"), "run")
    assert run_cli("mt-train", "--config", config).returncode == 0
    return run_dir


@pytest.mark.slow
def test_sigkill_at_a_random_step_then_restart_matches_an_uninterrupted_run(corpus, tmp_path, uninterrupted):
    kill_at = random.randint(7, 17)  # after the step-5 checkpoint, before the end
    config, run_dir = kill_config(corpus, tmp_path, "run")
    process = start_training(config)
    metrics = run_dir / "metrics.jsonl"
    wait_for(lambda: metrics.exists() and any(s >= kill_at for s, _ in losses(run_dir)), process)
    process.send_signal(signal.SIGKILL)
    process.wait()
    saved = checkpoint.list_checkpoints(str(run_dir))[-1][0]  # the newest complete checkpoint
    restarted = run_cli("mt-train", "--config", config)
    assert restarted.returncode == 0, restarted.stderr
    resumed = f"resuming from {checkpoint.step_dir(str(run_dir), saved)} (step {saved},"
    assert resumed in restarted.stderr, f"killed at step {kill_at}"
    assert_same_run(run_dir, uninterrupted)


@pytest.mark.slow
def test_kill_inside_a_save_keeps_the_previous_checkpoint(corpus, tmp_path, uninterrupted):
    config, run_dir = kill_config(corpus, tmp_path, "run")
    process = start_training(config, SLOW_SAVE.format(step=10, seconds=60))
    root = run_dir / "checkpoints"
    wait_for(lambda: root.exists() and any(n.startswith(".step_00000010") for n in os.listdir(root)), process)
    process.send_signal(signal.SIGKILL)  # the save of step 10 is half-written
    process.wait()
    assert checkpoint.resolve(str(run_dir)).endswith("step_00000005")
    checkpoint.load(str(run_dir), torch.device("cpu"))  # the previous checkpoint loads
    restarted = run_cli("mt-train", "--config", config)
    assert restarted.returncode == 0, restarted.stderr
    assert not [n for n in os.listdir(root) if n.startswith(".")]  # the half-written save was cleaned up
    assert_same_run(run_dir, uninterrupted)


# --- checkpoints that would run code when unpickled ---


def write_payload(path, marker):
    torch.save({"step": 1, "payload": Payload(marker)}, path)


def one_line_error(result, after_logs=False):
    """Exit code 2, no traceback, and the error as the one last line (mt-train logs its progress before it)."""
    lines = result.stderr.strip().splitlines()
    return (
        result.returncode == 2
        and (after_logs or len(lines) == 1)
        and lines[-1].startswith("error: ")
        and "Traceback" not in result.stderr
    )


def test_pickle_payloads_never_run_through_the_commands(trained_run, corpus, tmp_path):
    marker = tmp_path / "payload-ran"
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run, run_dir)
    newest = checkpoint.list_checkpoints(str(run_dir))[-1][1]

    # 1. a pickle passed to mt-translate as the checkpoint
    write_payload(tmp_path / "model.pt", marker)
    result = run_cli("mt-translate", "--checkpoint", str(tmp_path / "model.pt"), input="I saw a dog.\n")
    assert one_line_error(result) and "pickled checkpoints are never loaded" in result.stderr

    # 2. a pickle in place of the weights: mt-translate refuses it
    write_payload(os.path.join(newest, checkpoint.MODEL_FILE), marker)
    result = run_cli("mt-translate", "--checkpoint", newest, input="I saw a dog.\n")
    assert one_line_error(result) and "not a readable safetensors file" in result.stderr

    # 3. a pickle in the trainer state: mt-train (resuming) refuses it
    shutil.copyfile(
        os.path.join(trained_run, "checkpoints", os.path.basename(newest), checkpoint.MODEL_FILE),
        os.path.join(newest, checkpoint.MODEL_FILE),
    )
    write_payload(os.path.join(newest, checkpoint.TRAINER_FILE), marker)
    config = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(run_dir), train={"max_steps": 60}))
    result = run_cli("mt-train", "--config", config)
    assert one_line_error(result, after_logs=True) and "refused: it holds objects other than tensors" in result.stderr

    assert not marker.exists()


def test_unwritable_output_directory_fails_before_any_work(corpus, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    config = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(blocker / "run")))
    result = run_cli("mt-train", "--config", config)
    assert one_line_error(result)
    assert f"train.output_dir: cannot write to {blocker / 'run'}" in result.stderr


# --- a full disk ---


def test_too_little_free_space_is_an_error_before_training(corpus, tmp_path, monkeypatch):
    real_disk_usage = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: real_disk_usage(path)._replace(free=1 << 20))
    with pytest.raises(UserError) as error:
        train_module.train(config_for(corpus, tmp_path, keep_last=3))
    message = str(error.value)
    assert message.startswith("train.output_dir: 1 MB free on the disk of") and "\n" not in message
    assert re.search(r"keeps up to 4 checkpoints of about \d+ MB at once \(train.keep_last: 3\)", message)
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "metrics.jsonl").exists()


def fail_for_lack_of_space_then_resume(
    corpus, directory, monkeypatch, reason, where="step_00000010", free_space=lambda: None
):
    """Train 10 steps, saving at 5 and 10, with a fault that strikes after the first save."""
    config = config_for(corpus, directory, max_steps=10, valid_every=5, keep_last=1)
    run_dir = directory / "run"
    with pytest.raises(UserError) as error:
        train_module.train(config)
    message = str(error.value)
    assert re.search(where, message) and reason in message and "\n" not in message
    assert message.endswith("step_00000005; free some space and run the same command again to resume")
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["best.json", "step_00000005"]  # nothing half-written
    checkpoint.load(str(run_dir), torch.device("cpu"))
    monkeypatch.undo()
    free_space()
    train_module.train(config)  # the same command resumes and finishes
    assert checkpoint.list_checkpoints(str(run_dir))[-1][0] == 10


def test_a_save_that_fails_for_lack_of_space_keeps_the_last_good_checkpoint(corpus, tmp_path, monkeypatch):
    real_save, calls = torch.save, []

    def save_on_a_full_disk(state, path):
        calls.append(path)
        if len(calls) == 2:  # what torch.save does when the disk fills up: a part written, then this
            with open(path, "wb") as f:
                f.write(b"PK\x03\x04" * 100)
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")
        return real_save(state, path)

    monkeypatch.setattr(torch, "save", save_on_a_full_disk)
    fail_for_lack_of_space_then_resume(corpus, tmp_path, monkeypatch, "the checkpoint could not be written (")


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MB tmpfs (needs the right to mount: skipped elsewhere)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount_point)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount_point
    subprocess.run(["umount", "--lazy", str(mount_point)], check=True)  # datasets may still map files there


def fill(directory):
    with open(os.path.join(directory, "filler"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * (1 << 12))
        except OSError:
            pass


def test_a_really_full_disk_keeps_the_last_good_checkpoint(corpus, small_disk, monkeypatch):
    real_prune = checkpoint.prune

    def prune_then_fill_the_disk(run_dir, keep_last):
        real_prune(run_dir, keep_last)
        fill(small_disk)

    monkeypatch.setattr(checkpoint, "prune", prune_then_fill_the_disk)
    fail_for_lack_of_space_then_resume(
        corpus,
        small_disk,
        monkeypatch,
        "No space left on device",
        where=r"run/metrics\.jsonl: |step_00000010: ",  # whichever is written first
        free_space=lambda: os.remove(small_disk / "filler"),
    )


def test_translating_onto_a_full_disk_is_a_one_line_error(trained_run, corpus, small_disk):
    (small_disk / "out.de").write_text("the previous translation\n", encoding="utf-8")
    fill(small_disk)
    result = run_cli(
        "mt-translate",
        "--checkpoint",
        trained_run,
        "-i",
        f"{corpus}/test.en",
        "-o",
        str(small_disk / "out.de"),
        "--beam",
        "1",
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].endswith(": No space left on device")
    assert "Traceback" not in result.stderr
    assert sorted(os.listdir(small_disk)) == ["filler", "out.de"]  # no temporary file left behind
    assert (small_disk / "out.de").read_text(encoding="utf-8") == "the previous translation\n"


def test_a_disk_that_fills_up_mid_translation_keeps_the_windows_done(
    trained_run, corpus, small_disk, tmp_path, monkeypatch
):
    from mt_transformer.jobs.job import CorpusJob

    args = ["--checkpoint", trained_run, "-i", f"{corpus}/test.en", "--beam", "1", "--buffer-lines", "8"]
    assert run_cli("mt-translate", *args, "-o", str(tmp_path / "whole.de")).returncode == 0
    real_write = CorpusJob._write

    def write_then_fill(job, window, lines, record):
        real_write(job, window, lines, record)
        if window.index == 1:
            fill(small_disk)

    monkeypatch.setattr(CorpusJob, "_write", write_then_fill)
    out = small_disk / "out.de"
    result = run_cli("mt-translate", *args, "-o", str(out))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines()[-1].endswith(": No space left on device")
    monkeypatch.setattr(CorpusJob, "_write", real_write)
    os.remove(small_disk / "filler")
    result = run_cli("mt-translate", *args, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "continuing after line 16" in result.stderr
    assert out.read_bytes() == (tmp_path / "whole.de").read_bytes()


@pytest.mark.parametrize("before, after", [("bf16", "fp16"), ("fp16", "fp32")])
def test_resuming_with_another_precision_continues(corpus, tmp_path, caplog, before, after):
    # a bf16 or fp32 run saves no loss scale, and an fp16 run's scale means nothing without fp16
    train_module.train(config_for(corpus, tmp_path, precision=before, device="cpu", max_steps=4, valid_every=4))
    with caplog.at_level("INFO"):
        train_module.train(config_for(corpus, tmp_path, precision=after, device="cpu", max_steps=6, valid_every=2))
    assert "resuming from" in caplog.text
    assert ("loss scale starts at 128" in caplog.text) == (after == "fp16")
    saved = saved_state(tmp_path, 6)
    assert saved["step"] == 6 and bool(saved["scaler"]) == (after == "fp16")


def test_resuming_on_another_device_takes_that_device_adam_kernel(corpus, tmp_path):
    train_module.train(config_for(corpus, tmp_path, device="cpu", max_steps=4, valid_every=4))
    path = tmp_path / "run" / "checkpoints" / "step_00000004" / "trainer.pt"
    saved = torch.load(path, weights_only=True)
    here = training_step.fused_adam(torch.device("cpu"))
    for group in saved["optimizer"]["param_groups"]:
        group["fused"] = not here  # as another device or torch version saves it
    torch.save(saved, path)
    train_module.train(config_for(corpus, tmp_path, device="cpu", max_steps=6, valid_every=2))
    saved = saved_state(tmp_path, 6)
    assert [group["fused"] for group in saved["optimizer"]["param_groups"]] == [here]


def test_writing_a_directory_onto_a_full_disk_is_a_one_line_error(trained_run, tmp_path, small_disk):
    exported = str(tmp_path / "hf")
    assert run_cli("mt-export", "--checkpoint", trained_run, "--format", "huggingface", exported).returncode == 0
    fill(small_disk)
    for command in (
        ("mt-average", "--inputs", trained_run, "--last", "1", "--output", str(small_disk / "avg")),
        ("mt-export", "--checkpoint", trained_run, "--format", "huggingface", str(small_disk / "hf")),
        ("mt-import", "--format", "huggingface", exported, str(small_disk / "imported")),
    ):
        result = run_cli(*command)
        assert one_line_error(result, after_logs=True), result.stderr
        assert "could not be written (" in result.stderr and "No space left on device" in result.stderr
        assert os.listdir(small_disk) == ["filler"]  # nothing half-written left behind
