"""Attention masks. Convention (the same as SDPA's boolean `attn_mask`): True means "may attend"."""

from __future__ import annotations

import torch


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Keys that are real tokens: (batch, len) -> (batch, 1, 1, len), broadcast over heads and queries."""
    return (tokens != pad_id)[:, None, None, :]
