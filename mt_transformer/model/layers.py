"""Encoder and decoder layers (paper section 3.1, 3.3) and the decoder's key/value cache.

Each sub-layer is wrapped in a residual connection and layer normalization:
    post-norm (the paper):  x = LayerNorm(x + Dropout(Sublayer(x)))
    pre-norm (option):      x = x + Dropout(Sublayer(LayerNorm(x)))
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mt_transformer.config import ModelConfig
from mt_transformer.model.attention import MultiHeadAttention
from mt_transformer.model.dropout import Dropout

# model.activation: the paper's max(0, x), or x * sigmoid(x) (swish, as OPUS-MT's Marian models), or GELU
ACTIVATIONS = {"relu": torch.relu, "swish": nn.functional.silu, "gelu": nn.functional.gelu}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (section 3.3), with swish or GELU in place of max(0, .)
    as model.activation says."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", init: str = "xavier"):
        super().__init__()
        # init fairseq keeps PyTorch's default, U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and
        # biases, as fairseq does: W_2's entries under half a Xavier draw's
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.activation = ACTIVATIONS[activation]
        if init == "xavier":
            for linear in (self.linear1, self.linear2):
                nn.init.xavier_uniform_(linear.weight)
                nn.init.zeros_(linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.activation(self.linear1(x)))  # (batch, len, d_model)


class _ResidualLayer(nn.Module):
    def __init__(self, c: ModelConfig, n_sublayers: int):
        super().__init__()
        self.pre_norm = c.norm == "pre"
        self.dropout = Dropout(c.dropout)
        self.norms = nn.ModuleList(nn.LayerNorm(c.d_model) for _ in range(n_sublayers))

    def _input(self, x: torch.Tensor, i: int) -> torch.Tensor:
        return self.norms[i](x) if self.pre_norm else x

    def _residual(self, x: torch.Tensor, y: torch.Tensor, i: int) -> torch.Tensor:
        x = x + self.dropout(y)
        return x if self.pre_norm else self.norms[i](x)


class EncoderLayer(_ResidualLayer):
    def __init__(self, c: ModelConfig):
        super().__init__(c, n_sublayers=2)
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout, c.init)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.activation, c.init)

    def forward(self, x: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """x: (batch, src_len, d_model); src_mask: (batch, 1, 1, src_len)."""
        h = self._input(x, 0)
        y, _ = self.self_attn(h, *self.self_attn.project_kv(h), mask=src_mask)
        x = self._residual(x, y, 0)
        return self._residual(x, self.ffn(self._input(x, 1)), 1)


@dataclass
class LayerCache:
    """One decoder layer's keys/values, each (batch, heads, len, head_dim)."""

    self_k: torch.Tensor | None = None  # grows by one position per decoding step
    self_v: torch.Tensor | None = None
    cross_k: torch.Tensor | None = None  # projected from the encoder output once
    cross_v: torch.Tensor | None = None


class DecoderLayer(_ResidualLayer):
    def __init__(self, c: ModelConfig):
        super().__init__(c, n_sublayers=3)
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout, c.init)
        self.cross_attn = MultiHeadAttention(c.d_model, c.n_heads, c.attention_dropout, c.init)
        self.ffn = FeedForward(c.d_model, c.d_ff, c.activation, c.init)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """x: (batch, tgt_len, d_model), memory: (batch, src_len, d_model), src_mask: (batch, 1, 1, src_len).

        With a cache, x holds only the newest position(s) and earlier keys/values come from the cache.
        Returns x and, if need_weights, the cross-attention weights (batch, heads, tgt_len, src_len).
        """
        h = self._input(x, 0)
        k, v = self.self_attn.project_kv(h)  # (batch, heads, tgt_len, head_dim)
        if cache is not None:
            if cache.self_k is not None:
                if x.size(1) != 1:
                    raise ValueError("a filled decoder cache takes one new position per step")
                k, v = torch.cat([cache.self_k, k], dim=2), torch.cat([cache.self_v, v], dim=2)
            cache.self_k, cache.self_v = k, v
        # the causal mask is only needed when several new positions are fed at once
        y, _ = self.self_attn(h, k, v, is_causal=x.size(1) > 1)
        x = self._residual(x, y, 0)

        h = self._input(x, 1)
        if cache is not None and cache.cross_k is not None:
            k, v = cache.cross_k, cache.cross_v
        else:
            k, v = self.cross_attn.project_kv(memory)  # (batch, heads, src_len, head_dim)
            if cache is not None:  # made contiguous once, or every step's matrix products copy them
                k, v = k.contiguous(), v.contiguous()
                cache.cross_k, cache.cross_v = k, v
        y, weights = self.cross_attn(h, k, v, mask=src_mask, need_weights=need_weights)
        x = self._residual(x, y, 1)
        return self._residual(x, self.ffn(self._input(x, 2)), 2), weights
