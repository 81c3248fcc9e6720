"""Token embeddings scaled by sqrt(d_model) and position encodings (paper section 3.4, 3.5)."""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_encoding(length: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    Returns (length, d_model).
    """
    position = torch.arange(length, dtype=torch.float32)[:, None]  # (length, 1)
    inverse_freq = torch.exp(
        torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model)
    )  # (d_model / 2,)
    encoding = torch.zeros(length, d_model)
    encoding[:, 0::2] = torch.sin(position * inverse_freq)
    encoding[:, 1::2] = torch.cos(position * inverse_freq)
    return encoding


def fairseq_sinusoidal_encoding(length: int, d_model: int, first: int = 2) -> torch.Tensor:
    """fairseq's sinusoid (M2M100's and NLLB's): for i < h = d_model / 2, sin(pos * 10000^(-i / (h - 1)))
    in the first half of the vector and cos in the second, positions counted from `first` (its
    padding index + 1), not the paper's 10000^(-2i / d_model) interleaved from 0.

    Returns (length, d_model).
    """
    half = d_model // 2
    position = torch.arange(first, first + length, dtype=torch.float32)[:, None]  # (length, 1)
    inverse_freq = torch.exp(torch.arange(half, dtype=torch.float32) * (-math.log(10000.0) / (half - 1)))  # (h,)
    angles = position * inverse_freq  # (length, h)
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)


ENCODINGS = {"sinusoidal": sinusoidal_encoding, "fairseq": fairseq_sinusoidal_encoding}


class SinusoidalPositions(nn.Module):
    """Fixed encodings (`kind`: the paper's or fairseq's), grown on demand, so any input length works."""

    def __init__(self, d_model: int, max_positions: int, kind: str = "sinusoidal"):
        super().__init__()
        self.d_model, self.encoding = d_model, ENCODINGS[kind]
        self.register_buffer("table", self.encoding(max_positions, d_model), persistent=False)

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        """Encodings of positions offset .. offset+length-1: (length, d_model)."""
        if offset + length > self.table.size(0):
            self.table = self.encoding(2 * (offset + length), self.d_model).to(self.table.device)
        return self.table[offset : offset + length]


class LearnedPositions(nn.Module):
    def __init__(self, d_model: int, max_positions: int):
        super().__init__()
        self.embedding = nn.Embedding(max_positions, d_model)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d_model**-0.5)

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        if offset + length > self.embedding.num_embeddings:
            raise ValueError(f"position {offset + length - 1} exceeds max_positions={self.embedding.num_embeddings}")
        positions = torch.arange(offset, offset + length, device=self.embedding.weight.device)
        return self.embedding(positions)


class TokenEmbedding(nn.Module):
    """Embedding lookup multiplied by sqrt(d_model) (section 3.4)."""

    def __init__(self, vocab_size: int, d_model: int, pad_id: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=pad_id)
        self.scale = math.sqrt(d_model)
        # std d_model^-0.5 so that scaled embeddings start with unit variance (as fairseq)
        nn.init.normal_(self.embedding.weight, mean=0.0, std=d_model**-0.5)
        with torch.no_grad():
            self.embedding.weight[pad_id].zero_()

    @property
    def weight(self) -> nn.Parameter:
        return self.embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embedding(tokens) * self.scale  # (batch, len) -> (batch, len, d_model)
