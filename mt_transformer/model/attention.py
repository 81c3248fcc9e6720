"""Scaled dot-product and multi-head attention (paper section 3.2).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

`attend` chooses how the equation is computed (docs/benchmarks.md measures each choice):
`F.scaled_dot_product_attention` for training's long sequences in fp32 and for the few
(sentence, head, query) triples of a decoding step; on the CPU the equation written out
(`attention_with_weights`) for the rest of decoding, for bf16/fp16 (whose products then run on
the CPU's bf16 units) and with attention dropout; written out too wherever the weights are wanted.
Shapes: batch, heads, q_len (queries), k_len (keys), head_dim = d_model / heads.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mt_transformer.model.dropout import apply_dropout


def attention_with_weights(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt(d_k)) v, also returning the weights (batch, heads, q_len, k_len).

    mask: bool, True = may attend, broadcastable to (batch, heads, q_len, k_len).
    """
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (batch, heads, q_len, k_len)
    if is_causal:
        causal = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    # the softmax in float32 whatever the products' precision; the weights then take v's
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(v.dtype)
    output = apply_dropout(weights, dropout) @ v  # (batch, heads, q_len, head_dim)
    return output, weights


SHORT_QUERIES = 8  # up to this many queries per row, CPU attention may take the written-out path
# SDPA's CPU kernel works through the (sentence, head) pairs one query at a time: the fastest while
# sentences x heads x queries^2 is at most this, slower than the written-out products beyond
SDPA_WORK = 64


def attend(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, is_causal: bool, dropout: float
) -> torch.Tensor:
    """Attention(Q, K, V) of q (batch, heads, q_len, head_dim) over k, v (batch, heads, k_len,
    head_dim): (batch, heads, q_len, head_dim), by the path that is fastest for its shape."""
    batch, heads, q_len, _ = q.shape
    if q.device.type == "cpu":
        few = q_len <= SHORT_QUERIES and not is_causal
        if dropout == 0.0 and few and batch * heads * q_len * q_len <= SDPA_WORK:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if dropout > 0.0 or q.dtype != torch.float32 or few:
            return attention_with_weights(q, k, v, mask, is_causal, dropout)[0]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal)


class MultiHeadAttention(nn.Module):
    """One module for self- and cross-attention: keys/values are projected by `project_kv`,
    so the decoder can cache them (self-attention: appended per step; cross: once per sentence)."""

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, init: str = "xavier"):
        super().__init__()
        self.n_heads, self.head_dim, self.dropout = n_heads, d_model // n_heads, dropout
        self.q_proj = nn.Linear(d_model, d_model)  # W^Q for all heads
        self.kv_proj = nn.Linear(d_model, 2 * d_model)  # W^K and W^V for all heads, one matmul
        self.out_proj = nn.Linear(d_model, d_model)  # W^O
        if init == "fairseq":  # W^Q, W^K, W^V each as its own d_model x d_model matrix, gain 1/sqrt(2)
            nn.init.xavier_uniform_(self.q_proj.weight, gain=2**-0.5)
            for w in self.kv_proj.weight.data.chunk(2):  # (d_model, d_model) views: W^K, W^V
                nn.init.xavier_uniform_(w, gain=2**-0.5)
        else:
            nn.init.xavier_uniform_(self.q_proj.weight)
            nn.init.xavier_uniform_(self.kv_proj.weight)
        nn.init.xavier_uniform_(self.out_proj.weight)
        for linear in (self.q_proj, self.kv_proj, self.out_proj):
            nn.init.zeros_(linear.bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.head_dim).transpose(1, 2)  # (batch, heads, len, head_dim)

    def project_kv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(batch, k_len, d_model) -> keys, values, each (batch, heads, k_len, head_dim)."""
        k, v = self.kv_proj(x).chunk(2, dim=-1)
        return self._split_heads(k), self._split_heads(v)

    def forward(
        self,
        x: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Queries from x (rows, q_len, d_model) attend over projected k, v (batch, heads, k_len, head_dim).

        rows is batch or a multiple of it: beam search keeps `beam` consecutive rows per sentence,
        all attending to that sentence's one copy of the encoder keys/values, so they are folded
        into the query length (one kernel call reads each sentence's keys once, not once per beam).
        Returns (rows, q_len, d_model) and, if need_weights, (rows, heads, q_len, k_len).
        """
        rows, q_len, _ = x.shape
        batch, group = k.size(0), rows // k.size(0)
        if rows != batch * group:
            raise ValueError(f"{rows} query rows cannot share keys/values of {batch} sentences")
        q = self._split_heads(self.q_proj(x))  # (rows, heads, q_len, head_dim)
        if group > 1:  # (batch * group, heads, q_len, hd) -> (batch, heads, group * q_len, hd)
            q = (
                q.reshape(batch, group, self.n_heads, q_len, self.head_dim)
                .transpose(1, 2)
                .reshape(batch, self.n_heads, group * q_len, self.head_dim)
            )
        dropout = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            out, weights = attention_with_weights(q, k, v, mask, is_causal, dropout)
        else:
            out = attend(q, k, v, mask, is_causal, dropout)
        if group > 1:  # back to (rows, heads, q_len, ...)

            def unfold(t):
                return (
                    t.reshape(batch, self.n_heads, group, q_len, t.size(-1))
                    .transpose(1, 2)
                    .reshape(rows, self.n_heads, q_len, t.size(-1))
                )

            out, weights = unfold(out), (unfold(weights) if weights is not None else None)
        out = out.transpose(1, 2).reshape(rows, q_len, self.n_heads * self.head_dim)  # (rows, q_len, d_model)
        return self.out_proj(out), weights
