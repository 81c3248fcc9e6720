"""Counted model FLOPs, for model FLOPs utilisation (MFU = counted FLOPs / time / peak FLOP/s).

Only matrix products count (2 FLOPs per multiply-add); norms, softmax and the like are left out,
as is usual. Padding is not counted: the FLOPs are those the sentences need, not those the
padded batch costs. Attention counts the whole (tgt_len x tgt_len) score matrix also when it
is causal, as the kernels compute it.
"""

from __future__ import annotations

from collections.abc import Sequence


def forward_flops(
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    d_model: int,
    d_ff: int,
    encoder_layers: int,
    decoder_layers: int,
    tgt_vocab: int,
) -> int:
    """FLOPs of one teacher-forced forward pass, logits included, over sentence pairs of these
    lengths (source with its EOS, target with its BOS)."""
    d = d_model
    src, tgt = sum(src_lens), sum(tgt_lens)
    src_sq = sum(s * s for s in src_lens)
    tgt_sq = sum(t * t for t in tgt_lens)
    src_tgt = sum(s * t for s, t in zip(src_lens, tgt_lens))
    # multiply-adds. Per layer and position: Q, K, V, output projections 4 d^2, FFN 2 d d_ff;
    # attention: Q K^T and weights x V, 2 d per (query, key) pair
    encoder = encoder_layers * (src * (4 * d * d + 2 * d * d_ff) + 2 * d * src_sq)
    decoder = decoder_layers * (
        tgt * (4 * d * d + 2 * d * d + 2 * d * d_ff)  # self-attention, cross-attention Q and output, FFN
        + src * 2 * d * d  # cross-attention K and V, from the encoder output
        + 2 * d * (tgt_sq + src_tgt)
    )  # self- and cross-attention scores and sums
    output = tgt * d * tgt_vocab
    return 2 * (encoder + decoder + output)


def training_flops(
    src_lens: Sequence[int],
    tgt_lens: Sequence[int],
    d_model: int,
    d_ff: int,
    encoder_layers: int,
    decoder_layers: int,
    tgt_vocab: int,
) -> int:
    """Forward and backward: the backward pass multiplies twice as much as the forward (gradients
    of the inputs and of the weights)."""
    return 3 * forward_flops(src_lens, tgt_lens, d_model, d_ff, encoder_layers, decoder_layers, tgt_vocab)
