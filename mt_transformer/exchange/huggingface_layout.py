"""Where each of our weights lives in a transformers Marian, Pegasus or M2M100 model, for the
export and the import alike.

Marian and Pegasus compute the sinusoid with all sines first and all cosines after (features
0..d/2-1 and d/2..d-1), where ours interleaves them (sin in even features, cos in odd; our
model.positions fairseq, M2M100's, puts them as M2M100 does and needs no reordering). A model
is the same function under any consistent reordering of the features of its residual stream
(LayerNorm normalises over all of them; every linear layer that reads or writes the stream is
reordered with it), so each weight pair below names the dimensions that index the stream: the
export reorders them to put our sines first, the import puts them back.

Their attention has separate key and value projections where ours has one fused `kv_proj` (keys
first): the pairs name its halves, views that the import writes through.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import torch

from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

# The largest difference in log-probability allowed between our model and a transformers one on
# log_prob_gap's batch, for the export and the import: float32 rounding of two implementations
# moves O(1) values by ~1e-6; a wrong layout or a missing scale moves them by far more than this.
CHECK_TOLERANCE = 1e-4

# (our tensor, theirs, the dimensions of ours that index the residual stream)
Pair = tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]

# our model settings and the fields of a Marian or Pegasus config that hold them (ours has one
# size for both stacks where theirs has two); the activation's names are transformers' own
CONFIG_FIELDS = [
    ("d_model", "d_model"),
    ("encoder_layers", "encoder_layers"),
    ("decoder_layers", "decoder_layers"),
    ("n_heads", "encoder_attention_heads"),
    ("n_heads", "decoder_attention_heads"),
    ("d_ff", "encoder_ffn_dim"),
    ("d_ff", "decoder_ffn_dim"),
    ("activation", "activation_function"),
    ("dropout", "dropout"),
    ("attention_dropout", "attention_dropout"),
    ("max_positions", "max_position_embeddings"),
]


def stream_order(d_model: int) -> torch.Tensor:
    """Feature j of the exported residual stream is feature order[j] of ours: our sines (even
    features) first, then our cosines (odd features)."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def _linear(ours, theirs, reads: bool, writes: bool) -> Iterator[Pair]:
    """A linear layer (weight: (out, in)): its inputs are stream features when it reads the
    stream, its outputs (and bias) when it writes it."""
    yield ours.weight, theirs.weight, (0,) * writes + (1,) * reads
    yield ours.bias, theirs.bias, (0,) * writes


def _norm(ours, theirs) -> Iterator[Pair]:
    yield ours.weight, theirs.weight, (0,)
    yield ours.bias, theirs.bias, (0,)


def _attention(ours, theirs) -> Iterator[Pair]:
    """Our q_proj and fused kv_proj (keys first) and their q_proj, k_proj, v_proj; out_proj."""
    d_model = ours.q_proj.weight.size(0)
    (k_weight, v_weight), (k_bias, v_bias) = ours.kv_proj.weight.split(d_model), ours.kv_proj.bias.split(d_model)
    yield from _linear(ours.q_proj, theirs.q_proj, reads=True, writes=False)
    yield k_weight, theirs.k_proj.weight, (1,)
    yield k_bias, theirs.k_proj.bias, ()
    yield v_weight, theirs.v_proj.weight, (1,)
    yield v_bias, theirs.v_proj.bias, ()
    yield from _linear(ours.out_proj, theirs.out_proj, reads=False, writes=True)


def _ffn(ours, theirs) -> Iterator[Pair]:
    yield from _linear(ours.ffn.linear1, theirs.fc1, reads=True, writes=False)
    yield from _linear(ours.ffn.linear2, theirs.fc2, reads=False, writes=True)


def weight_pairs(ours, hf_model, pre_norm: bool) -> Iterator[Pair]:
    """Every weight of our model with its place in a Marian or Pegasus model of the same shape;
    a tied matrix comes once per place it takes there."""
    base = hf_model.model
    yield ours.src_embed.weight, base.encoder.embed_tokens.weight, (1,)
    yield ours.tgt_embed.weight, base.decoder.embed_tokens.weight, (1,)
    yield ours.output.weight, hf_model.lm_head.weight, (1,)
    if ours.output.bias is not None and hasattr(hf_model, "final_logits_bias"):  # zeros unless it has a bias
        yield ours.output.bias, hf_model.final_logits_bias[0], ()
    for layer, theirs in zip(ours.encoder, base.encoder.layers):
        yield from _attention(layer.self_attn, theirs.self_attn)
        yield from _norm(layer.norms[0], theirs.self_attn_layer_norm)
        yield from _ffn(layer, theirs)
        yield from _norm(layer.norms[1], theirs.final_layer_norm)
    for layer, theirs in zip(ours.decoder, base.decoder.layers):
        yield from _attention(layer.self_attn, theirs.self_attn)
        yield from _norm(layer.norms[0], theirs.self_attn_layer_norm)
        yield from _attention(layer.cross_attn, theirs.encoder_attn)
        yield from _norm(layer.norms[1], theirs.encoder_attn_layer_norm)
        yield from _ffn(layer, theirs)
        yield from _norm(layer.norms[2], theirs.final_layer_norm)
    if pre_norm:
        yield from _norm(ours.encoder_norm, base.encoder.layer_norm)
        yield from _norm(ours.decoder_norm, base.decoder.layer_norm)


def _reorder(tensor: torch.Tensor, dims: tuple[int, ...], order: torch.Tensor) -> torch.Tensor:
    for dim in dims:
        tensor = tensor.index_select(dim, order)
    return tensor


def _copy(target: torch.Tensor, source: torch.Tensor) -> None:
    if target.shape != source.shape:
        raise RuntimeError(f"shape {tuple(source.shape)} does not fit {tuple(target.shape)}")
    with torch.no_grad():
        target.copy_(source)


def to_transformers(ours, hf_model, pre_norm: bool, reorder: bool = True) -> None:
    """Our weights into a Marian, Pegasus or M2M100 model, the residual stream reordered (for
    our paper's sinusoid, `reorder`)."""
    order = stream_order(ours.src_embed.weight.size(1))
    for mine, theirs, dims in weight_pairs(ours, hf_model, pre_norm):
        _copy(theirs, _reorder(mine, dims, order) if reorder else mine)


def from_transformers(
    hf_model, ours, pre_norm: bool, reorder: bool = True, rows=None, consume: bool = False, extra_rows=None
) -> None:
    """A Marian, Pegasus or M2M100 model's weights into ours, the residual stream put back in our
    order (`reorder`, as for to_transformers); `rows` (source, target): for each of our ids the
    id of theirs whose embedding and output rows it takes (None: the same ids), then `extra_rows`
    ((n, d_model) in their order, or None) for ids of ours alone (an output bias of 0). With
    `consume`, each of their weights is freed once copied: an import holds the model once, not twice."""
    inverse = stream_order(ours.src_embed.weight.size(1)).argsort()
    by_ids = {}  # our tensors indexed by vocabulary ids, with the order of their rows
    if rows is not None:
        by_ids = {
            id(ours.src_embed.weight): rows[0],
            id(ours.tgt_embed.weight): rows[1],
            id(ours.output.weight): rows[1],
        }
        if ours.output.bias is not None:
            by_ids[id(ours.output.bias)] = rows[1]
    pairs = list(weight_pairs(ours, hf_model, pre_norm))
    uses = Counter(id(theirs) for _, theirs, _ in pairs)  # a tied matrix of theirs has several places
    for mine, theirs, dims in pairs:
        source = theirs.index_select(0, by_ids[id(mine)]) if id(mine) in by_ids else theirs
        if id(mine) in by_ids and extra_rows is not None:
            source = torch.cat([source, extra_rows if source.dim() == 2 else source.new_zeros(len(extra_rows))])
        _copy(mine, _reorder(source, dims, inverse) if reorder else source)
        uses[id(theirs)] -= 1
        if consume and not uses[id(theirs)] and theirs._base is None:
            theirs.data = torch.empty(0, dtype=theirs.dtype)


def check_batch(src_vocab: int, tgt_vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed batch of random ids of ours: src (2, 9), EOS last or EOS then padding; tgt_in
    (2, 7), BOS first."""
    generator = torch.Generator().manual_seed(0)
    src = torch.randint(4, src_vocab, (2, 9), generator=generator)  # (batch, src_len)
    src[:, -1], src[1, 4], src[1, 5:] = EOS_ID, EOS_ID, PAD_ID
    tgt_in = torch.randint(4, tgt_vocab, (2, 7), generator=generator)  # (batch, tgt_len)
    tgt_in[:, 0] = BOS_ID
    return src, tgt_in


def their_logits(hf_model, src_order: torch.Tensor, tgt_order: torch.Tensor) -> tuple:
    """check_batch of our ids (the orders give the id in theirs of each of ours), and a
    transformers model's teacher-forced logits on it at our ids: (2, 7, len(tgt_order))."""
    src, tgt_in = check_batch(len(src_order), len(tgt_order))
    with torch.inference_mode():
        inputs = dict(input_ids=src_order[src], attention_mask=src.ne(PAD_ID), decoder_input_ids=tgt_order[tgt_in])
        return src, tgt_in, hf_model(**inputs).logits[..., tgt_order]


def gap_to(model, theirs: tuple) -> float:
    """The largest difference between our model's log-probabilities and a transformers model's
    (their_logits), both normalized over the ids theirs covers (a trimmed import's are the
    original's renormalized over the kept ones; ids of ours alone are left out) but our start id,
    never an output (an import gives it none)."""
    src, tgt_in, logits = theirs
    covered = torch.arange(logits.size(-1)) != BOS_ID  # (their vocabulary at our ids,)
    with torch.inference_mode():
        ours = model.logits(model(src, tgt_in))[..., : logits.size(-1)]  # (batch, tgt_len, covered)
    ours, logits = (x[..., covered].float().log_softmax(-1) for x in (ours, logits))
    return float((ours - logits).abs().max())


def log_prob_gap(model, hf_model, src_order=None, tgt_order=None) -> float:
    """The largest difference between our model's and a transformers model's teacher-forced
    log-probabilities on check_batch. `src_order` and `tgt_order` (tensors) give the id in
    theirs of each of our ids (None: the same ids)."""
    src_vocab, tgt_vocab = model.src_embed.weight.size(0), model.output.weight.size(0)
    src_order = torch.arange(src_vocab) if src_order is None else src_order
    tgt_order = torch.arange(tgt_vocab) if tgt_order is None else tgt_order
    return gap_to(model, their_logits(hf_model, src_order, tgt_order))
