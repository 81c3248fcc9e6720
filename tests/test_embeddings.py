import math

import pytest
import torch

from mt_transformer.model.embeddings import (
    LearnedPositions,
    SinusoidalPositions,
    TokenEmbedding,
    fairseq_sinusoidal_encoding,
    sinusoidal_encoding,
)


def test_sinusoidal_values_follow_the_paper():
    d_model = 8
    table = sinusoidal_encoding(50, d_model)
    for pos in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert math.isclose(table[pos, 2 * i].item(), math.sin(angle), abs_tol=1e-5)
            assert math.isclose(table[pos, 2 * i + 1].item(), math.cos(angle), abs_tol=1e-5)


def test_sinusoidal_positions_grow_and_offset():
    positions = SinusoidalPositions(16, max_positions=4)
    long = positions(10)  # beyond the initial table
    assert long.shape == (10, 16)
    assert torch.allclose(positions(3, offset=5), sinusoidal_encoding(10, 16)[5:8])


def test_fairseq_sinusoid_is_m2m100s():
    """model.positions: fairseq computes what transformers' M2M100 (NLLB) adds to its embeddings:
    positions from padding index + 1, frequencies over d_model / 2 - 1, sines first."""
    m2m100 = pytest.importorskip("transformers.models.m2m_100.modeling_m2m_100")
    d_model, padding = 16, 1
    theirs = m2m100.M2M100SinusoidalPositionalEmbedding(64, d_model, padding)
    ids = torch.full((1, 30), 5)
    expected = theirs(ids)[0]  # (30, d_model): the positions of 30 tokens, none of them padding
    assert torch.allclose(fairseq_sinusoidal_encoding(30, d_model, first=padding + 1), expected, atol=1e-6)
    positions = SinusoidalPositions(d_model, 8, "fairseq")
    assert torch.allclose(positions(4, offset=20), expected[20:24], atol=1e-6)  # grown, and from an offset
    assert not torch.allclose(fairseq_sinusoidal_encoding(30, d_model), sinusoidal_encoding(30, d_model), atol=1e-2)


def test_learned_positions_refuse_beyond_the_table():
    positions = LearnedPositions(8, max_positions=4)
    assert positions(4).shape == (4, 8)
    try:
        positions(5)
    except ValueError as error:
        assert "max_positions" in str(error)
    else:
        raise AssertionError("expected ValueError")


def test_token_embedding_is_scaled_and_pad_is_zero():
    embedding = TokenEmbedding(10, 16, pad_id=0)
    tokens = torch.tensor([[3, 0]])
    out = embedding(tokens)
    assert torch.allclose(out[0, 0], embedding.weight[3] * 4.0)  # sqrt(16)
    assert torch.all(out[0, 1] == 0)
