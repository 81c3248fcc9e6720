"""Counted FLOPs against PyTorch's own FLOP counter on the real model."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from conftest import tiny_model
from mt_transformer.model import attention
from mt_transformer.model.flops import forward_flops, training_flops


def math_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
    """SDPA written out, so that the FLOP counter sees its two matrix products (it does not count
    the CPU flash kernel)."""
    return attention.attention_with_weights(q, k, v, attn_mask, is_causal, dropout_p)[0]


@pytest.mark.parametrize("src_len,tgt_len,batch", [(7, 5, 3), (1, 1, 1), (12, 20, 2)])
def test_forward_flops_match_the_flop_counter(monkeypatch, src_len, tgt_len, batch):
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", math_attention)
    model = tiny_model(100, 100, d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=3).eval()
    src = torch.randint(4, 100, (batch, src_len))  # no padding: every position is a real token
    tgt = torch.randint(4, 100, (batch, tgt_len))
    with FlopCounterMode(display=False) as counter:
        model.logits(model(src, tgt))
    expected = forward_flops([src_len] * batch, [tgt_len] * batch, 32, 64, 2, 3, 100)
    assert counter.get_total_flops() == expected


def test_training_flops_of_the_peers_model_are_about_46_mflop_per_target_token():
    # 4,096 target tokens in sentences of 16, sources as long: the figure docs/benchmarks.md uses
    flops = training_flops([16] * 256, [16] * 256, 256, 1024, 3, 3, 8000)
    assert 44e6 < flops / 4096 < 48e6
