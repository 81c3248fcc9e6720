"""mt-translate and mt-score on corpora: killed and run again, stopped by SIGTERM, .gz in and
out, a pipe its reader closes, shards merged, and torchrun ranks as shards."""

import gzip
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, TORCHRUN, failure_excerpt, run_cli, subprocess_env


@pytest.fixture(scope="module")
def corpus_file(corpus, tmp_path_factory) -> str:
    """600 lines of the test corpus's English (repeated), one of them empty."""
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()
    many = [lines[i % len(lines)] for i in range(600)]
    many[37] = ""
    path = tmp_path_factory.mktemp("corpus_file") / "in.en"
    path.write_text("\n".join(many) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def whole(trained_run, corpus_file, tmp_path_factory) -> bytes:
    """The translation of corpus_file by an uninterrupted run."""
    out = tmp_path_factory.mktemp("whole") / "out.de"
    result = run_cli("mt-translate", "--checkpoint", trained_run, "-i", corpus_file, "-o", str(out), *OPTIONS)
    assert result.returncode == 0, result.stderr
    return out.read_bytes()


OPTIONS = ["--beam", "2", "--buffer-lines", "24"]  # 25 windows of 24 lines


def started(*args: str) -> subprocess.Popen:
    """mt-translate in a process of its own."""
    code = "import sys; from mt_transformer.cli import translate_main; sys.argv[0] = 'mt-translate'; translate_main()"
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env=subprocess_env(OMP_NUM_THREADS="1"),
    )


def windows_done(out) -> int:
    try:
        return len(json.loads(open(f"{out}.progress.json").read())["windows"])
    except (FileNotFoundError, json.JSONDecodeError):  # not yet, or replaced at this instant
        return 0


def wait_for_windows(process: subprocess.Popen, out, count: int) -> None:
    deadline = time.monotonic() + 120
    while windows_done(out) < count:
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.005)


@pytest.mark.slow
def test_sigkill_at_a_random_window_then_the_same_command_ends_byte_identical(
    trained_run, corpus_file, whole, tmp_path
):
    seed = random.randrange(10**6)
    kill_after = random.Random(seed).randrange(1, 20)
    out = tmp_path / "out.de"
    args = ["--checkpoint", trained_run, "-i", corpus_file, "-o", str(out), *OPTIONS]
    process = started(*args)
    wait_for_windows(process, out, kill_after)
    process.kill()
    process.communicate()
    assert not out.exists() and os.path.exists(f"{out}.partial"), f"seed {seed}"
    result = run_cli("mt-translate", *args)
    assert result.returncode == 0, result.stderr
    continued = int(result.stderr.split("continuing after line ")[1].split()[0])
    assert continued >= 24 * kill_after, f"seed {seed}"
    assert out.read_bytes() == whole, f"seed {seed}"
    assert sorted(os.listdir(tmp_path)) == ["out.de"]


@pytest.mark.slow
def test_sigterm_keeps_the_windows_done_and_a_changed_command_is_refused(trained_run, corpus_file, whole, tmp_path):
    out = tmp_path / "out.de.gz"
    args = ["--checkpoint", trained_run, "-i", corpus_file, "-o", str(out), *OPTIONS]
    process = started(*args)
    wait_for_windows(process, out, 2)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 128 + signal.SIGTERM, stderr.decode()
    last = stderr.decode().strip().splitlines()[-1]
    assert last.startswith("stopped by SIGTERM after ") and last.endswith("run the same command again to continue")
    changed = run_cli("mt-translate", *args[:-4], "--beam", "3", "--buffer-lines", "24")
    assert changed.returncode == 2
    assert changed.stderr.strip().splitlines()[-1] == (
        f"error: {out}.partial: begun with --beam 2, now 3; run it as before to continue, or add --restart to "
        f"start over"
    )
    result = run_cli("mt-translate", *args)
    assert result.returncode == 0, result.stderr
    assert gzip.decompress(out.read_bytes()) == whole


def test_gzip_in_and_out_and_stdin(trained_run, corpus_file, whole, tmp_path):
    packed = tmp_path / "in.en.gz"
    packed.write_bytes(gzip.compress(open(corpus_file, "rb").read()))
    out = tmp_path / "out.de.gz"
    result = run_cli("mt-translate", "--checkpoint", trained_run, "-i", str(packed), "-o", str(out), *OPTIONS)
    assert result.returncode == 0, result.stderr
    assert gzip.decompress(out.read_bytes()) == whole
    piped = run_cli("mt-translate", "--checkpoint", trained_run, *OPTIONS, input=open(corpus_file).read())
    assert piped.returncode == 0 and piped.stdout.encode() == whole
    broken = tmp_path / "broken.en.gz"
    broken.write_bytes(packed.read_bytes()[:-20])
    result = run_cli("mt-translate", "--checkpoint", trained_run, "-i", str(broken), "-o", str(tmp_path / "x"))
    assert result.returncode == 2 and f"error: {broken}: not a complete gzip file" in result.stderr
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.partial").exists()


@pytest.mark.slow
def test_a_reader_that_closes_the_pipe_ends_the_run_quietly(trained_run, corpus_file):
    process = started("--checkpoint", trained_run, "-i", corpus_file, "--buffer-lines", "8")
    first = process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=120) == 128 + signal.SIGPIPE, stderr
    assert first and "Traceback" not in stderr and "Exception ignored" not in stderr


def test_shards_merge_to_the_unsharded_output(trained_run, corpus_file, whole, tmp_path):
    shards = [str(tmp_path / f"part{k}") for k in range(3)]
    for k, path in enumerate(shards):
        args = ["--checkpoint", trained_run, "-i", corpus_file, "-o", path, "--shard", f"{k}/3", *OPTIONS]
        result = run_cli("mt-translate", *args)
        assert result.returncode == 0, result.stderr
    result = run_cli("mt-translate", "--merge", *shards, "-o", str(tmp_path / "merged"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "merged").read_bytes() == whole
    assert result.stdout.strip() == f"merged 3 shards: 600 lines in {tmp_path / 'merged'}"


def test_mt_score_streams_continues_and_merges(trained_run, corpus_file, whole, tmp_path):
    hyp = tmp_path / "hyp.de"
    hyp.write_bytes(whole)
    common = ["--checkpoint", trained_run, "--src", corpus_file, "--tgt", str(hyp), "--buffer-lines", "50"]
    one = run_cli("mt-score", *common)
    assert one.returncode == 0, one.stderr
    assert len(one.stdout.splitlines()) == 600
    for k in range(2):
        result = run_cli("mt-score", *common, "--shard", f"{k}/2", "-o", str(tmp_path / f"s{k}.gz"))
        assert result.returncode == 0, result.stderr
    result = run_cli("mt-score", "--merge", str(tmp_path / "s0.gz"), str(tmp_path / "s1.gz"), "-o", str(tmp_path / "m"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "m").read_text() == one.stdout


@pytest.mark.slow
@TORCHRUN
def test_torchrun_ranks_translate_their_shards_and_rank_0_merges(trained_run, corpus_file, whole, tmp_path):
    out = tmp_path / "out.de"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command += ["--no-python", "mt-translate", "--checkpoint", trained_run, "-i", corpus_file, "-o", str(out)]
    result = subprocess.run(
        command + OPTIONS, capture_output=True, text=True, cwd=ROOT, env=subprocess_env(), timeout=300
    )
    assert result.returncode == 0, failure_excerpt(result.stderr)
    assert out.read_bytes() == whole
    assert f"2 ranks' shards merged: 600 lines in {out}" in result.stderr
    assert os.listdir(tmp_path) == ["out.de"]  # the shards and their records are gone
