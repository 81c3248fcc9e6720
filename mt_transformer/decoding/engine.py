"""The decoding engine: the model's decoder one position at a time, as the searches run it.

`Transformer.decode` (model/transformer.py) is the paper's decoder, written once for training,
scoring and attention views. A search calls it once per output position with a handful of rows
(a sentence's beam), where a step's cost is mostly fixed: reading every weight matrix, and a few
hundred small tensor operations. `Engine` computes the same step in fewer operations, and
decoding/weights.py makes the weights cheaper to read (docs/benchmarks.md, "The decoding engine
against CTranslate2", measures each lever):

- self-attention's queries, keys and values in one matrix product (W^Q, W^K, W^V stacked, the
  model's own weights, restacked whenever they change);
- the cross-attention's keys and values of every layer from one product over the encoder output,
  kept once per sentence, with padding as an additive mask made once per batch (none without
  padding); the self-attention's grow by one position a step, as the model's cache does (a
  preallocated cache written in place measured slower on the CPU: attention over its strided keys
  cost more than the copies it saves; docs/benchmarks.md);
- attention in one call of `F.scaled_dot_product_attention` for a few rows, as two batched
  matrix products (scale and mask inside the first) for many.

It offers the model's decoding interface (encode, new_cache, decode, logits), so greedy, beam,
sampling, constrained and ensemble search all run on it unchanged; the encoder, the embeddings,
the layer norms, the feed-forward layers and the output projection are the model's own modules.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from mt_transformer.model.transformer import Transformer


class EngineCache:
    """Keys and values of every decoder layer for the live rows, and the cross-attention's."""

    def __init__(self):
        self.self_k: list[torch.Tensor] = []  # per layer (rows, heads, length, head_dim)
        self.self_v: list[torch.Tensor] = []
        self.length = 0  # positions held
        self.cross_k: torch.Tensor | None = None  # (layers, batch, heads, src_len, head_dim)
        self.cross_v: torch.Tensor | None = None
        self.cross_bias: torch.Tensor | None = None  # (batch, heads, 1, src_len): 0 or -inf; None: no padding

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the newest position's keys and values of `layer`, each (rows, heads, 1, head_dim);
        returns all of them, each (rows, heads, length, head_dim)."""
        if layer == len(self.self_k):
            self.self_k.append(k.contiguous())
            self.self_v.append(v.contiguous())
        else:
            self.self_k[layer] = torch.cat([self.self_k[layer], k], dim=2)
            self.self_v[layer] = torch.cat([self.self_v[layer], v], dim=2)
        return self.self_k[layer], self.self_v[layer]

    def select(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep/reorder the rows (beam reordering, dropping finished sentences) and, if given, the
        cross-attention's `sentences`."""
        self.self_k = [k.index_select(0, rows) for k in self.self_k]
        self.self_v = [v.index_select(0, rows) for v in self.self_v]
        if sentences is not None:
            self.cross_k, self.cross_v = self.cross_k[:, sentences], self.cross_v[:, sentences]
            if self.cross_bias is not None:
                self.cross_bias = self.cross_bias.index_select(0, sentences)


class Engine(nn.Module):
    """A Transformer's decoding interface with the incremental step described above."""

    def __init__(self, model: Transformer):
        super().__init__()
        self.model, self.output = model, model.output
        first = model.decoder[0]
        self.heads, self.head_dim = first.self_attn.n_heads, first.self_attn.head_dim
        self.pre_norm = first.pre_norm
        d_model = self.heads * self.head_dim
        layers = len(model.decoder)
        # stacked weights, as Linear layers so that decoding/weights.py prepares them like the rest
        self.self_qkv = nn.ModuleList(nn.Linear(d_model, 3 * d_model) for _ in range(layers))
        self.cross_kv = nn.Linear(d_model, 2 * d_model * layers)
        for parameter in [*self.self_qkv.parameters(), *self.cross_kv.parameters()]:
            parameter.requires_grad_(False)
        self._stacked_from: tuple | None = None
        # each decoder layer's parts in the order a step uses them (eval mode: no dropout)
        self._layers = [
            (
                tuple(layer.norms),
                self.self_qkv[i],
                layer.self_attn.out_proj,
                layer.cross_attn.q_proj,
                layer.cross_attn.out_proj,
                layer.ffn,
            )
            for i, layer in enumerate(model.decoder)
        ]

    def _sources(self) -> list[nn.Linear]:
        return [
            linear
            for layer in self.model.decoder
            for linear in (layer.self_attn.q_proj, layer.self_attn.kv_proj, layer.cross_attn.kv_proj)
        ]

    @torch.no_grad()
    def restack(self) -> None:
        """Stack the model's projection weights again if any of them changed (training updates them
        between validations; load_state_dict replaces their values)."""
        versions = tuple((p._version, p.data_ptr()) for linear in self._sources() for p in linear.parameters())
        if versions == self._stacked_from:
            return
        for stacked, layer in zip(self.self_qkv, self.model.decoder):
            q, kv = layer.self_attn.q_proj, layer.self_attn.kv_proj
            stacked.weight = nn.Parameter(torch.cat([q.weight, kv.weight]), requires_grad=False)
            stacked.bias = nn.Parameter(torch.cat([q.bias, kv.bias]), requires_grad=False)
        cross = [layer.cross_attn.kv_proj for layer in self.model.decoder]
        self.cross_kv.weight = nn.Parameter(torch.cat([c.weight for c in cross]), requires_grad=False)
        self.cross_kv.bias = nn.Parameter(torch.cat([c.bias for c in cross]), requires_grad=False)
        self._stacked_from = versions

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        return self.model.encode(src, src_mask)

    def new_cache(self) -> EngineCache:
        return EngineCache()

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        return self.model.logits(states)

    def decode(self, tgt_in, memory, src_mask, cache: EngineCache | None = None, need_weights: bool = False):
        """Without a cache, the model's decode; with one, the engine's step for one new position:
        states (rows, 1, d_model), and no attention weights (the model's decode gives those)."""
        if cache is None:
            return self.model.decode(tgt_in, memory, src_mask, None, need_weights)
        if need_weights or tgt_in.size(1) != 1:
            raise ValueError("the engine's step takes one new position and gives no attention weights")
        if memory is not None:
            self._start(cache, memory, src_mask)
        return self._step(tgt_in, cache), [None] * len(self.model.decoder)

    def _start(self, cache: EngineCache, memory: torch.Tensor, src_mask: torch.Tensor) -> None:
        """Cross-attention keys and values of every layer, and the padding mask, once per batch."""
        batch, src_len, _ = memory.shape
        layers = len(self.model.decoder)
        kv = self.cross_kv(memory).view(batch, src_len, layers, 2, self.heads, self.head_dim)
        kv = kv.permute(3, 2, 0, 4, 1, 5)  # (2, layers, batch, heads, src_len, head_dim)
        cache.cross_k, cache.cross_v = kv[0].contiguous(), kv[1].contiguous()
        if not bool(src_mask.all()):  # (batch, heads, 1, src_len): a view of (batch * heads, 1, src_len)
            bias = torch.zeros(batch, self.heads, 1, src_len, dtype=memory.dtype, device=memory.device)
            cache.cross_bias = bias.masked_fill_(~src_mask, float("-inf"))

    def _step(self, tokens: torch.Tensor, cache: EngineCache) -> torch.Tensor:
        """tokens: (rows, 1), the newest position of each row -> decoder states (rows, 1, d_model).

        Modules are called through `forward`: a step makes ~40 module calls, and nn.Module's call
        machinery costs more than some of the products (demo: 10.0 -> 8.5 ms of decoder steps a
        sentence). So forward hooks do not fire here; they do in the encoder and in the model's
        own decode (alignments, attention, scoring)."""
        model, heads, head_dim, pre_norm = self.model, self.heads, self.head_dim, self.pre_norm
        rows, position = tokens.size(0), cache.length
        x = model.tgt_embed.forward(tokens) + model.tgt_positions.forward(1, position)  # (rows, 1, d_model)
        batch = cache.cross_k.size(1)
        group = rows // batch  # a sentence's beam rows share its keys: folded into the queries
        for i, (norms, qkv_proj, self_out, cross_q, cross_out, ffn) in enumerate(self._layers):
            h = norms[0].forward(x) if pre_norm else x
            qkv = qkv_proj.forward(h).view(rows, 3, heads, head_dim)
            q, k, v = qkv.unsqueeze(3).unbind(1)  # each (rows, heads, 1, head_dim)
            k, v = cache.append(i, k, v)  # each (rows, heads, length, head_dim)
            y = self_out.forward(_attend(q, k, v, None).reshape(rows, 1, -1))  # (rows, 1, d_model)
            x = x + y if pre_norm else norms[0].forward(x + y)

            h = norms[1].forward(x) if pre_norm else x
            q = cross_q.forward(h).view(batch, group, heads, head_dim).transpose(1, 2)  # (batch, heads, group, hd)
            y = _attend(q, cache.cross_k[i], cache.cross_v[i], cache.cross_bias)  # (batch, heads, group, hd)
            y = cross_out.forward(y.transpose(1, 2).reshape(rows, 1, heads * head_dim))
            x = x + y if pre_norm else norms[1].forward(x + y)

            h = norms[2].forward(x) if pre_norm else x
            y = ffn.linear2.forward(ffn.activation(ffn.linear1.forward(h)))
            x = x + y if pre_norm else norms[2].forward(x + y)
        cache.length += 1
        return model.decoder_norm.forward(x)


# F.scaled_dot_product_attention's CPU kernel works through the (sentence, head) pairs one query
# at a time: the fastest for a few pairs, slower than two batched products for many, and sooner
# with several queries (a beam folded into the cross-attention's). It is used while sentences x
# heads x queries^2 is at most this (Zen 3, head_dim 64, one query: 4 x 4 pairs 15 against 31 us,
# 64 x 4 pairs 86 against 69; four queries: 1 x 4 pairs 25 against 31, 2 x 4 pairs 33 against 27;
# docs/benchmarks.md)
SDPA_WORK = 64


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T / sqrt(d_k) + bias) v: q (batch, heads, queries, head_dim), k and v
    (batch, heads, keys, head_dim), bias (batch, heads, 1, keys) or None; returns (batch, heads,
    queries, head_dim)."""
    batch, heads, queries, head_dim = q.shape
    if batch * heads * queries * queries <= SDPA_WORK:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    q, k, v = (t.reshape(batch * heads, -1, head_dim) for t in (q, k, v))  # views: heads merge with batch
    scale = 1.0 / math.sqrt(head_dim)
    if bias is None:
        scores = torch.bmm(q, k.transpose(1, 2)).mul_(scale)  # (batch * heads, queries, keys)
    else:
        scores = torch.baddbmm(bias.view(batch * heads, 1, -1), q, k.transpose(1, 2), alpha=scale)
    weights = scores.softmax(dim=-1, dtype=torch.float32).to(v.dtype)
    return torch.bmm(weights, v).view(batch, heads, queries, head_dim)


def restack(engine: nn.Module) -> None:
    """Call before each search (before its weights are prepared): the stacked weights of every
    Engine in `engine` (an Ensemble holds several) follow the model's."""
    for module in engine.modules():
        if isinstance(module, Engine):
            module.restack()


def engine_for(model: nn.Module) -> nn.Module:
    """The engine of a Transformer, an Ensemble of engines for an Ensemble, else the model itself."""
    from mt_transformer.decoding.ensemble import Ensemble

    if isinstance(model, Transformer):
        return Engine(model)
    if isinstance(model, Ensemble):
        return Ensemble([engine_for(member) for member in model.members], model.mode)
    return model
