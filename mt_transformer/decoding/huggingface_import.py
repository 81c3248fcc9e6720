"""Import from Hugging Face transformers: which of our model settings compute a Marian or Pegasus
model (OPUS-MT's, or one our export wrote), or a one-line refusal naming the field of its config
that we do not model. Where the weights go is decoding/huggingface_layout.py, shared with the
export.
"""

from __future__ import annotations

import dataclasses

from mt_transformer.config import ModelConfig
from mt_transformer.decoding.huggingface_layout import CHECK_TOLERANCE, CONFIG_FIELDS, from_transformers, log_prob_gap
from mt_transformer.errors import UserError
from mt_transformer.model.transformer import Transformer

# transformers' activation names -> model.activation
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
NORMS = {"marian": "post", "pegasus": "pre"}
# fields of older Marian and Pegasus configs (from BART's) that must hold these values: anything
# else is a layer we do not have
FIXED = {
    "scale_embedding": True,  # embeddings times sqrt(d_model), as ours (section 3.4)
    "static_position_embeddings": True,  # sinusoids, not learned
    "add_bias_logits": False,
    "add_final_layer_norm": False,
    "normalize_embedding": False,  # no LayerNorm on the embeddings
    "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
    "activation_dropout": 0.0,  # no dropout inside the feed-forward sublayer
}


def model_config(hf_config) -> ModelConfig:
    """Our model section for a transformers MarianConfig or PegasusConfig (without the output bias,
    which the weights decide). A size that theirs has per stack must be the same in both."""
    kind = getattr(hf_config, "model_type", None)
    if kind not in NORMS:
        raise UserError(f"model_type: {kind!r}: only Marian and Pegasus models can be imported")
    for field, value in FIXED.items():
        found = getattr(hf_config, field, value)
        if found != value:
            raise UserError(f"{field}: {found!r} is not modelled here (only {value!r} is)")
    settings: dict = {}
    for ours, theirs in CONFIG_FIELDS:
        value = getattr(hf_config, theirs)
        if ours == "activation":
            if value not in ACTIVATIONS:
                known = ", ".join(sorted(ACTIVATIONS))
                raise UserError(f"{theirs}: {value!r} is not modelled here (only {known})")
            value = ACTIVATIONS[value]
        if settings.setdefault(ours, (theirs, value))[1] != value:
            first, held = settings[ours]
            raise UserError(f"{theirs}: {value} differs from {first} ({held}); our encoder and decoder have one size")
    return dataclasses.replace(
        ModelConfig(),
        **{ours: value for ours, (_, value) in settings.items()},
        norm=NORMS[kind],
        positions="sinusoidal",
        tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", True)),
    )


def import_model(hf_model) -> tuple[Transformer, ModelConfig]:
    """Our Transformer computing a transformers Marian or Pegasus model's function, in that
    model's token ids, and its settings; a one-line refusal if a test batch's log-probabilities
    differ by more than CHECK_TOLERANCE."""
    hf_config = hf_model.config
    bias = hf_model.final_logits_bias[0]  # (vocab,)
    config = dataclasses.replace(model_config(hf_config), output_bias=bool(bias.any()))
    src_vocab = hf_config.vocab_size
    tgt_vocab = getattr(hf_config, "decoder_vocab_size", None) or src_vocab
    shared = getattr(hf_config, "share_encoder_decoder_embeddings", True)
    model = Transformer(config, src_vocab, tgt_vocab, share_vocab=shared).eval()
    from_transformers(hf_model, model, pre_norm=config.norm == "pre")
    gap = log_prob_gap(model, hf_model, src_vocab, tgt_vocab)
    if not gap <= CHECK_TOLERANCE:
        raise UserError(f"the imported model differs from the original by {gap:.2g} in log-probability")
    return model, config
