"""The PyTorch search's model in half precision (decoding/torch_search.py)."""

import pytest
import torch

from conftest import tiny_model
from mt_transformer.decoding.torch_search import linears_in


@pytest.mark.parametrize("tied", [True, False])
def test_a_half_precision_copy_casts_the_linear_weights_only_and_gives_autocasts_products(tied):
    torch.manual_seed(0)
    model = tiny_model(60, 60, d_model=32, n_heads=4, d_ff=64, encoder_layers=1, decoder_layers=1, tie_embeddings=tied)
    model.eval()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    copy = linears_in(model, torch.bfloat16)
    assert copy.output.weight.dtype == copy.decoder[0].ffn.linear1.bias.dtype == torch.bfloat16
    assert copy.tgt_embed.weight.dtype == copy.decoder[0].norms[0].weight.dtype == torch.float32
    src, tgt = torch.randint(4, 60, (3, 7)), torch.randint(4, 60, (3, 5))
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(copy.logits(copy(src, tgt)), model.logits(model(src, tgt)))  # bit for bit
    for name, p in model.named_parameters():  # the model itself is untouched
        assert p.dtype == torch.float32 and torch.equal(p, before[name]), name
