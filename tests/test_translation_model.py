"""The Python API: mt.load, translate, score and attention, against the translator and models
the commands use, and attention as bertviz renders it."""

import json
import os
import random

import pytest
import torch

import mt_transformer as mt
from conftest import ROOT, run_cli
from mt_transformer.errors import UserError

SENTENCES = ["I bought a red apple yesterday.", "", "Tom will sell 5 old cups tomorrow."]


@pytest.fixture(scope="module")
def model(trained_run):
    return mt.load(trained_run, device="cpu", beam_size=2)


def test_the_package_exports_its_api():
    assert set(mt.__all__) == {"load", "TranslationModel", "Translation", "__version__"}
    assert callable(mt.load) and mt.TranslationModel.__name__ == "TranslationModel"
    with pytest.raises(AttributeError):
        mt.no_such_thing  # noqa: B018


def test_translate_is_mt_translate(model, trained_run):
    cli = run_cli("mt-translate", "--checkpoint", trained_run, "--beam", "2", input="\n".join(SENTENCES) + "\n")
    assert cli.returncode == 0, cli.stderr
    assert model.translate(SENTENCES) == cli.stdout.splitlines()
    assert model.translate(SENTENCES[0]) == cli.stdout.splitlines()[0]
    assert model.translate([]) == []
    greedy = run_cli("mt-translate", "--checkpoint", trained_run, "--beam", "1", input=SENTENCES[2] + "\n")
    assert model.translate(SENTENCES[2], beam_size=1) == greedy.stdout.strip()
    assert model.settings.beam_size == 2  # a call's settings are its own


def test_n_best_gives_hypotheses_with_scores(model):
    best = model.translate(SENTENCES[0], n_best=2)
    assert len(best) == 2 and all(isinstance(h, mt.Translation) for h in best)
    assert best[0].score >= best[1].score and best[0].text == model.translate(SENTENCES[0])
    per_line = model.translate(SENTENCES, n_best=2)
    assert [len(h) for h in per_line] == [2, 1, 2] and per_line[1][0].text == ""


def test_score_ranks_the_models_translation_above_a_scrambled_one(model, corpus):
    source = open(f"{corpus}/test.en", encoding="utf-8").readline().strip()
    reference = open(f"{corpus}/test.de", encoding="utf-8").readline().split()
    scrambled = " ".join(random.Random(3).sample(reference, len(reference)))
    own = model.translate(source)
    assert model.score(source, own) > model.score(source, scrambled)
    both = model.score([source, source], [own, scrambled])
    # batched with another line, a sum of float32 log-probabilities moves in its last digits
    assert both == pytest.approx([model.score(source, own), model.score(source, scrambled)], rel=1e-5)
    with pytest.raises(UserError, match="two lists of equal length"):
        model.score([source], [own, own])


def test_attention_has_every_layer_and_head_in_bertviz_shapes(model):
    config = model.translator.config.model
    found = model.attention(SENTENCES[0])
    kinds = {"encoder_attention", "decoder_attention", "cross_attention"}
    assert set(found) == kinds | {"encoder_tokens", "decoder_tokens"}
    src, tgt = len(found["encoder_tokens"]), len(found["decoder_tokens"])
    assert found["encoder_tokens"][-1] == "</s>" and found["decoder_tokens"][0] == "<s>"
    pieces = model.translator.tokenizer.tgt_pieces(model.translate(SENTENCES[0], n_best=1)[0].tokens)
    assert found["decoder_tokens"][1:] == pieces  # the model's own translation
    shapes = {"encoder_attention": (src, src), "decoder_attention": (tgt, tgt), "cross_attention": (tgt, src)}
    for key, (queries, keys) in shapes.items():
        layers = found[key]
        assert len(layers) == (config.encoder_layers if key == "encoder_attention" else config.decoder_layers)
        for weights in layers:
            assert weights.shape == (1, config.n_heads, queries, keys)
            assert torch.allclose(weights.sum(-1), torch.ones(1, config.n_heads, queries), atol=1e-5)
    for weights in found["decoder_attention"]:  # causal: nothing above the diagonal
        assert torch.equal(weights.triu(1), torch.zeros_like(weights))
    given = model.attention(SENTENCES[0], "Ich habe gestern einen roten Apfel gekauft.")
    assert given["decoder_tokens"][1:] == model.translator.tokenizer.tgt_pieces(
        model.translator.tokenizer.encode_tgt(["Ich habe gestern einen roten Apfel gekauft."])[0]
    )


def test_bertviz_renders_the_attention(model):
    bertviz = pytest.importorskip("bertviz")
    found = model.attention(SENTENCES[2])
    for view in (bertviz.model_view, bertviz.head_view):
        html = view(**found, html_action="return").data
        for token in found["encoder_tokens"][:-1] + found["decoder_tokens"][1:]:
            assert json.dumps(token.replace("▁", " "))[1:-1] in html


def test_unknown_settings_and_attention_without_a_model_are_one_line_errors(trained_run, model):
    with pytest.raises(UserError, match="beam: not a decode setting"):
        mt.load(trained_run, beam=3)
    with pytest.raises(UserError, match="alhpa: not a decode setting"):
        model.translate("x", alhpa=1.0)
    ensemble = mt.load([trained_run, trained_run], device="cpu")
    with pytest.raises(UserError, match="attention: needs one model"):
        ensemble.attention("x")


def test_the_examples_of_docs_python_md_run(trained_run, capsys):
    """Every ```python block of docs/python.md, in order, in one namespace, on the test model."""
    import re

    text = open(os.path.join(ROOT, "docs", "python.md"), encoding="utf-8").read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert len(blocks) >= 5
    namespace = {}
    for block in blocks:
        exec(compile(block.replace('"runs/demo"', repr(trained_run)), "docs/python.md", "exec"), namespace)
    assert isinstance(namespace["m"], mt.TranslationModel) and namespace["found"]["cross_attention"]


DEMO_RUN = os.path.join(ROOT, "runs", "demo")


@pytest.mark.skipif(not os.path.isdir(os.path.join(DEMO_RUN, "checkpoints")), reason="needs make demo's runs/demo")
def test_the_demo_model_through_the_api():
    bertviz = pytest.importorskip("bertviz")
    m = mt.load(DEMO_RUN, device="cpu")
    source = "I bought 23 red apples on March 5."
    own = m.translate(source)
    assert own == "Ich habe am fünften März dreiundzwanzig rote Äpfel gekauft."
    words = own.split()
    scrambled = " ".join(words[::-1])
    assert m.score(source, own) > m.score(source, scrambled)
    html = bertviz.model_view(**m.attention(source), html_action="return").data
    assert json.dumps(" Äpfel")[1:-1] in html and " bought" in html


def test_an_export_directory_loads_with_ctranslate2(trained_run, tmp_path):
    from mt_transformer import checkpoint
    from mt_transformer.decoding import ctranslate2_export

    ctranslate2_export.export(checkpoint.load(trained_run, torch.device("cpu")), str(tmp_path / "ct2"))
    exported = mt.load(tmp_path / "ct2", device="cpu", beam_size=2)
    assert exported.translator.model is None  # CTranslate2 runs it, found by the directory's model.bin
    cli = run_cli(
        "mt-translate", "--checkpoint", str(tmp_path / "ct2"), "--engine", "ctranslate2", "--beam", "2",
        input="\n".join(SENTENCES) + "\n",
    )  # fmt: skip
    assert exported.translate(SENTENCES) == cli.stdout.splitlines()
    assert isinstance(exported.score(SENTENCES[0], "Ich habe einen Apfel gekauft."), float)
    with pytest.raises(UserError, match="attention: needs our engine, and this model is a CTranslate2 export"):
        exported.attention(SENTENCES[0])
