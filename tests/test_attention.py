import math

import torch

from conftest import FP32_TOLERANCE
from mt_transformer.model.attention import MultiHeadAttention, attention_with_weights
from mt_transformer.model.dropout import cpu_dropout
from mt_transformer.model.masks import padding_mask


def reference_attention(q, k, v, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V written with plain loops over batch and heads."""
    out = torch.zeros_like(q)
    for b in range(q.size(0)):
        for h in range(q.size(1)):
            scores = q[b, h] @ k[b, h].T / math.sqrt(q.size(-1))
            if mask is not None:
                m = mask.expand(q.size(0), q.size(1), q.size(2), k.size(2))[b, h]
                scores = scores.masked_fill(~m, float("-inf"))
            out[b, h] = torch.softmax(scores, dim=-1) @ v[b, h]
    return out


def test_explicit_path_matches_plain_softmax():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 8)
    mask = padding_mask(torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]]), 0)
    out, weights = attention_with_weights(q, k, v, mask)
    assert torch.allclose(out, reference_attention(q, k, v, mask), **FP32_TOLERANCE)
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 4))
    assert torch.all(weights[0, :, :, 4:] == 0)  # padded keys get no weight


def test_sdpa_and_explicit_paths_agree_with_masks():
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    src_mask = padding_mask(torch.tensor([[1] * 7, [1] * 4 + [0] * 3]), 0)
    k, v = attention.project_kv(memory)
    fast, none = attention(x, k, v, mask=src_mask)
    slow, weights = attention(x, k, v, mask=src_mask, need_weights=True)
    assert none is None and weights.shape == (2, 4, 5, 7)
    assert torch.allclose(fast, slow, **FP32_TOLERANCE)
    assert torch.all(weights[1, :, :, 4:] == 0)


def test_causal_attention_ignores_the_future():
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4).eval()
    x = torch.randn(1, 6, 16)
    k, v = attention.project_kv(x)
    causal, weights = attention(x, k, v, is_causal=True, need_weights=True)
    fast, _ = attention(x, k, v, is_causal=True)
    assert torch.allclose(causal, fast, **FP32_TOLERANCE)
    assert torch.all(weights[0, :, ~torch.ones(6, 6, dtype=torch.bool).tril()] == 0)
    # changing a later position leaves earlier outputs unchanged
    x2 = x.clone()
    x2[0, 4:] += 1.0
    k2, v2 = attention.project_kv(x2)
    changed, _ = attention(x2, k2, v2, is_causal=True)
    assert torch.allclose(changed[0, :4], fast[0, :4], **FP32_TOLERANCE)


def test_attention_dropout_on_cpu_drops_attention_weights():
    # in training with attention dropout, CPU attention is the written-out equation with the
    # weights passed through cpu_dropout; reproduce it from the same seed
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4, dropout=0.5).train()
    x = torch.randn(2, 5, 16)
    mask = padding_mask(torch.tensor([[1] * 5, [1] * 3 + [0] * 2]), 0)
    k, v = attention.project_kv(x)
    torch.manual_seed(1)
    out, _ = attention(x, k, v, mask=mask, is_causal=True)

    q = attention._split_heads(attention.q_proj(x))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    allowed = mask & torch.ones(5, 5, dtype=torch.bool).tril()
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    torch.manual_seed(1)
    dropped = cpu_dropout(weights, 0.5)
    assert (dropped == 0).any() and (dropped[weights > 0] != 0).any()
    expected = attention.out_proj((dropped @ v).transpose(1, 2).reshape(2, 5, 16))
    assert torch.allclose(out, expected, **FP32_TOLERANCE)
    # at evaluation the same module attends without dropout
    attention.eval()
    evaluated, _ = attention(x, k, v, mask=mask, is_causal=True)
    assert torch.allclose(evaluated, reference_causal(attention, x, k, v, mask), **FP32_TOLERANCE)


def reference_causal(attention, x, k, v, mask):
    q = attention._split_heads(attention.q_proj(x))
    allowed = mask & torch.ones(x.size(1), x.size(1), dtype=torch.bool).tril()
    out = reference_attention(q, k, v, allowed)
    return attention.out_proj(out.transpose(1, 2).reshape(x.shape))


def test_bf16_attention_on_cpu_is_the_written_out_equation():
    # SDPA's CPU kernel is slower in bf16 than in fp32; the written-out equation runs its
    # products on the bf16 units and keeps the softmax in float32
    torch.manual_seed(0)
    attention = MultiHeadAttention(16, 4).train()
    x = torch.randn(2, 12, 16)
    mask = padding_mask(torch.tensor([[1] * 12, [1] * 9 + [0] * 3]), 0)
    for is_causal, key_mask in ((True, None), (False, mask)):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            k, v = attention.project_kv(x)
            out, _ = attention(x, k, v, mask=key_mask, is_causal=is_causal)
            q = attention._split_heads(attention.q_proj(x))
            written = attention_with_weights(q, k, v, key_mask, is_causal)[0]
            expected = attention.out_proj(written.transpose(1, 2).reshape(2, 12, 16))
        assert out.dtype == torch.bfloat16 and torch.equal(out, expected)
        full = attention(x, *attention.project_kv(x), mask=key_mask, is_causal=is_causal)[0]
        assert (out.float() - full).abs().max() < 0.05 * full.abs().max()  # bf16 keeps 8 bits
