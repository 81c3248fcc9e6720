"""Several processes through torchrun, with gloo on CPU: the same updates as one process that sees
the same global batches, one writer, resume, and two "nodes" meeting at a c10d rendezvous."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file

from conftest import ROOT, TORCHRUN, failure_excerpt, run_cli, subprocess_env, tiny_config, write_config
from mt_transformer.processes import Processes
from mt_transformer.training.distributed import shard

# Two ranks sum their halves of the batch and then all-reduce; one process sums the whole batch
# in one order. The gradients of the first update, from identical weights, therefore agree to
# float32 rounding, not bit for bit. The weights after it do not: Adam's first step is about
# lr * sign(gradient), so rounding noise in a near-zero gradient becomes a step of +-lr (1.9e-4
# on one host, 4e-7 on another). The gradients differ by 2.2e-7 of the largest entry (AMD EPYC,
# AVX2); the bound below is relative to that entry too.
GRADIENT_TOLERANCE = 1e-5

pytestmark = TORCHRUN


def test_shards_are_disjoint_equal_and_cover_all_but_the_remainder():
    batches = list(range(11))
    shards = [shard(batches, Processes(rank, 3)) for rank in range(3)]
    assert shards == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    assert shard(batches, Processes()) == batches


def torchrun(*args, timeout: int = 300) -> subprocess.Popen:
    env = subprocess_env(OMP_NUM_THREADS="1")
    # --no-python runs the mt-train command itself: it may be a shell shim (pyenv), not a Python file
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--no-python", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )


def finish(process: subprocess.Popen, timeout: int = 300) -> str:
    _, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, failure_excerpt(stderr)
    return stderr


def mt_train() -> str:
    assert shutil.which("mt-train"), "mt-train is not installed (pip install -e .)"
    return "mt-train"


def weights(run_dir: str, step: int) -> dict:
    return load_file(os.path.join(run_dir, "checkpoints", f"step_{step:08d}", "model.safetensors"))


def first_gradients(run_dir: str) -> list[np.ndarray]:
    """The gradient of each parameter in the first update: after one step Adam's first moment is
    (1 - beta1) times it (betas (0.9, 0.98) in the test config)."""
    from mt_transformer.checkpoint import load_trainer_state

    state = load_trainer_state(os.path.join(run_dir, "checkpoints", "step_00000001"))["optimizer"]["state"]
    return [state[i]["exp_avg"].numpy() / (1 - 0.9) for i in sorted(state)]


def gradient_gap(a: str, b: str) -> float:
    """The largest difference between two runs' first-update gradients, relative to the largest entry."""
    ga, gb = first_gradients(a), first_gradients(b)
    assert [g.shape for g in ga] == [g.shape for g in gb]
    largest = max(float(np.abs(g).max()) for g in ga)
    return max(float(np.abs(x - y).max()) for x, y in zip(ga, gb)) / largest


def losses(run_dir: str) -> list[tuple[int, float]]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [(m["step"], m["loss"]) for m in map(json.loads, f) if "loss" in m]


def config_for(corpus, directory, name, **train):
    # 256-token batches: the 2,000-pair corpus makes over 100 of them, so 4 updates stay in one epoch
    settings = {"max_steps": 3, "valid_every": 1, "log_every": 1, "max_tokens": 256, **train}
    return write_config(directory / f"{name}.yaml", tiny_config(corpus, str(directory / name), train=settings))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(config: str) -> list[subprocess.Popen]:
    """Two torchrun "nodes" of one process each, meeting at a c10d rendezvous on 127.0.0.1. One
    node hosts the rendezvous store, the other connects to it: left to torchrun, both match
    127.0.0.1 and race to host it, and under load the loser timed out as a client."""
    endpoint = f"127.0.0.1:{free_port()}"
    rendezvous = ["--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint]
    rendezvous += ["--rdzv-id", "mt-test"]
    return [
        torchrun(*rendezvous, "--rdzv-conf", f"is_host={int(host)}", mt_train(), "--config", config)
        for host in (True, False)
    ]


@pytest.fixture(scope="module")
def two_processes(corpus, tmp_path_factory):
    """The same 3 updates trained by one process (accumulating 2 batches) and by 2 processes (1
    each), the 2 started as two nodes of one process each (torchrun --standalone, one node of 2
    processes, is the launch of the resume and SIGTERM tests below)."""
    directory = tmp_path_factory.mktemp("ddp")
    single = run_cli("mt-train", "--config", config_for(corpus, directory, "single", accumulate=2))
    assert single.returncode == 0, single.stderr
    outputs = [finish(node) for node in two_nodes(config_for(corpus, directory, "double"))]
    return directory, outputs


@pytest.mark.slow
def test_two_nodes_at_a_c10d_rendezvous_make_the_updates_of_one_process_that_sees_the_same_batches(two_processes):
    directory, outputs = two_processes
    # which node gets rank 0, and logs, is a race; the update is the same either way
    (stderr,) = [output for output in outputs if "x 2 processes" in output]
    assert "tokens per update: up to 512 (train.max_tokens 256 x train.accumulate 1 x 2 process(es))" in stderr
    assert gradient_gap(directory / "single", directory / "double") < GRADIENT_TOLERANCE
    # the logged loss is the global batch's, written once per step by rank 0 (rounded to 4 decimals)
    single, double = losses(directory / "single"), losses(directory / "double")
    assert [s for s, _ in double] == [1, 2, 3]
    assert np.allclose([loss for _, loss in double], [loss for _, loss in single], atol=1e-3)
    assert sorted(os.listdir(directory / "double" / "checkpoints")) == [
        "best.json",
        "step_00000001",
        "step_00000002",
        "step_00000003",
    ]


@pytest.fixture(scope="module")
def resumed_then_stopped(two_processes, tmp_path_factory) -> tuple[str, str]:
    """The two-node run above, stopped after its step-2 checkpoint (the later one never written),
    resumed on one node of 2 processes for 200 updates, and sent SIGTERM once its step-3
    checkpoint is written (every checkpoint kept): the run directory and torchrun's stderr."""
    directory, _ = two_processes
    split = tmp_path_factory.mktemp("resumed") / "split"
    shutil.copytree(directory / "double", split)
    shutil.rmtree(split / "checkpoints" / "step_00000003")
    os.remove(split / "checkpoints" / "best.json")
    settings = [f"train.output_dir={split}", "train.max_steps=200", "train.keep_last=0"]
    command = [mt_train(), "--config", str(directory / "double.yaml"), "--set", *settings]
    process = torchrun("--standalone", "--nproc-per-node", "2", *command)
    deadline = time.monotonic() + 120
    while not (split / "checkpoints" / "step_00000003").is_dir() and process.poll() is None:
        assert time.monotonic() < deadline, "no step-3 checkpoint in 120 s"
        time.sleep(0.1)
    if process.poll() is not None:
        pytest.fail(failure_excerpt(process.communicate()[1]))
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    return split, stderr


@pytest.mark.slow
def test_two_processes_resume_like_an_uninterrupted_run(two_processes, resumed_then_stopped):
    """The same losses and weights as the two-node run that never stopped. Each rank taking back
    its own random state is test_random_state.py's."""
    whole, (split, stderr) = two_processes[0] / "double", resumed_then_stopped
    assert "resuming from" in stderr and "step_00000002" in stderr
    assert losses(split)[:3] == losses(whole)
    split_weights, whole_weights = weights(split, 3), weights(whole, 3)
    assert all(np.array_equal(split_weights[name], whole_weights[name]) for name in whole_weights)


@pytest.mark.slow
def test_sigterm_to_torchrun_saves_a_checkpoint_and_stops_every_rank(resumed_then_stopped):
    from mt_transformer.checkpoint import list_checkpoints, load_trainer_state

    run_dir, stderr = resumed_then_stopped
    (step,) = set(map(int, re.findall(r"stopped by SIGTERM at step (\d+)", stderr)))  # every rank at one step
    last_step, directory = list_checkpoints(str(run_dir))[-1]  # complete, written by rank 0
    state = load_trainer_state(directory)
    assert last_step == state["step"] == step >= 3 and len(state["rng_ranks"]) == 2
    first, second = (saved["torch"] for saved in state["rng_ranks"])
    assert not torch.equal(first, second)  # each rank's own (seeded train.seed + rank), not rank 0's twice


@pytest.mark.slow
def test_fsdp_makes_one_process_updates_and_its_checkpoints_resume_sharded_or_not(corpus, tmp_path, two_processes):
    """train.distributed: fsdp on 2 processes for 2 updates: those of the one process that saw the
    same batches in the DDP test above, a resume under FSDP exactly like the run never stopped, and
    its checkpoints go on in one process (and translate there)."""
    single = two_processes[0] / "single"
    sharded = config_for(corpus, tmp_path, "sharded", distributed="fsdp", max_steps=2)
    finish(torchrun("--standalone", "--nproc-per-node", "2", mt_train(), "--config", sharded))
    assert gradient_gap(single, tmp_path / "sharded") < GRADIENT_TOLERANCE
    assert np.allclose([x for _, x in losses(tmp_path / "sharded")], [x for _, x in losses(single)][:2], atol=1e-3)
    assert weights(tmp_path / "sharded", 2).keys() == weights(single, 2).keys()

    for name in ("split", "one"):  # the same run stopped after its step-1 checkpoint
        shutil.copytree(tmp_path / "sharded", tmp_path / name)
        shutil.rmtree(tmp_path / name / "checkpoints" / "step_00000002")
        os.remove(tmp_path / name / "checkpoints" / "best.json")
    resume = ("--config", sharded, "--set", f"train.output_dir={tmp_path / 'split'}")
    assert "resuming from" in finish(torchrun("--standalone", "--nproc-per-node", "2", mt_train(), *resume))
    assert losses(tmp_path / "split") == losses(tmp_path / "sharded")
    split_weights, whole_weights = weights(tmp_path / "split", 2), weights(tmp_path / "sharded", 2)
    assert all(np.array_equal(split_weights[name], whole_weights[name]) for name in whole_weights)
    one = run_cli("mt-train", "--config", sharded, "--set", f"train.output_dir={tmp_path / 'one'}")
    assert one.returncode == 0 and "resuming 2 processes' run with 1" in one.stderr, one.stderr
    assert len(losses(tmp_path / "one")) == 2
    translated = run_cli("mt-translate", "--checkpoint", str(tmp_path / "one"), input="a red apple\n")
    assert translated.returncode == 0 and translated.stdout.count("\n") == 1, translated.stderr
