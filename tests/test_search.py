"""The rules every search shares (decoding/search.py)."""

import platform

import pytest
import torch

from conftest import tiny_model
from mt_transformer.decoding import search
from mt_transformer.decoding.search import linear_weights_cast, output_projection


def small_model(**kwargs):
    torch.manual_seed(0)
    return tiny_model(40, 40, d_model=32, n_heads=4, d_ff=64, encoder_layers=1, decoder_layers=1, **kwargs).eval()


def test_the_search_projection_gives_the_model_logits():
    for model in (small_model(), small_model(tie_embeddings=False)):
        states = torch.randn(37, 32)
        project = output_projection(model)
        if torch.backends.mkldnn.is_available() and platform.machine().lower() in ("x86_64", "amd64"):
            assert project is not model.logits  # the packed weight is used, not a silent fallback
        with torch.inference_mode():
            # float32 sums of 32 products in another order: differences of about 1e-6
            torch.testing.assert_close(project(states), model.logits(states), rtol=1e-4, atol=1e-4)


def test_autocast_and_other_dtypes_keep_the_model_projection():
    model = small_model()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert output_projection(model) == model.logits
    assert output_projection(model.to(torch.bfloat16)) == model.logits


def test_weights_cast_once_give_the_autocast_products_and_the_parameters_come_back():
    for model in (small_model(), small_model(tie_embeddings=False)):
        parameters, output = dict(model.named_parameters()), model.output.weight
        src, tgt = torch.randint(4, 40, (3, 7)), torch.randint(4, 40, (3, 5))
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            expected = model.logits(model(src, tgt))
            with linear_weights_cast(model, torch.bfloat16):
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


def test_a_failing_onednn_operator_falls_back_to_the_model_projection(monkeypatch):
    def unsupported(*args):
        raise RuntimeError("not in this build")

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", unsupported)
    model = small_model()
    assert output_projection(model) == model.logits


def test_the_packed_weight_is_reused_until_the_weight_changes():
    model, states = small_model(), torch.randn(5, 32)
    with torch.inference_mode():
        first = output_projection(model)(states)
        packed = search._PACKED.get(model.output)
        output_projection(model)(states)
        assert search._PACKED.get(model.output) is packed  # None where nothing is packed: both None
    with torch.no_grad():
        model.output.weight.mul_(2.0)  # as an optimizer step changes it in place
    with torch.inference_mode():
        torch.testing.assert_close(output_projection(model)(states), 2 * first, rtol=1e-4, atol=1e-4)
    torch.manual_seed(1)
    other = tiny_model(40, 40, d_model=32, n_heads=4, d_ff=64, encoder_layers=1, decoder_layers=1).eval()
    model.load_state_dict(other.state_dict())  # as resuming and averaging load weights
    with torch.inference_mode():
        torch.testing.assert_close(output_projection(model)(states), other.logits(states), rtol=1e-4, atol=1e-4)
