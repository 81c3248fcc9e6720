"""mt-average: the element-wise mean of checkpoints' weights."""

import os
import shutil

import torch
from safetensors.torch import load_file, save_file

from conftest import run_cli, translator
from mt_transformer import checkpoint
from mt_transformer.evaluation.average import average_checkpoints

CPU = torch.device("cpu")


def steps(run_dir):
    return [path for _, path in checkpoint.list_checkpoints(run_dir)]


def weights(directory):
    return load_file(os.path.join(directory, checkpoint.MODEL_FILE))


def test_average_of_identical_checkpoints_is_the_same_model(trained_run, corpus, tmp_path):
    last = steps(trained_run)[-1]
    out = str(tmp_path / "avg")
    average_checkpoints([last, last, last], out)
    original, averaged = weights(last), weights(out)
    assert original.keys() == averaged.keys()
    assert all(torch.equal(original[k], averaged[k]) for k in original)
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:10]
    translations = []
    for directory in (last, out):
        translations.append([r[0].text for r in translator(directory, beam_size=2)(lines)])
    assert translations[0] == translations[1]


def test_average_of_two_is_the_mean_of_their_weights(trained_run, tmp_path):
    first, second = steps(trained_run)[-2:]
    out = str(tmp_path / "avg")
    result = run_cli("mt-average", "--inputs", first, second, "--output", out)
    assert result.returncode == 0, result.stderr
    a, b, mean = weights(first), weights(second), weights(out)
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the two checkpoints differ
    for name in a:
        assert torch.allclose(mean[name], (a[name] + b[name]) / 2, atol=1e-7), name
    # --last 2 on the run directory picks the same two
    again = run_cli("mt-average", "--inputs", trained_run, "--last", "2", "--output", str(tmp_path / "again"))
    assert again.returncode == 0, again.stderr
    assert all(torch.equal(mean[k], weights(str(tmp_path / "again"))[k]) for k in mean)
    translated = run_cli("mt-translate", "--checkpoint", out, input="hello\n")
    assert translated.returncode == 0, translated.stderr


def test_checkpoints_of_different_models_are_refused(trained_run, tmp_path):
    last = steps(trained_run)[-1]
    other = str(tmp_path / "other")
    shutil.copytree(last, other)
    tensors = weights(other)
    name = next(iter(tensors))
    tensors[name] = torch.zeros(3)
    save_file(tensors, os.path.join(other, checkpoint.MODEL_FILE))
    result = run_cli("mt-average", "--inputs", last, other, "--output", str(tmp_path / "avg"))
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and "shape" in result.stderr
    assert not os.path.exists(tmp_path / "avg")
    too_many = run_cli("mt-average", "--inputs", trained_run, "--last", "9", "--output", str(tmp_path / "avg"))
    assert too_many.returncode == 2 and "2 checkpoints, 9 asked for" in too_many.stderr
