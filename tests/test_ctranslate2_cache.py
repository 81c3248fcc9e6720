"""A checkpoint's CTranslate2 conversion: made once, checked, reused, made again when the
checkpoint changes, one conversion when several processes ask at once."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import ROOT, subprocess_env
from mt_transformer import checkpoint
from mt_transformer.errors import UserError
from mt_transformer.exchange import ctranslate2_cache, ctranslate2_export


@pytest.fixture
def own_checkpoint(trained_run, tmp_path) -> str:
    """A copy of the trained run's best checkpoint, without a conversion yet."""
    directory = tmp_path / "step"
    shutil.copytree(checkpoint.resolve(trained_run), directory, ignore=shutil.ignore_patterns("ctranslate2", ".*"))
    return str(directory)


def test_made_once_checked_and_reused(own_checkpoint, monkeypatch):
    converted = ctranslate2_cache.cached_conversion(own_checkpoint)
    assert converted == os.path.join(own_checkpoint, "ctranslate2")
    settings = json.loads(open(os.path.join(converted, checkpoint.EXPORT_SETTINGS_FILE)).read())
    assert 0 <= settings["log_prob_gap"] <= ctranslate2_export.CHECK_TOLERANCE
    assert set(settings["source"]["files"]) >= {checkpoint.MODEL_FILE, checkpoint.CONFIG_FILE, "spm.model"}
    hidden = [name for name in os.listdir(own_checkpoint) if name.startswith(".")]
    assert hidden == [".ctranslate2.lock"]  # and no temporary directory left

    def fail(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(ctranslate2_cache, "export", fail)
    assert ctranslate2_cache.cached_conversion(own_checkpoint) == converted  # reused: not converted again


def test_made_again_when_the_checkpoint_changes(own_checkpoint):
    converted = ctranslate2_cache.cached_conversion(own_checkpoint)
    before = os.stat(os.path.join(converted, "model.bin")).st_mtime_ns
    weights = os.path.join(own_checkpoint, checkpoint.MODEL_FILE)
    status = os.stat(weights)
    os.utime(weights, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))  # as a new save of the weights would
    assert ctranslate2_cache.cached_conversion(own_checkpoint) == converted
    assert os.stat(os.path.join(converted, "model.bin")).st_mtime_ns != before


def test_a_checkpoint_that_cannot_be_written_converts_into_the_users_cache(own_checkpoint, tmp_path, monkeypatch):
    monkeypatch.setenv("MT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(ctranslate2_cache, "_writable", lambda directory: False)
    converted = ctranslate2_cache.cached_conversion(own_checkpoint)
    assert converted.startswith(str(tmp_path / "cache" / "ctranslate2" / "step-"))
    assert os.path.isfile(os.path.join(converted, "model.bin"))
    assert not os.path.exists(os.path.join(own_checkpoint, "ctranslate2"))


def test_a_conversion_that_computes_other_numbers_is_refused_and_nothing_is_written(own_checkpoint, monkeypatch):
    monkeypatch.setattr(ctranslate2_export, "log_prob_gap", lambda loaded, directory, source_prefix=None: 0.5)
    with pytest.raises(UserError, match=r"differs from ours by 0.5 in log-probability"):
        ctranslate2_cache.cached_conversion(own_checkpoint)
    left = [name for name in os.listdir(own_checkpoint) if "ctranslate2" in name]
    assert left == [".ctranslate2.lock"]  # no conversion, finished or temporary


@pytest.mark.slow  # about 10 s: three processes
def test_several_processes_asking_at_once_convert_once(own_checkpoint):
    code = (
        "import logging, sys; logging.basicConfig(level=logging.INFO); "
        "from mt_transformer.exchange.ctranslate2_cache import cached_conversion; "
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
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=300) for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0], outputs
    assert {out.strip() for out, _ in outputs} == {os.path.join(own_checkpoint, "ctranslate2")}
    assert sum("converted" in err for _, err in outputs) == 1  # one made it, the others waited and reused it


def test_converting_leaves_torchs_thread_count_as_it_was(own_checkpoint):
    from mt_transformer.exchange.engine_choice import open_translator

    threads = torch.get_num_threads()
    translator = open_translator(own_checkpoint, "auto", "cpu")  # converts, checks, loads
    assert torch.get_num_threads() == threads  # CTranslate2 sets the OpenMP count the two share
    assert translator.search.translator.num_translators == threads  # one worker per thread torch would use
