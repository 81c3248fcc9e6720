"""Export to CTranslate2 (https://opennmt.net/CTranslate2): a checkpoint's weights as a
CTranslate2 Transformer spec, built with its Python `specs` API, in a self-contained directory:

    OUT_DIR/
        model.bin, shared_vocabulary.json (or source_/target_vocabulary.json), config.json
                            what CTranslate2 reads
        spm*.model          our tokenizer
        mt_transformer.json the model and decoding settings of the checkpoint

decoding/ctranslate2_engine.py translates with it. Before anything is written, CTranslate2's
float32 log-probabilities of a test batch are compared with ours (within 1e-4); a quantized
export quantizes the weights so checked.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import torch

from mt_transformer.checkpoint import write_export_settings
from mt_transformer.data.word_alignment import alignment_heads
from mt_transformer.decoding.ctranslate2_engine import import_ctranslate2, new_translator
from mt_transformer.errors import UserError
from mt_transformer.evaluation.teacher_forcing import teacher_forced_log_probs
from mt_transformer.files import WRITE_ERRORS, write_error_reason
from mt_transformer.outputs import atomic_dir
from mt_transformer.special_tokens import BOS_ID, EOS_ID, UNK_ID

CHECK_TOLERANCE = 1e-4  # the largest log-probability difference an export may have from ours


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).contiguous().numpy()


def _set_linear(spec, *linears: torch.nn.Linear) -> None:
    """One CTranslate2 linear layer from one or several of ours stacked along the outputs (fused QKV)."""
    spec.weight = np.concatenate([_array(linear.weight) for linear in linears])
    if all(linear.bias is not None for linear in linears):
        spec.bias = np.concatenate([_array(linear.bias) for linear in linears])


def _set_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _position_table(positions, length: int) -> np.ndarray:
    """(length, d_model): the encodings of positions 0 .. length-1 (sinusoidal or learned)."""
    return _array(positions(length))


def build_spec(loaded, source_prefix: str | None = None):
    """The CTranslate2 TransformerSpec of a checkpoint.LoadedModel: its weights, in the layout its
    model config names, and its tokenizer's vocabularies. With `source_prefix` (a target tag of
    the model, `<2de>`), the model reads that tag before every source of itself: CTranslate2's
    add_source_bos puts the BOS piece there, and the source vocabulary names the tag's row with
    it (and the BOS row with the tag), for an app that cannot prefix the source (Argos)."""
    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    model, tokenizer, settings = loaded.model, loaded.tokenizer, loaded.config.model
    if settings.source_tag_after_eos:
        raise UserError(
            "model.source_tag_after_eos (NLLB's legacy layout): CTranslate2 reads a source as it is given; "
            "translate with --engine torch"
        )
    pre_norm, max_positions = settings.norm == "pre", settings.max_positions
    activation = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU"}[settings.activation]  # GELU: the erf form
    spec = transformer_spec.TransformerSpec.from_config(
        (settings.encoder_layers, settings.decoder_layers),
        settings.n_heads,
        pre_norm=pre_norm,
        activation=getattr(common_spec.Activation, activation),
        # its attention for alignments, as ours: the heads train.guided_alignment taught, else the
        # last layer's mean of all heads
        **dict(zip(("alignment_layer", "alignment_heads"), alignment_heads(loaded.config))),
    )
    _set_weights(spec, model, pre_norm, max_positions)

    src_pieces = [tokenizer.src.id_to_piece(i) for i in range(tokenizer.src_vocab_size)]
    tgt_pieces = [tokenizer.tgt.id_to_piece(i) for i in range(tokenizer.tgt_vocab_size)]
    if source_prefix is not None:
        tag = tokenizer.tags[source_prefix]
        src_pieces[tag], src_pieces[BOS_ID] = src_pieces[BOS_ID], src_pieces[tag]
        spec.config.add_source_bos = True
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    spec.config.layer_norm_epsilon = model.encoder[0].norms[0].eps
    spec.config.add_source_eos = True  # our encoder reads the source followed by EOS
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = (
        tgt_pieces[UNK_ID],
        tgt_pieces[BOS_ID],
        tgt_pieces[EOS_ID],
    )
    start = spec.config.eos_token if settings.decoder_start == "eos" else spec.config.bos_token
    spec.config.decoder_start_token = start
    return spec


def _set_weights(spec, model, pre_norm: bool, max_positions: int) -> None:
    """Every weight of `model` into the TransformerSpec's slot for it."""
    for side, embed, positions in (
        (spec.encoder, model.src_embed, model.src_positions),
        (spec.decoder, model.tgt_embed, model.tgt_positions),
    ):
        embeddings = side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings
        embeddings.weight = _array(embed.weight)
        side.scale_embeddings = True  # multiply by sqrt(d_model), as TokenEmbedding does
        side.position_encodings.encodings = _position_table(positions, max_positions)
    if pre_norm:
        _set_norm(spec.encoder.layer_norm, model.encoder_norm)
        _set_norm(spec.decoder.layer_norm, model.decoder_norm)
    for ours, theirs in zip(model.encoder, spec.encoder.layer):
        _set_linear(theirs.self_attention.linear[0], ours.self_attn.q_proj, ours.self_attn.kv_proj)
        _set_linear(theirs.self_attention.linear[1], ours.self_attn.out_proj)
        _set_norm(theirs.self_attention.layer_norm, ours.norms[0])
        _set_linear(theirs.ffn.linear_0, ours.ffn.linear1)
        _set_linear(theirs.ffn.linear_1, ours.ffn.linear2)
        _set_norm(theirs.ffn.layer_norm, ours.norms[1])
    for ours, theirs in zip(model.decoder, spec.decoder.layer):
        _set_linear(theirs.self_attention.linear[0], ours.self_attn.q_proj, ours.self_attn.kv_proj)
        _set_linear(theirs.self_attention.linear[1], ours.self_attn.out_proj)
        _set_norm(theirs.self_attention.layer_norm, ours.norms[0])
        _set_linear(theirs.attention.linear[0], ours.cross_attn.q_proj)
        _set_linear(theirs.attention.linear[1], ours.cross_attn.kv_proj)
        _set_linear(theirs.attention.linear[2], ours.cross_attn.out_proj)
        _set_norm(theirs.attention.layer_norm, ours.norms[1])
        _set_linear(theirs.ffn.linear_0, ours.ffn.linear1)
        _set_linear(theirs.ffn.linear_1, ours.ffn.linear2)
        _set_norm(theirs.ffn.layer_norm, ours.norms[2])
    _set_linear(spec.decoder.projection, model.output)
    if model.output_bias() is not None:  # the start's mask too (model.decoder_start: eos)
        spec.decoder.projection.bias = _array(model.output_bias())


def log_prob_gap(loaded, directory: str, source_prefix: str | None = None) -> float:
    """The largest difference between our teacher-forced log-probabilities and those of the
    CTranslate2 model in `directory` (run in float32 on one thread) on a fixed batch of random
    subwords: two sentence pairs of different lengths (ours after the `source_prefix` tag, which
    that model adds itself)."""
    tokenizer = loaded.tokenizer
    generator = torch.Generator().manual_seed(0)
    sources = [torch.randint(4, tokenizer.src_vocab_size, (n,), generator=generator).tolist() for n in (8, 5)]
    targets = [torch.randint(4, tokenizer.tgt_vocab_size, (n,), generator=generator).tolist() for n in (6, 3)]
    if source_prefix is not None:  # pieces that name other rows in that model's vocabulary: left out
        swapped = {BOS_ID, tokenizer.tags[source_prefix]}
        sources = [[i for i in s if i not in swapped] for s in sources]
    head = [tokenizer.tags[source_prefix]] if source_prefix is not None else []
    ours = teacher_forced_log_probs(loaded.model, [head + s for s in sources], targets, torch.device("cpu"))
    translator = new_translator(directory, device="cpu", compute_type="float32", intra_threads=1)
    theirs = translator.score_batch(
        [tokenizer.src_pieces(s) for s in sources], [tokenizer.tgt_pieces(t) for t in targets]
    )
    del translator
    return max(abs(a - b) for o, t in zip(ours, theirs) for a, b in zip(o, t.log_probs, strict=True))


def export(
    loaded,
    out_dir: str,
    quantization: str | None = None,
    extra: dict | None = None,
    source_prefix: str | None = None,
    model_only: bool = False,
) -> float:
    """Write the CTranslate2 model of a checkpoint.LoadedModel, its tokenizer and its decoding
    settings (with `extra` entries) to out_dir, atomically, once its float32 weights compute our
    log-probabilities; returns the largest difference found. `model_only`: only what CTranslate2
    reads (for another app's package); always so with `source_prefix`, a model fixed to that
    target tag (build_spec), which our commands do not translate with."""
    tokenizer, config = loaded.tokenizer, loaded.config.to_dict()
    max_positions = loaded.config.model.max_positions
    spec = build_spec(loaded, source_prefix)
    whole = not (model_only or source_prefix is not None)  # an export of ours, not a part of another app's
    try:
        with atomic_dir(out_dir, written_by="mt-export" if whole else None) as tmp:
            spec.validate()
            spec.optimize(quantization=None)
            checked = tmp if quantization is None else os.path.join(tmp, ".float32")
            os.makedirs(checked, exist_ok=True)
            spec.save(checked)
            gap = log_prob_gap(loaded, checked, source_prefix)
            if not gap <= CHECK_TOLERANCE:
                raise UserError(
                    f"the CTranslate2 model differs from ours by {gap:.2g} in log-probability (more than "
                    f"{CHECK_TOLERANCE:g}); nothing was written"
                )
            if quantization is not None:  # the checked weights, quantized
                shutil.rmtree(checked)
                spec = build_spec(loaded, source_prefix)
                spec.validate()
                spec.optimize(quantization=quantization)
                spec.save(tmp)
            if not whole:
                return gap
            for name in tokenizer.files:
                shutil.copyfile(os.path.join(tokenizer.directory, name), os.path.join(tmp, name))
            settings = {
                "engine": "ctranslate2",
                "quantization": quantization,
                "max_positions": max_positions,
                "config": {
                    **{key: config[key] for key in ("data", "model", "decode")},
                    "train": {"guided_alignment": config["train"]["guided_alignment"]},  # where alignments are read
                },
                "src_vocab_size": tokenizer.src_vocab_size,
                "tgt_vocab_size": tokenizer.tgt_vocab_size,
                "joint_vocab": tokenizer.joint,
                "step": loaded.step,
                "log_prob_gap": gap,
                **(extra or {}),
            }
            write_export_settings(tmp, settings)
    except WRITE_ERRORS as error:
        raise UserError(f"{out_dir}: the export could not be written ({write_error_reason(error)})") from None
    return gap
