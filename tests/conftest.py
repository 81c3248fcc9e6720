"""Shared fixtures: a small generated corpus, a tiny config and one tiny trained run."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import torch
import yaml

from mt_transformer.config import CorpusConfig, ModelConfig
from mt_transformer.data.corpus import load_pairs
from mt_transformer.data.demo_data import generate
from mt_transformer.model.transformer import Transformer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The same float32 function computed in another order (batched or alone, cached or not, fused or
# not, another kernel) differs by rounding, and the order depends on the host's SIMD width. On the
# O(1) values of these tests the largest such difference measured is 1.5e-5 relative (the fused
# loss) and 9.5e-7 absolute (the model's logits), on an AMD EPYC with AVX2; the bound below leaves
# room for other kernels while a real error (a wrong mask, a missing scale) moves values by 1e-2
# or more.
FP32_TOLERANCE = dict(rtol=1e-4, atol=1e-4)

# The suite's two cores shared among pytest-xdist's workers (`make test` runs two), in this
# process and in the commands it starts: more threads than cores makes every worker slower.
THREADS = str(max(1, 2 // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))
torch.set_num_threads(int(THREADS))
# the commands the scripts under test start inherit it: a child with torch's default of one
# thread per core beside the other worker's busy threads spins in OpenMP's barriers
os.environ["OMP_NUM_THREADS"] = THREADS
# CTranslate2 conversions and file digests in a cache of the suite's own, never the user's
os.environ["MT_CACHE_DIR"] = tempfile.mkdtemp(prefix="mt-test-cache-")
atexit.register(shutil.rmtree, os.environ["MT_CACHE_DIR"], True)

# Tests that start several ranks under torchrun run one after another on one worker (make test
# uses --dist loadgroup): two process groups starting at once on two cores compete for ports
# and time, and a group's failure should be its own.
TORCHRUN = pytest.mark.xdist_group("torchrun")


def failure_excerpt(stderr: str, limit: int = 3000) -> str:
    """What a failed multi-process command said: each rank's error lines (an exception, a C++
    abort) first, which torchrun's closing summary pushes far up, then the end of stderr."""
    marks = ("Error", "error:", "terminate called", "what()", "Exception", "Traceback")
    errors = [line for line in stderr.splitlines() if any(mark in line for mark in marks)]
    return "\n".join(errors)[:limit] + "\n...\n" + stderr[-limit:]


@pytest.fixture(autouse=True)
def _threads_as_they_were():
    """A test that changes torch's thread count in this process (a script's main() run in
    process, say) gives it back: the runs of later tests, here and in the commands they start,
    must use THREADS, or their floats differ from a fresh process's."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _cpu_unless_marked_gpu(request, monkeypatch):
    """Tests marked gpu run on CUDA (skipped without it); every other test runs as on a machine
    without CUDA, in this process and in the commands it starts, so that a GPU machine runs them
    as CI does: on the CPU, deterministic, comparable to the CPU's numbers."""
    if request.node.get_closest_marker("gpu"):
        if not torch.cuda.is_available():
            pytest.skip("needs CUDA")
        return
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture(scope="session")
def corpus(tmp_path_factory) -> str:
    """Prefix of a generated English-German corpus: {prefix}/train.en, ..."""
    directory = tmp_path_factory.mktemp("corpus")
    generate(str(directory), train=2000, valid=60, test=40, seed=7)
    return str(directory)


def read_split(format: str, location: str, src_lang: str, tgt_lang: str, key: str, **keys):
    """One split of a corpus given by its format and location, loaded as mt-train loads it."""
    split = key.rsplit(".", 1)[1]
    corpus = CorpusConfig(format=format, src_lang=src_lang, tgt_lang=tgt_lang, **{split: location}, **keys)
    return load_pairs(corpus, split, key)


def tiny_model(src_vocab_size: int, tgt_vocab_size: int, share_vocab: bool = True, **model) -> Transformer:
    """A Transformer of the ModelConfig fields given (the rest at their defaults)."""
    return Transformer(ModelConfig(**model), src_vocab_size, tgt_vocab_size, share_vocab)


def perturbed_model(config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, share_vocab: bool) -> Transformer:
    """A randomly initialised model (seed 0) whose norms and biases are not their initial ones
    and zeros, so that an export or import that misplaces one shows."""
    torch.manual_seed(0)
    model = Transformer(config, src_vocab_size, tgt_vocab_size, share_vocab).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.add_(0.1 * torch.randn_like(parameter))
    return model


def tiny_config(corpus: str, output_dir: str, **sections) -> dict:
    config = {
        "data": {
            "src_lang": "en",
            "tgt_lang": "de",
            "train": f"{corpus}/train",
            "valid": f"{corpus}/valid",
            "vocab_size": 200,
            "spm_type": "bpe",
            "max_len": 48,
            "clean": {},  # the generated pairs as they are: data.clean is tested on its own (test_cleaning.py)
        },
        "model": {"d_model": 32, "n_heads": 4, "d_ff": 64, "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.0},
        "train": {
            "output_dir": output_dir,
            "max_tokens": 1024,
            "max_steps": 40,
            "warmup": 20,
            "lr_scale": 1.0,
            "log_every": 10,
            "valid_every": 20,
            "valid_max_sentences": 20,
            "seed": 3,
            "device": "cpu",  # session fixtures are made before the per-test CPU pin applies
            "precision": "fp32",  # auto would time the host, and results would depend on it
            "curves": False,  # drawing takes ~0.4 s a run; test_curves.py draws them from trained_run
        },
        "decode": {"beam_size": 2, "max_len_b": 10},
    }
    for section, values in sections.items():
        config[section].update(values)
    return config


def write_config(path, config: dict) -> str:
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(config, f)
    return str(path)


def subprocess_env(**extra: str) -> dict:
    """This process's environment with the project first on the Python path, this process's
    thread count (a run's floats depend on it), and `extra`."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": THREADS, **extra}


COMMANDS = {
    "mt-train": "train_main",
    "mt-prepare": "prepare_main",
    "mt-clean": "clean_main",
    "mt-translate": "translate_main",
    "mt-eval": "eval_main",
    "mt-score": "score_main",
    "mt-export": "export_main",
    "mt-import": "import_main",
    "mt-average": "average_main",
    "mt-plot": "plot_main",
    "mt-serve": "serve_main",
}


def run_cli(
    *args, input: str | None = None, cwd: str | None = None, env: dict | None = None, fresh_process: bool = False
) -> subprocess.CompletedProcess:
    """Run one of the commands as a user would and return its exit code, stdout and stderr. It
    runs in this process (a fresh Python process costs seconds of imports), or in a fresh one
    through the installed module with `fresh_process`, `cwd` or `env` (extra environment
    variables): for what depends on the process itself."""
    name, *rest = args
    if fresh_process or cwd or env:
        code = (
            f"import sys; from mt_transformer.cli import {COMMANDS[name]}; sys.argv[0] = {name!r}; {COMMANDS[name]}()"
        )
        return subprocess.run(
            [sys.executable, "-c", code, *rest],
            input=input,
            capture_output=True,
            text=True,
            cwd=cwd or ROOT,
            env=subprocess_env(**(env or {})),
            timeout=600,
        )
    return _run_in_this_process(name, rest, input)


def _run_in_this_process(name: str, args: list[str], input: str | None) -> subprocess.CompletedProcess:
    """The command's main() with its own stdin, stdout, stderr and log, the process's thread count
    and signal handlers put back afterwards; an uncaught exception is exit code 1 and a traceback,
    as in a process of its own."""
    import contextlib
    import io
    import logging
    import signal
    import traceback

    from mt_transformer import cli
    from mt_transformer.cli.common import LOG_DATE_FORMAT, LOG_FORMAT

    stdout, stderr = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(stderr)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, datefmt=LOG_DATE_FORMAT))
    logger = logging.getLogger("mt_transformer")
    level, threads, stdin = logger.level, torch.get_num_threads(), sys.stdin
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    sys.stdin = io.StringIO(input or "")
    returncode = 0
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                getattr(cli, COMMANDS[name])(list(args))
            except SystemExit as exit:
                returncode = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
            except Exception:
                traceback.print_exc()
                returncode = 1
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        sys.stdin = stdin
        torch.set_num_threads(threads)
        for s, previous in handlers.items():
            signal.signal(s, previous)
    return subprocess.CompletedProcess([name, *args], returncode, stdout.getvalue(), stderr.getvalue())


class Payload:
    """Unpickled, it creates the file `marker`: proof that a load ran code."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.fixture(scope="session")
def trained_run(corpus, tmp_path_factory) -> str:
    """A tiny model trained for a few dozen steps (shared by the CLI and decoding tests), its
    curves.png drawn."""
    directory = tmp_path_factory.mktemp("run")
    settings = tiny_config(corpus, str(directory / "out"), train={"curves": True})
    config = write_config(directory / "config.yaml", settings)
    result = run_cli("mt-train", "--config", config)
    assert result.returncode == 0, result.stderr
    return str(directory / "out")


def load_model(path: str, device: torch.device):
    """The model (eval mode) and tokenizer of a checkpoint or run directory."""
    from mt_transformer import checkpoint

    loaded = checkpoint.load(path, device)
    return loaded.model, loaded.tokenizer


def token_log_probs(model, src_ids: list[int], tgt_ids: list[int]) -> torch.Tensor:
    """log p of each target token and of the EOS after them given the source, from one
    teacher-forced pass of one unpadded pair: (len(tgt_ids) + 1,)."""
    from mt_transformer.special_tokens import BOS_ID, EOS_ID

    src = torch.tensor([src_ids + [EOS_ID]])
    tgt_in = torch.tensor([[BOS_ID] + tgt_ids])
    with torch.no_grad():
        log_probs = model.logits(model(src, tgt_in)).float().log_softmax(-1)[0]  # (tgt_len + 1, vocab)
    return log_probs.gather(1, torch.tensor(tgt_ids + [EOS_ID])[:, None])[:, 0]


def translator(path: str, **decode):
    """The PyTorch translator of a checkpoint or run directory on the CPU, with decode settings
    (DecodeConfig fields) changed."""
    from mt_transformer.decoding.engines import open_translator

    return open_translator(path, "torch", "cpu", **decode)
