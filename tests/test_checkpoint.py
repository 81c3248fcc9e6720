import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import FP32_TOLERANCE, ROOT, load_model, run_cli, subprocess_env, tiny_model
from mt_transformer import checkpoint
from mt_transformer.errors import UserError
from mt_transformer.special_tokens import EOS_ID


def small_model(seed=0):
    torch.manual_seed(seed)
    return tiny_model(50, 50, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1).eval()


def fake_run(tmp_path, steps=(10, 20, 30), keep_last=0):
    run = str(tmp_path / "run")
    os.makedirs(run, exist_ok=True)
    (tmp_path / "run" / "spm.model").write_bytes(b"not used here")
    model = small_model()
    for step in steps:
        checkpoint.save_checkpoint(
            run, step, checkpoint.weights_of(model), {"step": step}, {"step": step}, run, ["spm.model"]
        )
        checkpoint.prune(run, keep_last)
    return run, model


def test_save_load_round_trip_gives_identical_logits(tmp_path):
    run, model = fake_run(tmp_path, steps=(5,))
    restored = small_model(seed=1)
    checkpoint.load_weights(restored, checkpoint.resolve(run))
    src, tgt = torch.tensor([[5, 6, 3]]), torch.tensor([[2, 7]])
    assert torch.equal(model(src, tgt), restored(src, tgt))
    assert restored.output.weight is restored.tgt_embed.weight  # tying survives loading


def test_keep_last_prunes_but_keeps_best(tmp_path):
    run, _ = fake_run(tmp_path, steps=(10,))
    checkpoint.write_best(run, 10, 30.0)
    model = small_model()
    for step in (20, 30, 40):
        checkpoint.save_checkpoint(run, step, checkpoint.weights_of(model), {}, {"step": step}, run, ["spm.model"])
        checkpoint.prune(run, keep_last=2)
    assert [s for s, _ in checkpoint.list_checkpoints(run)] == [10, 30, 40]
    assert checkpoint.resolve(run).endswith("step_00000010")  # the run directory means its best


def test_resolve_falls_back_to_the_last_and_ignores_partial_saves(tmp_path):
    run, _ = fake_run(tmp_path)
    os.makedirs(os.path.join(run, "checkpoints", ".step_00000040.tmp"))  # a save that died
    os.makedirs(os.path.join(run, "checkpoints", "step_00000050"))  # no files in it
    assert checkpoint.resolve(run).endswith("step_00000030")
    with pytest.raises(UserError, match="no such checkpoint or run directory"):
        checkpoint.resolve(str(tmp_path / "missing"))


def test_trainer_state_with_a_pickle_payload_is_refused(tmp_path):
    run, _ = fake_run(tmp_path, steps=(10,))
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"step": 10, "x": Payload()}, os.path.join(checkpoint.resolve(run), checkpoint.TRAINER_FILE))
    with pytest.raises(UserError, match="refused"):
        checkpoint.load_trainer_state(checkpoint.resolve(run))
    assert not marker.exists()


def test_translator_refuses_a_mismatched_tokenizer(trained_run, tmp_path):
    import shutil

    directory = str(tmp_path / "ckpt")
    shutil.copytree(checkpoint.resolve(trained_run), directory)
    import json

    path = os.path.join(directory, checkpoint.CONFIG_FILE)
    with open(path) as f:
        metadata = json.load(f)
    metadata["src_vocab_size"] = metadata["tgt_vocab_size"] = 999
    with open(path, "w") as f:
        json.dump(metadata, f)
    with pytest.raises(UserError, match="model was built for 999/999"):
        checkpoint.load(directory, torch.device("cpu"))


# A checkpoint in the first directory layout (model.safetensors, config.json, trainer.pt,
# spm.model), with the per-token log-probabilities its model gave when it was written: every
# later version must load it to the same function.
FIRST_LAYOUT = os.path.join(ROOT, "tests", "fixtures", "checkpoint_v1")


def test_a_checkpoint_of_the_first_layout_scores_as_when_it_was_written():
    from mt_transformer.special_tokens import BOS_ID
    from mt_transformer.training.state import TrainerState

    with open(os.path.join(FIRST_LAYOUT, "expected.json"), encoding="utf-8") as f:
        expected = json.load(f)
    model, tokenizer = load_model(FIRST_LAYOUT, torch.device("cpu"))
    src = torch.tensor([tokenizer.encode_src([expected["source"]])[0] + [EOS_ID]])
    tgt = expected["target_ids"]
    assert tokenizer.tgt.encode(expected["target"]) + [EOS_ID] == tgt
    with torch.no_grad():
        log_probs = model.logits(model(src, torch.tensor([[BOS_ID] + tgt[:-1]]))).log_softmax(-1)[0]
    ours = log_probs.gather(1, torch.tensor(tgt)[:, None]).squeeze(1)
    torch.testing.assert_close(ours, torch.tensor(expected["log_probs"]), **FP32_TOLERANCE)
    assert TrainerState.from_dict(checkpoint.load_trainer_state(FIRST_LAYOUT)).step == 60


def test_a_checkpoint_of_the_first_layout_translates(tmp_path):
    copy = shutil.copytree(FIRST_LAYOUT, tmp_path / "checkpoint_v1")  # its conversion is made beside it, not in tests/
    result = run_cli(
        "mt-translate", "--checkpoint", str(copy), "--device", "cpu", input="a red apple\n\nTom sold it.\n"
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split("\n")) == 4  # three lines and the final newline


SAVE_A_MODEL = """
import torch
from mt_transformer import checkpoint
from mt_transformer.config import ModelConfig
from mt_transformer.model.transformer import Transformer
torch.manual_seed(0)
model = Transformer(ModelConfig(d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1), 50, 50, True)
checkpoint.write_model_dir(directory, checkpoint.model_tensors(model)[0], {"step": 1}, directory, [])
"""


def test_identical_weights_give_identical_files_in_any_process(tmp_path):
    # string hashing, and with it the order of sets, differs between processes unless
    # PYTHONHASHSEED is fixed: the model is saved here and in a process of another seed
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    with torch.random.fork_rng():
        exec(SAVE_A_MODEL, {"directory": str(here)})
    other_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    code = "import sys; directory = sys.argv[1]" + SAVE_A_MODEL
    subprocess.run([sys.executable, "-c", code, str(there)], env=subprocess_env(PYTHONHASHSEED=other_seed), check=True)
    for name in (checkpoint.MODEL_FILE, checkpoint.CONFIG_FILE):
        assert (here / name).read_bytes() == (there / name).read_bytes()


def test_tied_weights_are_stored_once_and_load_under_any_of_their_names(tmp_path):
    model = small_model()
    tensors, aliases = checkpoint.model_tensors(model)
    assert aliases == {
        "tgt_embed.embedding.weight": "src_embed.embedding.weight",
        "output.weight": "src_embed.embedding.weight",
    }
    renamed = {("output.weight" if name == "src_embed.embedding.weight" else name): t for name, t in tensors.items()}
    checkpoint.write_model_dir(str(tmp_path), renamed, {}, str(tmp_path), [])
    restored = small_model(seed=1)
    checkpoint.load_weights(restored, str(tmp_path))
    assert torch.equal(restored.src_embed.weight, model.src_embed.weight)


def test_identity_changes_with_the_files_and_not_with_what_is_made_beside_them(trained_run, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(checkpoint.resolve(trained_run), model, ignore=shutil.ignore_patterns("ctranslate2", ".*"))
    before = checkpoint.identity(str(model))
    assert checkpoint.identity(trained_run) != before  # another directory
    os.makedirs(model / "ctranslate2")  # a directory and a hidden file beside the weights
    (model / "ctranslate2" / "model.bin").write_bytes(b"x")
    (model / ".ctranslate2.lock").write_bytes(b"")
    assert checkpoint.identity(str(model)) == before
    weights = model / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert checkpoint.identity(str(model)) != before
