"""A checkpoint's CTranslate2 conversion: made once in the user's cache, checked, reused, made
again when the checkpoint's bytes change, never one shipped inside a checkpoint; one conversion
when several processes ask at once."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from conftest import ROOT, perturbed_model, run_cli, subprocess_env
from mt_transformer import checkpoint
from mt_transformer.decoding import ctranslate2_cache, ctranslate2_export
from mt_transformer.errors import UserError

CPU = torch.device("cpu")


@pytest.fixture
def own_checkpoint(trained_run, tmp_path, monkeypatch) -> str:
    """A copy of the trained run's best checkpoint, and a conversion cache of this test's own."""
    directory = tmp_path / "step"
    shutil.copytree(checkpoint.resolve(trained_run), directory, ignore=shutil.ignore_patterns("ctranslate2", ".*"))
    monkeypatch.setenv("MT_CACHE_DIR", str(tmp_path / "cache"))
    return str(directory)


def listing(directory: str) -> dict:
    return {entry.name: entry.stat().st_mtime_ns for entry in os.scandir(directory)}


def test_made_once_in_the_users_cache_checked_and_reused(own_checkpoint, tmp_path, monkeypatch):
    before = listing(own_checkpoint)
    converted = ctranslate2_cache.cached_conversion(own_checkpoint)
    assert os.path.dirname(converted) == str(tmp_path / "cache" / "ctranslate2")
    settings = json.loads(open(os.path.join(converted, checkpoint.EXPORT_SETTINGS_FILE)).read())
    assert 0 <= settings["log_prob_gap"] <= ctranslate2_export.CHECK_TOLERANCE
    assert set(settings["source"]["files"]) >= {checkpoint.MODEL_FILE, checkpoint.CONFIG_FILE, "spm.model"}
    assert listing(own_checkpoint) == before  # the checkpoint, perhaps read-only or shared, is not written
    assert [n for n in os.listdir(os.path.dirname(converted)) if n.startswith(".")] == [
        f".{os.path.basename(converted)}.lock"  # and no temporary directory left
    ]

    def fail(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(ctranslate2_export, "export", fail)
    assert ctranslate2_cache.cached_conversion(own_checkpoint) == converted  # reused: not converted again
    weights = os.path.join(own_checkpoint, checkpoint.MODEL_FILE)
    status = os.stat(weights)
    os.utime(weights, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))  # touched, the same bytes
    assert ctranslate2_cache.cached_conversion(own_checkpoint) == converted


def test_made_again_when_the_weights_change_even_with_their_size_and_time_kept(own_checkpoint):
    converted = ctranslate2_cache.cached_conversion(own_checkpoint)
    weights = os.path.join(own_checkpoint, checkpoint.MODEL_FILE)
    status = os.stat(weights)
    tensors = load_file(weights)
    name = next(iter(tensors))
    tensors[name] = tensors[name] + 1.0
    save_file(tensors, weights, metadata={"format": "pt"})
    os.utime(weights, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert os.stat(weights).st_size == status.st_size
    again = ctranslate2_cache.cached_conversion(own_checkpoint)
    assert again != converted and os.path.isfile(os.path.join(again, "model.bin"))


def test_a_conversion_shipped_inside_a_checkpoint_is_never_used(own_checkpoint, tmp_path):
    """A copied run whose ctranslate2/ holds other weights' conversion, its times kept as they were."""
    loaded = checkpoint.load(own_checkpoint, CPU)
    other = perturbed_model(loaded.config.model, loaded.tokenizer.src_vocab_size, loaded.tokenizer.tgt_vocab_size, True)
    shipped = os.path.join(own_checkpoint, "ctranslate2")
    ctranslate2_export.export(dataclasses.replace(loaded, model=other), shipped)
    old = ctranslate2_cache.source_signature(own_checkpoint)
    old["converter"] = 2  # as an older release recorded it, sizes and times then
    record = os.path.join(shipped, checkpoint.EXPORT_SETTINGS_FILE)
    settings = json.loads(open(record, encoding="utf-8").read())
    with open(record, "w", encoding="utf-8") as f:
        json.dump({**settings, "source": old}, f)
    lines = ["I saw a dog.", "The red apple is on the table.", "We went home."]
    args = ("mt-translate", "--checkpoint", own_checkpoint, "--beam", "1", "--scores")
    torch_out = run_cli(*args, "--engine", "torch", input="\n".join(lines) + "\n")
    auto_out = run_cli(*args, "--engine", "auto", input="\n".join(lines) + "\n")
    shipped_out = run_cli("mt-translate", "--checkpoint", shipped, "--beam", "1", "--scores", input="\n".join(lines))
    assert torch_out.returncode == auto_out.returncode == shipped_out.returncode == 0, auto_out.stderr
    assert "engine: CTranslate2 on cpu" in auto_out.stderr and f"converted {own_checkpoint} " in auto_out.stderr
    texts = [[line.split("\t")[-1] for line in out.stdout.splitlines()] for out in (torch_out, auto_out, shipped_out)]
    assert texts[1] == texts[0] and texts[2] != texts[0]  # the shipped conversion would have translated otherwise


def test_a_conversion_that_computes_other_numbers_is_refused_and_nothing_is_written(own_checkpoint, monkeypatch):
    monkeypatch.setattr(ctranslate2_export, "log_prob_gap", lambda loaded, directory, source_prefix=None: 0.5)
    with pytest.raises(UserError, match=r"differs from ours by 0.5 in log-probability"):
        ctranslate2_cache.cached_conversion(own_checkpoint)
    cache = os.path.join(os.environ["MT_CACHE_DIR"], "ctranslate2")
    assert all(name.endswith(".lock") for name in os.listdir(cache))  # no conversion, finished or temporary


@pytest.mark.slow  # about 6 s: two processes
def test_several_processes_asking_at_once_convert_once(own_checkpoint):
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO); "
        "from mt_transformer.decoding.ctranslate2_cache import cached_conversion; "
        "print(cached_conversion(sys.argv[1]))"
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", code, own_checkpoint],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=subprocess_env(),
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0, 0], outputs
    assert len({out.strip() for out, _ in outputs}) == 1 and outputs[0][0].startswith(os.environ["MT_CACHE_DIR"])
    assert sum("converted" in err for _, err in outputs) == 1  # one made it, the other waited and reused it


def test_converting_leaves_torchs_thread_count_as_it_was(own_checkpoint):
    from mt_transformer.decoding.engines import open_translator

    threads = torch.get_num_threads()
    translator = open_translator(own_checkpoint, "auto", "cpu")  # converts, checks, loads
    assert torch.get_num_threads() == threads  # CTranslate2 sets the OpenMP count the two share
    assert translator.search.translator.num_translators == threads  # one worker per thread torch would use
