"""Every attention weight of one teacher-forced pass: the encoder's self-attention, the decoder's
(causal) self-attention and its cross-attention, per layer and head, for reading a model.

The weights are taken from the model's own MultiHeadAttention modules while it encodes and
decodes once (each asked for its weights through its `need_weights` argument), so they are
exactly those the model computes, and the model's code stays free of bookkeeping for them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from mt_transformer.data.batching import encoder_input
from mt_transformer.model.attention import MultiHeadAttention
from mt_transformer.model.masks import padding_mask
from mt_transformer.special_tokens import BOS_ID, PAD_ID


@dataclass
class AttentionMaps:
    """Per layer, (batch, heads, query positions, key positions); every row sums to 1."""

    encoder: list[torch.Tensor]  # source over source
    decoder: list[torch.Tensor]  # target over earlier target positions (causal)
    cross: list[torch.Tensor]  # target over source


@contextlib.contextmanager
def _recorded(modules: list[MultiHeadAttention], into: list[torch.Tensor]):
    """While inside, each call of these modules returns its weights, appended to `into`."""

    def ask(module, args, kwargs):
        return args, {**kwargs, "need_weights": True}

    def keep(module, args, kwargs, output):
        into.append(output[1].detach().float().cpu())

    handles = [m.register_forward_pre_hook(ask, with_kwargs=True) for m in modules]
    handles += [m.register_forward_hook(keep, with_kwargs=True) for m in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@torch.no_grad()
def attention_maps(model, src_ids: list[int], tgt_ids: list[int], tag_after_eos: bool = False) -> AttentionMaps:
    """The weights of one sentence (src_ids, EOS appended) and its translation (tgt_ids, fed
    after BOS), teacher-forced on the model's device; source positions in the order of src_ids
    then EOS, whatever the order the encoder read them in (`tag_after_eos`: batching.encoder_input's)."""
    model.eval()
    device = next(model.parameters()).device
    src = torch.tensor([encoder_input(src_ids, tag_after_eos)], device=device)  # (1, src_len + 1)
    tgt_in = torch.tensor([[BOS_ID] + tgt_ids], device=device)  # (1, tgt_len + 1)
    src_mask = padding_mask(src, PAD_ID)  # (1, 1, 1, src_len + 1)
    encoder, decoder, cross = [], [], []
    with _recorded([layer.self_attn for layer in model.encoder], encoder):
        memory = model.encode(src, src_mask)  # (1, src_len + 1, d_model)
    with (
        _recorded([layer.self_attn for layer in model.decoder], decoder),
        _recorded([layer.cross_attn for layer in model.decoder], cross),
    ):
        model.decode(tgt_in, memory, src_mask)
    if tag_after_eos:  # the language token read last: back to the front
        encoder = [weights.roll((1, 1), dims=(-2, -1)) for weights in encoder]
        cross = [weights.roll(1, dims=-1) for weights in cross]
    return AttentionMaps(encoder, decoder, cross)
