"""model/lora.py: adapters that start at the base model, train alone, and merge into it."""

import pytest
import torch
from torch import nn

from conftest import tiny_model
from mt_transformer.model import lora


def logits(model, src, tgt):
    with torch.no_grad():
        return model.logits(model(src, tgt))


def test_adapters_start_at_the_base_and_merge_into_the_same_model():
    torch.manual_seed(0)
    base = tiny_model(50, 50, d_model=16, n_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2).eval()
    adapted = tiny_model(50, 50, d_model=16, n_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2).eval()
    adapted.load_state_dict(base.state_dict())
    names = lora.add_adapters(adapted, rank=4, alpha=8.0, targets=("q_proj", "linear2"))
    # self- and cross-attention's q_proj in each layer, one FFN each: 2 + 2 * 2 + 2 + 2
    assert len(names) == 10 and "decoder.1.cross_attn.q_proj" in names and "encoder.0.ffn.linear2" in names
    assert all(p.requires_grad == (n.rsplit(".", 1)[-1] in lora.ADAPTER_NAMES) for n, p in adapted.named_parameters())
    src, tgt = torch.randint(4, 50, (3, 7)), torch.randint(4, 50, (3, 5))
    torch.testing.assert_close(logits(adapted, src, tgt), logits(base, src, tgt), rtol=0, atol=0)  # B = 0

    with torch.no_grad():
        for name, parameter in adapted.named_parameters():
            if name.endswith("lora_b"):
                parameter.normal_(0, 0.5)
    assert not torch.allclose(logits(adapted, src, tgt), logits(base, src, tgt), atol=1e-2)
    tensors = lora.adapter_tensors(adapted)
    assert len(tensors) == 2 * len(names)
    merged = tiny_model(50, 50, d_model=16, n_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2).eval()
    merged.load_state_dict(lora.merged(base.state_dict(), tensors, scale=8.0 / 4))
    torch.testing.assert_close(logits(merged, src, tgt), logits(adapted, src, tgt), rtol=0, atol=1e-4)


def test_the_adapters_alone_get_gradients():
    layer = nn.Linear(6, 4)
    module = nn.Sequential()
    module.add_module("out_proj", layer)
    lora.add_adapters(module, rank=2, alpha=2.0, targets=("out_proj",))
    adapted = module.out_proj
    assert isinstance(adapted, lora.LoRALinear) and adapted.weight is layer.weight
    adapted(torch.randn(3, 6)).pow(2).sum().backward()
    assert layer.weight.grad is None and layer.bias.grad is None
    assert adapted.lora_a.grad is not None and adapted.lora_b.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="no linear layer is named any of linear1"):
        lora.add_adapters(nn.Sequential(), rank=2, alpha=2.0, targets=("linear1",))


def test_merging_keeps_the_weights_dtype():
    weights = {"l.weight": torch.ones(3, 2, dtype=torch.bfloat16)}
    adapters = {"l.lora_a": torch.ones(1, 2), "l.lora_b": torch.full((3, 1), 0.5)}
    out = lora.merged(weights, adapters, scale=2.0)["l.weight"]
    assert out.dtype == torch.bfloat16 and torch.equal(out, torch.full((3, 2), 2.0, dtype=torch.bfloat16))


def test_the_layers_the_config_offers_are_the_models_linear_layers_less_its_tied_output():
    from torch import nn

    from conftest import tiny_model
    from mt_transformer.config import LoraConfig

    model = tiny_model(50, 50)
    linear = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if type(module) is nn.Linear}
    assert linear == {*LoraConfig.LAYERS, "output"}
