"""Export to Hugging Face transformers: the same per-token log-probabilities for every supported
layout, the same greedy translations through generate(), the tokenizer's ids, and refusals."""

import dataclasses
import json
import os
import re
import sys

import pytest
import torch

from conftest import ROOT, perturbed_model, run_cli, translator
from mt_transformer import checkpoint
from mt_transformer.config import config_from_dict
from mt_transformer.data.sentencepiece_training import train_tokenizer
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.decoding.search import output_limit
from mt_transformer.errors import UserError
from mt_transformer.model.transformer import Transformer
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

transformers = pytest.importorskip("transformers")
from mt_transformer.exchange import huggingface_export, huggingface_layout  # noqa: E402

CPU = torch.device("cpu")


def lines(path: str, n: int) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()[:n]


@pytest.fixture(scope="module")
def separate_tokenizer(corpus, tmp_path_factory) -> Tokenizer:
    directory = tmp_path_factory.mktemp("separate")
    src, tgt = lines(f"{corpus}/train.en", 2000), lines(f"{corpus}/train.de", 2000)
    return train_tokenizer(str(directory), src, tgt, False, 150, "bpe", 1.0, 10_000, 1, False)


def random_model(loaded, tokenizer, **model_settings) -> checkpoint.LoadedModel:
    """A randomly initialised model of another layout with non-trivial norms and biases, so that
    a misplaced one shows."""
    config = dataclasses.replace(loaded.config, model=dataclasses.replace(loaded.config.model, **model_settings))
    model = perturbed_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, tokenizer.joint)
    return dataclasses.replace(loaded, model=model, tokenizer=tokenizer, config=config)


@pytest.mark.parametrize(
    "norm, tie, joint, activation, architecture",
    [
        ("post", True, True, "relu", "MarianMTModel"),  # one matrix for source, target and output
        ("post", True, False, "swish", "MarianMTModel"),  # separate vocabularies, output tied to the target's
        ("post", False, True, "gelu", "MarianMTModel"),  # three matrices
        ("pre", True, True, "swish", "PegasusForConditionalGeneration"),
    ],
)
def test_exported_model_gives_our_log_probabilities(
    trained_run, separate_tokenizer, corpus, tmp_path, norm, tie, joint, activation, architecture
):
    loaded = checkpoint.load(trained_run, CPU)
    tokenizer = loaded.tokenizer if joint else separate_tokenizer
    # the swish models also have an output bias (OPUS-MT's layout)
    settings = dict(norm=norm, tie_embeddings=tie, activation=activation, output_bias=activation == "swish")
    loaded = random_model(loaded, tokenizer, **settings)
    out = tmp_path / "hf"
    settings = huggingface_export.export(loaded, str(out))
    assert settings["architecture"] == architecture

    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out)).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    assert type(hf_model).__name__ == architecture
    sources, targets = lines(f"{corpus}/valid.en", 6), lines(f"{corpus}/valid.de", 6)
    batch = hf_tokenizer(sources, text_target=targets, padding=True, return_tensors="pt")
    # the tokenizer gives our ids: the source followed by EOS, the target followed by EOS
    src_ids, tgt_ids = tokenizer.encode_src(sources), tokenizer.tgt.encode(targets)
    assert [row[row != PAD_ID].tolist() for row in batch.input_ids] == [ids + [EOS_ID] for ids in src_ids]
    assert [row[row != PAD_ID].tolist() for row in batch.labels] == [ids + [EOS_ID] for ids in tgt_ids]

    labels = batch.labels  # (batch, tgt_len), padded with PAD_ID
    tgt_in = torch.cat([torch.full((labels.size(0), 1), BOS_ID), labels[:, :-1]], dim=1)
    tgt_in = tgt_in.masked_fill(tgt_in == EOS_ID, PAD_ID)
    with torch.inference_mode():
        ours = loaded.model.logits(loaded.model(batch.input_ids, tgt_in)).log_softmax(-1)
        theirs = hf_model(
            input_ids=batch.input_ids, attention_mask=batch.attention_mask, decoder_input_ids=tgt_in
        ).logits.log_softmax(-1)
    real = labels != PAD_ID  # (batch, tgt_len): the positions that predict a target token or EOS
    ours, theirs = ours.gather(2, labels[..., None])[real], theirs.gather(2, labels[..., None])[real]
    assert torch.allclose(theirs, ours, atol=1e-4), (theirs - ours).abs().max()
    assert settings["largest_log_prob_difference"] < 1e-4


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_the_weights_come_back_from_an_export_unchanged(trained_run, tmp_path, norm):
    loaded = checkpoint.load(trained_run, CPU)
    loaded = random_model(loaded, loaded.tokenizer, norm=norm, activation="swish", output_bias=True)
    huggingface_export.export(loaded, str(tmp_path / "hf"))
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")).eval()
    torch.manual_seed(1)  # other random weights, for the import to overwrite
    fresh = Transformer(loaded.config.model, loaded.tokenizer.src_vocab_size, loaded.tokenizer.tgt_vocab_size, True)
    huggingface_layout.from_transformers(hf_model, fresh, pre_norm=norm == "pre")
    expected, imported = loaded.model.state_dict(), fresh.state_dict()
    assert expected.keys() == imported.keys()
    for name, tensor in expected.items():
        assert torch.equal(imported[name], tensor), name


def test_greedy_generate_translates_like_mt_translate(trained_run, corpus, tmp_path):
    out = tmp_path / "hf"
    result = run_cli("mt-export", "--checkpoint", trained_run, "--format", "huggingface", str(out))
    assert result.returncode == 0, result.stderr
    assert {"config.json", "generation_config.json", "model.safetensors", "vocab.json", "source.spm"} <= set(
        os.listdir(out)
    )
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]  # no temporary directory left
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["num_beams"] == 2 and generation["decoder_start_token_id"] == BOS_ID  # the run's decode.beam_size

    sources = lines(f"{corpus}/test.en", 40)
    ours = translator(trained_run, beam_size=1)(sources)
    decode = checkpoint.load(trained_run, CPU).config.decode
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out)).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    for source, result in zip(sources, ours):
        inputs = hf_tokenizer([source], return_tensors="pt")
        source_len = inputs.input_ids.size(1) - 1  # without EOS
        limit = output_limit(source_len, decode, hf_model.config.max_position_embeddings)
        output = hf_model.generate(**inputs, num_beams=1, max_new_tokens=limit + 1)  # ours: limit, then EOS
        assert hf_tokenizer.decode(output[0], skip_special_tokens=True) == result[0].text


def test_target_language_tags_become_the_codes_the_tokenizer_splits_off(corpus, tmp_path):
    src, tgt = lines(f"{corpus}/train.en", 500), lines(f"{corpus}/train.de", 500)
    tokenizer = train_tokenizer(
        str(tmp_path / "tok"), src, tgt, True, 150, "bpe", 1.0, 10_000, 1, False, ["<2de>", "<2en>"]
    )
    config = config_from_dict({"data": {"src_lang": "en", "tgt_lang": "de"}})
    out = tmp_path / "hf"
    out.mkdir()
    huggingface_export.write_tokenizer(tokenizer, config, str(out), str(tmp_path))
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    vocab = json.loads((out / "vocab.json").read_text())
    assert vocab[">>de<<"] == tokenizer.tags["<2de>"] and "<2de>" not in vocab
    ours = tokenizer.encode_src(["<2de> " + src[0], "<2en> " + src[1]])
    theirs = hf_tokenizer([">>de<< " + src[0], ">>en<< " + src[1]]).input_ids
    assert theirs == [ids + [EOS_ID] for ids in ours]


@pytest.mark.parametrize(
    "settings, reason",
    [
        (dict(positions="learned"), "learned positions"),
        (dict(norm="pre", tie_embeddings=False), "separate embedding matrices"),
    ],
)
def test_a_layout_without_a_transformers_architecture_is_refused(trained_run, tmp_path, settings, reason):
    loaded = random_model(checkpoint.load(trained_run, CPU), checkpoint.load(trained_run, CPU).tokenizer, **settings)
    with pytest.raises(UserError, match=reason):
        huggingface_export.export(loaded, str(tmp_path / "hf"))
    assert not os.path.exists(tmp_path / "hf")


def test_an_export_that_computes_something_else_is_not_written(trained_run, tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_layout, "stream_order", lambda d: torch.arange(d))  # the sinusoid left interleaved
    with pytest.raises(UserError, match="differs from ours"):
        huggingface_export.export(checkpoint.load(trained_run, CPU), str(tmp_path / "hf"))
    assert not os.path.exists(tmp_path / "hf")


def test_without_transformers_the_export_is_a_one_line_error(trained_run, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` raises ImportError
    result = run_cli("mt-export", "--checkpoint", trained_run, "--format", "huggingface", str(tmp_path / "hf"))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: transformers is not installed: pip install transformers (or pip install 'mt_transformer[huggingface]')"
    )
    assert not os.path.exists(tmp_path / "hf")


def test_the_documented_snippet_translates(trained_run, corpus, tmp_path):
    with open(os.path.join(ROOT, "docs", "exports.md"), encoding="utf-8") as f:
        doc = f.read()
    snippet = re.search(r"```python\n(from transformers .*?)```", doc, re.S).group(1)
    out = tmp_path / "demo-hf"
    huggingface_export.export(checkpoint.load(trained_run, CPU), str(out))
    sources = lines(f"{corpus}/test.en", 1)
    code = snippet.replace("runs/demo-hf", str(out)).replace('"I bought 23 red apples on March 5."', repr(sources[0]))
    printed = []
    exec(code, {"print": printed.append})  # the documented lines as a user runs them
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out)).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    decode = checkpoint.load(trained_run, CPU).config.decode
    # the decode defaults of generation_config.json are in effect: the beam size, length penalty
    # and a limit of max_positions (the tiny model's outputs run past generate()'s own default of 20)
    output = hf_model.generate(
        **hf_tokenizer(sources, return_tensors="pt"),
        num_beams=decode.beam_size,
        length_penalty=decode.alpha,
        max_length=hf_model.config.max_position_embeddings,
    )
    assert printed == [hf_tokenizer.batch_decode(output, skip_special_tokens=True)]


@pytest.mark.skipif(
    int(transformers.__version__.split(".")[0]) >= 5, reason="transformers 5 removed the translation pipeline"
)
def test_the_translation_pipeline_of_transformers_4_translates_greedily_like_us(trained_run, corpus, tmp_path):
    out = tmp_path / "hf"
    huggingface_export.export(checkpoint.load(trained_run, CPU), str(out))
    # one output limit for every line on both sides: generate() has no per-sentence limit
    translate = transformers.pipeline("translation", model=str(out))
    sources = lines(f"{corpus}/test.en", 10)
    ours = translator(trained_run, beam_size=1, max_len_a=0.0, max_len_b=30)(sources)
    theirs = translate(sources, num_beams=1, max_new_tokens=31)
    assert [row["translation_text"] for row in theirs] == [r[0].text for r in ours]


def test_a_byte_fallback_vocabulary_exports_with_the_same_ids_texts_and_translations(trained_run, corpus, tmp_path):
    from mt_transformer.decoding.translator import torch_translator

    src, tgt = lines(f"{corpus}/train.en", 2000), lines(f"{corpus}/train.de", 2000)
    tokenizer = train_tokenizer(str(tmp_path / "tok"), src, tgt, True, 400, "bpe", 1.0, 10_000, 1, True)
    loaded = random_model(checkpoint.load(trained_run, CPU), tokenizer)
    out = tmp_path / "hf"
    huggingface_export.export(loaded, str(out))
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(str(out)).eval()
    unseen = ["Grüße aus Łódź 😀", "the red house 北京 ©", "Þórður sold it"]
    for line, ids in zip(unseen, tokenizer.encode_src(unseen)):
        assert any(tokenizer.src.is_byte(i) for i in ids)
        assert hf_tokenizer(line).input_ids == ids + [EOS_ID]
        assert hf_tokenizer.decode(ids, skip_special_tokens=True) == line == tokenizer.detokenize(ids, [])[0]
    config = dataclasses.replace(loaded.config, decode=dataclasses.replace(loaded.config.decode, beam_size=1))
    ours = torch_translator(loaded.model, tokenizer, config, CPU)(unseen)
    for line, result in zip(unseen, ours):
        inputs = hf_tokenizer([line], return_tensors="pt")
        limit = output_limit(inputs.input_ids.size(1) - 1, config.decode, hf_model.config.max_position_embeddings)
        output = hf_model.generate(**inputs, num_beams=1, max_new_tokens=limit + 1)[0].tolist()
        assert [i for i in output[1:] if i not in (PAD_ID, EOS_ID)] == result[0].tokens  # after the start token


def test_a_folded_source_exports_as_a_source_model_that_folds(trained_run, corpus, tmp_path):
    src, tgt = lines(f"{corpus}/train.en", 2000), lines(f"{corpus}/train.de", 2000)
    tokenizer = train_tokenizer(
        str(tmp_path / "tok"), src, tgt, True, 150, "unigram", 1.0, 10_000, 1, False, fold_source=True
    )
    loaded = random_model(checkpoint.load(trained_run, CPU), tokenizer)
    huggingface_export.export(loaded, str(tmp_path / "hf"))
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "hf"))
    (ids,) = tokenizer.encode_src(["the red house"])
    for line in ("the red house", "THE RED HOUSE", "The Red House"):
        assert hf_tokenizer(line).input_ids == ids + [EOS_ID]
    (target,) = tokenizer.encode_tgt(["Das rote Haus"])
    assert hf_tokenizer.decode(target, skip_special_tokens=True) == "Das rote Haus"
