"""The linear layers' weights as a search runs them (decoding/weights.py)."""

import platform

import pytest
import torch

from conftest import tiny_model
from mt_transformer.decoding import weights
from mt_transformer.decoding.weights import linear_weights_cast, prepared_linears, quantize_per_channel

X86_ONEDNN = torch.backends.mkldnn.is_available() and platform.machine().lower() in ("x86_64", "amd64")


def small_model(d_model=32, **kwargs):
    torch.manual_seed(0)
    return tiny_model(
        600, 600, d_model=d_model, n_heads=4, d_ff=4 * d_model, encoder_layers=1, decoder_layers=1, **kwargs
    ).eval()


def test_fp32_packs_the_large_weights_and_gives_the_model_products():
    model = small_model(d_model=256)  # the output projection (600 x 256) and the FFN (1024 x 256) are large
    src, tgt = torch.randint(4, 600, (3, 7)), torch.randint(4, 600, (3, 5))
    with torch.inference_mode():
        expected = model.logits(model(src, tgt))
        with prepared_linears(model, "fp32"):
            replaced = {name for name, m in model.named_modules() if "forward" in vars(m)}
            packed = model.logits(model(src, tgt))
    if X86_ONEDNN:  # the packed product is used, not a silent fallback; small weights keep the plain one
        assert {"output", "decoder.0.ffn.linear1", "decoder.0.ffn.linear2"} <= replaced
        assert "decoder.0.self_attn.q_proj" not in replaced
    # float32 sums of the same products in another order: differences of about 1e-6
    torch.testing.assert_close(packed, expected, rtol=1e-4, atol=1e-4)
    assert not any("forward" in vars(m) for m in model.modules())  # the layers are the model's again


def test_int8_weights_round_each_row_to_its_scale_and_stay_close_to_fp32():
    weight = torch.randn(64, 48)
    values, scale = quantize_per_channel(weight)
    assert values.dtype == torch.int8 and values.abs().amax(dim=1).eq(127).all()
    assert (values.float() * scale[:, None] - weight).abs().le(scale[:, None] / 2 + 1e-6).all()
    model = small_model(d_model=256)
    src, tgt = torch.randint(4, 600, (3, 7)), torch.randint(4, 600, (3, 5))
    with torch.inference_mode():
        expected = model.logits(model(src, tgt)).log_softmax(-1)
        with prepared_linears(model, "int8"):
            replaced = {name for name, m in model.named_modules() if "forward" in vars(m)}
            quantized = model.logits(model(src, tgt)).log_softmax(-1)
    assert {"output", "decoder.0.ffn.linear1", "encoder.0.ffn.linear2"} <= replaced
    assert "decoder.0.self_attn.q_proj" not in replaced  # small: its plain product is faster
    gap = (quantized - expected).abs()
    assert 0 < gap.mean() < 0.05 and gap.max() < 0.5  # quantized (8-bit weights, 7-bit inputs), and close
    assert not any("forward" in vars(m) for m in model.modules())


def test_the_layers_come_back_after_an_exception():
    model = small_model(d_model=256)
    with pytest.raises(KeyboardInterrupt), prepared_linears(model, "int8"):
        raise KeyboardInterrupt
    assert not any("forward" in vars(m) for m in model.modules())


def test_weights_cast_once_give_the_autocast_products_and_the_parameters_come_back():
    for model in (small_model(), small_model(tie_embeddings=False)):
        parameters, output = dict(model.named_parameters()), model.output.weight
        src, tgt = torch.randint(4, 40, (3, 7)), torch.randint(4, 40, (3, 5))
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            expected = model.logits(model(src, tgt))
            with prepared_linears(model, "bf16"):
                assert model.output.weight.dtype == torch.bfloat16
                assert model.tgt_embed.weight.dtype == torch.float32  # a tied embedding is not cast
                cast = model.logits(model(src, tgt))
        assert torch.equal(cast, expected)  # autocast's own products, bit for bit
        assert all(parameter is parameters[name] for name, parameter in model.named_parameters())
        with pytest.raises(KeyboardInterrupt), linear_weights_cast(model, torch.bfloat16):
            raise KeyboardInterrupt
        assert all(parameter is parameters[name] for name, parameter in model.named_parameters())
        with linear_weights_cast(model, torch.float32):
            assert model.output.weight is output


def test_a_failing_onednn_operator_keeps_the_plain_product(monkeypatch):
    def unsupported(*args):
        raise RuntimeError("not in this build")

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", unsupported)
    model = small_model(d_model=256)
    with prepared_linears(model, "fp32"):
        assert not any("forward" in vars(m) for m in model.modules())


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_prepared_weight_is_reused_until_the_weight_changes(precision):
    model, states = small_model(d_model=256), torch.randn(5, 256)

    def logits(m):
        with torch.inference_mode(), prepared_linears(m, precision):
            return m.logits(states)

    logits(model)
    prepared = weights._PREPARED.get(model.output)
    logits(model)
    assert weights._PREPARED.get(model.output) is prepared  # None where nothing is packed: both None
    other = small_model(d_model=256)
    with torch.no_grad():
        model.output.weight.mul_(2.0)  # as an optimizer step changes it in place
        other.output.weight.mul_(2.0)
    torch.testing.assert_close(logits(model), logits(other), rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.1)
    model.load_state_dict(other.state_dict())  # as resuming and averaging load weights
    torch.testing.assert_close(logits(model), logits(other), rtol=1e-6, atol=1e-6)
