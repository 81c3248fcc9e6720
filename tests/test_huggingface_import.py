"""Importing transformers models: the model settings of a Marian or Pegasus config, and a one-line
refusal for what we do not model."""

import dataclasses

import pytest
import torch

from conftest import perturbed_model
from mt_transformer import checkpoint
from mt_transformer.errors import UserError

transformers = pytest.importorskip("transformers")
from mt_transformer.decoding import huggingface_export, huggingface_layout  # noqa: E402
from mt_transformer.decoding.huggingface_import import import_model, model_config  # noqa: E402

CPU = torch.device("cpu")

# the fields an OPUS-MT model's config.json holds (Helsinki-NLP/opus-mt-*), sizes made small
OPUS_MT = dict(
    vocab_size=101,
    decoder_vocab_size=101,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    activation_function="swish",
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    max_position_embeddings=512,
    scale_embedding=True,
    share_encoder_decoder_embeddings=True,
    static_position_embeddings=True,
    add_bias_logits=False,
    add_final_layer_norm=False,
    normalize_before=False,
    normalize_embedding=False,
    encoder_layerdrop=0.0,
    decoder_layerdrop=0.0,
    pad_token_id=100,
    eos_token_id=0,
    decoder_start_token_id=100,
)


def test_an_opus_mt_config_is_a_post_norm_swish_model():
    settings = model_config(transformers.MarianConfig(**OPUS_MT))
    assert (settings.norm, settings.positions, settings.activation) == ("post", "sinusoidal", "swish")
    assert (settings.d_model, settings.n_heads, settings.d_ff) == (16, 2, 32)
    assert (settings.encoder_layers, settings.decoder_layers, settings.max_positions) == (2, 2, 512)
    assert (settings.dropout, settings.attention_dropout, settings.tie_embeddings) == (0.1, 0.0, True)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_the_config_of_our_export_gives_our_model_settings(trained_run, norm):
    loaded = checkpoint.load(trained_run, CPU)
    ours = dataclasses.replace(loaded.config.model, norm=norm, activation="gelu")
    loaded = dataclasses.replace(loaded, config=dataclasses.replace(loaded.config, model=ours))
    hf_config = huggingface_export.hf_config(loaded, "marian" if norm == "post" else "pegasus")
    assert model_config(hf_config) == ours


@pytest.mark.parametrize(
    "change, says",
    [
        (
            dict(activation_function="tanh"),
            "activation_function: 'tanh' is not modelled here (only gelu, relu, silu, swish)",
        ),
        (
            dict(decoder_ffn_dim=64),
            "decoder_ffn_dim: 64 differs from encoder_ffn_dim (32); our encoder and decoder have one size",
        ),
        (dict(activation_dropout=0.1), "activation_dropout: 0.1 is not modelled here (only 0.0 is)"),
        (dict(normalize_embedding=True), "normalize_embedding: True is not modelled here (only False is)"),
        (dict(scale_embedding=False), "scale_embedding: False is not modelled here (only True is)"),
    ],
)
def test_a_field_we_do_not_model_is_refused_by_name(change, says):
    with pytest.raises(UserError) as refusal:
        model_config(transformers.MarianConfig(**{**OPUS_MT, **change}))
    assert str(refusal.value) == says


def test_a_model_other_than_marian_or_pegasus_is_refused():
    with pytest.raises(UserError, match=r"^model_type: 'bart': only Marian and Pegasus models can be imported$"):
        model_config(transformers.BartConfig())


@pytest.mark.parametrize("norm, tie", [("post", True), ("post", False), ("pre", True)])
def test_an_export_imports_to_the_same_model(trained_run, tmp_path, norm, tie):
    loaded = checkpoint.load(trained_run, CPU)
    settings = dict(norm=norm, tie_embeddings=tie, activation="swish", output_bias=True)
    ours = dataclasses.replace(loaded.config.model, **settings)
    loaded = dataclasses.replace(loaded, config=dataclasses.replace(loaded.config, model=ours))
    original = perturbed_model(ours, loaded.tokenizer.src_vocab_size, loaded.tokenizer.tgt_vocab_size, True)
    huggingface_export.export(dataclasses.replace(loaded, model=original), str(tmp_path / "hf"))
    model, config = import_model(transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")))
    assert config == ours
    expected, imported = original.state_dict(), model.state_dict()
    assert expected.keys() == imported.keys()
    assert all(torch.equal(imported[name], tensor) for name, tensor in expected.items())


def test_an_opus_mt_shaped_model_imports_with_its_output_bias():
    torch.manual_seed(0)
    hf_model = transformers.MarianMTModel(transformers.MarianConfig(**OPUS_MT)).eval()
    with torch.no_grad():
        hf_model.final_logits_bias.normal_()  # OPUS-MT's output layer has a bias
    model, config = import_model(hf_model)  # refused if the log-probabilities differ
    assert config.output_bias and config.activation == "swish"
    assert torch.equal(model.output.bias, hf_model.final_logits_bias[0])


def test_an_import_that_computes_something_else_is_refused(monkeypatch):
    torch.manual_seed(0)
    hf_model = transformers.MarianMTModel(transformers.MarianConfig(**OPUS_MT)).eval()
    monkeypatch.setattr(
        huggingface_layout, "stream_order", lambda d: torch.arange(d)
    )  # the sinusoid left in their order
    with pytest.raises(UserError, match=r"^the imported model differs from the original by .* in log-probability$"):
        import_model(hf_model)
