"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Shape notation used throughout the model code:
    batch      sentences in the batch (times beam size while decoding)
    src_len    source positions, tgt_len target positions
    d_model    model width, heads attention heads, head_dim = d_model / heads
    vocab      target vocabulary size

encode(src) -> memory; decode(tgt_in, memory) -> decoder states; logits(states) -> next-token
logits; forward(src, tgt_in) = decode(tgt_in, encode(src)): the decoder states of teacher forcing.
The loss lives in training/loss.py and the search in decoding/greedy.py and decoding/beam.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from mt_transformer.config import ModelConfig
from mt_transformer.model.dropout import Dropout, WordDropout
from mt_transformer.model.embeddings import LearnedPositions, SinusoidalPositions, TokenEmbedding
from mt_transformer.model.layers import DecoderLayer, EncoderLayer, LayerCache
from mt_transformer.model.masks import padding_mask
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

# how far below the other logits that of a token the model never writes is held (exp(-30) ~ 1e-13)
NEVER_WRITTEN = 30.0


@dataclass
class DecoderCache:
    """Keys/values of every decoder layer plus how many target positions they hold."""

    layers: list[LayerCache]
    length: int = 0

    def select(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        """Keep/reorder the self-attention rows (beam reordering, dropping finished sentences) and,
        if given, the cross-attention `sentences` (beam search keeps one copy of those per sentence)."""
        for layer in self.layers:
            layer.self_k, layer.self_v = layer.self_k.index_select(0, rows), layer.self_v.index_select(0, rows)
            if sentences is not None:
                layer.cross_k = layer.cross_k.index_select(0, sentences)
                layer.cross_v = layer.cross_v.index_select(0, sentences)


class Transformer(nn.Module):
    """The model of a config's model section for the given vocabularies; `share_vocab`: source and
    target share one sentencepiece model (data.joint_vocab)."""

    def __init__(self, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, share_vocab: bool):
        super().__init__()
        c = config
        pre_norm = c.norm == "pre"
        self.src_embed = TokenEmbedding(src_vocab_size, c.d_model, PAD_ID)
        # three-way tying (section 3.4) when source and target share one vocabulary
        share_embeddings = c.tie_embeddings and share_vocab and src_vocab_size == tgt_vocab_size
        self.tgt_embed = self.src_embed if share_embeddings else TokenEmbedding(tgt_vocab_size, c.d_model, PAD_ID)
        if c.positions == "learned":
            self.src_positions = LearnedPositions(c.d_model, c.max_positions)
            self.tgt_positions = LearnedPositions(c.d_model, c.max_positions)
        else:  # one fixed table for both sides
            self.src_positions = self.tgt_positions = SinusoidalPositions(c.d_model, c.max_positions, c.positions)
        self.dropout = Dropout(c.dropout)
        self.word_dropout = WordDropout(c.word_dropout)  # source words only
        self.encoder = nn.ModuleList(EncoderLayer(c) for _ in range(c.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(c) for _ in range(c.decoder_layers))
        self.checkpoint_activations = False  # train.checkpoint_activations: see _layer
        # pre-norm stacks end with a final LayerNorm; post-norm layers already end with one
        self.encoder_norm = nn.LayerNorm(c.d_model) if pre_norm else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if pre_norm else nn.Identity()
        self.start_from_eos = c.decoder_start == "eos"  # the decoder reads EOS's embedding for BOS
        # a tied output matrix is never allocated apart (NLLB's would be 1 GB for nothing)
        self.output = nn.Linear(c.d_model, tgt_vocab_size, bias=False, device="meta" if c.tie_embeddings else None)
        # starting from EOS, BOS is no token of the model: never an output
        self.register_buffer(
            "start_mask", start_mask(tgt_vocab_size) if self.start_from_eos else None, persistent=False
        )
        if c.output_bias:
            self.output.bias = nn.Parameter(torch.zeros(tgt_vocab_size))
        if c.tie_embeddings:
            self.output.weight = self.tgt_embed.weight
        else:
            nn.init.normal_(self.output.weight, mean=0.0, std=c.d_model**-0.5)

    @classmethod
    def unfilled(cls, config: ModelConfig, src_vocab_size: int, tgt_vocab_size: int, share_vocab: bool):
        """The model with its weights allocated but not drawn, for an import to write: memory the
        operating system gives only as each weight is written (the computed tables are made)."""
        with torch.device("meta"):
            model = cls(config, src_vocab_size, tgt_vocab_size, share_vocab)
        model.to_empty(device="cpu")
        if config.tie_embeddings:  # to_empty gives each module a weight of its own
            model.output.weight = model.tgt_embed.weight
        if config.positions != "learned":
            model.src_positions = model.tgt_positions = SinusoidalPositions(
                config.d_model, config.max_positions, config.positions
            )
        if model.start_from_eos:
            model.start_mask = start_mask(tgt_vocab_size)
        return model

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """src: (batch, src_len) token ids; src_mask: (batch, 1, 1, src_len).

        Returns memory (batch, src_len, d_model)."""
        x = self.dropout(self.word_dropout(self.src_embed(src)) + self.src_positions(src.size(1)))
        for layer in self.encoder:
            x = self._layer(layer, x, src_mask)
        return self.encoder_norm(x)

    def _layer(self, layer: nn.Module, *inputs):
        """One layer of a stack. With checkpoint_activations, in training, what it computes inside
        is not kept for the backward pass but computed again there (its dropout drawn alike): the
        memory of a layer's activations for a second forward pass of it."""
        if self.checkpoint_activations and self.training and torch.is_grad_enabled():
            return checkpoint(layer, *inputs, use_reentrant=False)
        return layer(*inputs)

    def new_cache(self) -> DecoderCache:
        return DecoderCache([LayerCache() for _ in self.decoder])

    def decode(
        self,
        tgt_in: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
        weights_of: int | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
        """The decoder stack. tgt_in: (batch, tgt_len) ids (with a cache: only the new positions).

        Returns the states (batch, tgt_len, d_model), which logits() turns into next-token logits, and per
        layer the cross-attention weights (batch, heads, tgt_len, src_len), or None unless need_weights
        (or the layer is `weights_of`, from 0).
        """
        offset = cache.length if cache is not None else 0
        if self.start_from_eos:
            tgt_in = tgt_in.masked_fill(tgt_in == BOS_ID, EOS_ID)
        x = self.dropout(self.tgt_embed(tgt_in) + self.tgt_positions(tgt_in.size(1), offset))
        weights = []
        for i, layer in enumerate(self.decoder):
            wanted = need_weights or i == weights_of
            x, layer_weights = self._layer(layer, x, memory, src_mask, cache.layers[i] if cache else None, wanted)
            weights.append(layer_weights)
        if cache is not None:
            cache.length += tgt_in.size(1)
        return self.decoder_norm(x), weights

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """The pre-softmax linear transformation (section 3.4): (..., d_model) -> logits (..., vocab)."""
        logits = self.output(states)
        return logits if self.start_mask is None else logits + self.start_mask

    def output_bias(self) -> torch.Tensor | None:
        """What logits() adds to output.weight @ states: the learned bias (model.output_bias), the
        start's mask (model.decoder_start: eos), both, or None; for the fused losses."""
        if self.start_mask is None:
            return self.output.bias
        return self.start_mask if self.output.bias is None else self.output.bias + self.start_mask

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, weights_of: int | None = None):
        """Teacher forcing: the decoder states (batch, tgt_len, d_model) of every target position;
        with `weights_of` (a decoder layer, from 0), also its cross-attention weights (batch,
        heads, tgt_len, src_len), for train.guided_alignment.

        Logits are logits() of them; training fuses that projection with the loss
        (training.loss.linear_cross_entropy), so the (tokens, vocab) logits never exist whole.
        """
        src_mask = padding_mask(src, PAD_ID)
        states, weights = self.decode(tgt_in, self.encode(src, src_mask), src_mask, weights_of=weights_of)
        return states if weights_of is None else (states, weights[weights_of])


def start_mask(vocab_size: int) -> torch.Tensor:
    """What logits() adds under model.decoder_start eos: -NEVER_WRITTEN at BOS, 0 elsewhere: (vocab,)."""
    return torch.zeros(vocab_size).index_fill_(0, torch.tensor([BOS_ID]), -NEVER_WRITTEN)


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters (tied matrices counted once)."""
    return sum(p.numel() for p in model.parameters())
