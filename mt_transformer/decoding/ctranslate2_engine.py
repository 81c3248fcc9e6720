"""Deployment through CTranslate2 (https://opennmt.net/CTranslate2): export and translation.

`export` builds a CTranslate2 Transformer spec from our weights with its Python `specs` API and
writes a self-contained directory:

    OUT_DIR/
        model.bin, shared_vocabulary.json (or source_/target_vocabulary.json), config.json
                            what CTranslate2 reads
        spm*.model          our tokenizer
        mt_transformer.json the model and decoding settings of the checkpoint

`Ct2Search` translates batches of subword ids with it and returns our `Hypothesis` objects, so
the `Translator` (decoding/translator.py) handles empty lines, long inputs and input order as
for PyTorch.

Greedy search is the same algorithm as ours. Beam search differs in two ways, both CTranslate2's:
it normalises scores by length ** alpha (ours: the GNMT penalty ((5 + length) / 6) ** alpha), and
it takes one output-length limit per batch (ours: one per sentence; `Ct2Search` cuts each output
to its sentence's own limit afterwards).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import torch

from mt_transformer.checkpoint import EXPORT_SETTINGS_FILE, write_export_settings
from mt_transformer.data.special_tokens import BOS_ID, EOS_ID, UNK_ID
from mt_transformer.data.tokenizer import WORD_START, Tokenizer
from mt_transformer.decoding.constraints import Constraints
from mt_transformer.decoding.search import Hypothesis, output_limits
from mt_transformer.errors import UserError
from mt_transformer.files import atomic_dir


def import_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            "ctranslate2 is not installed: pip install ctranslate2 (or pip install 'mt_transformer[ctranslate2]')"
        ) from None
    return ctranslate2


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


def build_spec(loaded):
    """The CTranslate2 TransformerSpec of a checkpoint.LoadedModel: its weights, in the layout its
    model config names, and its tokenizer's vocabularies."""
    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    model, tokenizer, settings = loaded.model, loaded.tokenizer, loaded.config.model
    pre_norm, max_positions = settings.norm == "pre", settings.max_positions
    activation = {"relu": "RELU", "swish": "SWISH", "gelu": "GELU"}[settings.activation]  # GELU: the erf form
    spec = transformer_spec.TransformerSpec.from_config(
        (settings.encoder_layers, settings.decoder_layers),
        settings.n_heads,
        pre_norm=pre_norm,
        activation=getattr(common_spec.Activation, activation),
    )
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

    src_pieces = [tokenizer.src.id_to_piece(i) for i in range(tokenizer.src_vocab_size)]
    tgt_pieces = [tokenizer.tgt.id_to_piece(i) for i in range(tokenizer.tgt_vocab_size)]
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    spec.config.layer_norm_epsilon = model.encoder[0].norms[0].eps
    spec.config.add_source_eos = True  # our encoder reads the source followed by EOS
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = (
        tgt_pieces[UNK_ID],
        tgt_pieces[BOS_ID],
        tgt_pieces[EOS_ID],
    )
    spec.config.decoder_start_token = spec.config.bos_token
    return spec


def export(loaded, out_dir: str, quantization: str | None = None) -> None:
    """Write the CTranslate2 model of a checkpoint.LoadedModel, its tokenizer and its decoding
    settings to out_dir, atomically."""
    tokenizer, config = loaded.tokenizer, loaded.config.to_dict()
    max_positions = loaded.config.model.max_positions
    spec = build_spec(loaded)
    try:
        with atomic_dir(out_dir) as tmp:
            spec.validate()
            spec.optimize(quantization=quantization)
            spec.save(tmp)
            for name in tokenizer.files:
                shutil.copyfile(os.path.join(tokenizer.directory, name), os.path.join(tmp, name))
            settings = {
                "engine": "ctranslate2",
                "quantization": quantization,
                "max_positions": max_positions,
                "config": {key: config[key] for key in ("data", "model", "decode")},
                "src_vocab_size": tokenizer.src_vocab_size,
                "tgt_vocab_size": tokenizer.tgt_vocab_size,
                "joint_vocab": tokenizer.joint,
                "step": loaded.step,
            }
            write_export_settings(tmp, settings)
    except OSError as error:
        raise UserError(f"{out_dir}: the export could not be written ({error.strerror or error})") from None


def load(directory: str, device: torch.device, compute_type: str = "default", threads: int = 0):
    """The CTranslate2 translator on `device` (cpu, or cuda with its index), our tokenizer and the
    settings of an exported directory."""
    ctranslate2 = import_ctranslate2()
    path = os.path.join(directory, EXPORT_SETTINGS_FILE)
    if not os.path.isfile(path):
        raise UserError(
            f"{directory}: not a CTranslate2 export of mt_transformer (no {EXPORT_SETTINGS_FILE}; "
            f"make one with mt-export --format ctranslate2)"
        )
    with open(path, encoding="utf-8") as f:
        settings = json.load(f)
    try:
        translator = ctranslate2.Translator(
            directory,
            device=device.type,
            device_index=device.index or 0,
            compute_type=compute_type,
            intra_threads=threads or torch.get_num_threads(),
        )
    except (RuntimeError, ValueError) as error:
        raise UserError(f"{directory}: CTranslate2 could not load it ({str(error).splitlines()[0]})") from None
    return translator, Tokenizer(directory), settings


class Ct2Search:
    """Search over batches of source subword ids with a CTranslate2 translator, the same interface
    as torch_search.TorchSearch."""

    def __init__(self, translator, tokenizer: Tokenizer, decode, max_positions: int):
        self.translator, self.tokenizer, self.decode, self.max_positions = translator, tokenizer, decode, max_positions

    def __call__(
        self,
        sources: list[list[int]],
        prefixes: list[list[int]] | None = None,
        constraints: list[Constraints] | None = None,
    ) -> list[list[Hypothesis]]:
        """Hypotheses for `sources`. CTranslate2 can suppress phrases (for a whole batch: inputs are
        grouped by their phrases to avoid) but not require them."""
        if constraints and any(c.include for c in constraints):
            raise UserError("--constraints: needs --engine torch (CTranslate2 cannot require phrases; --avoid works)")
        groups: dict[tuple, list[int]] = {}
        for i in range(len(sources)):
            groups.setdefault(constraints[i].avoid if constraints else (), []).append(i)
        found: list[list[Hypothesis]] = [[] for _ in sources]
        for avoid, members in groups.items():
            hypotheses = self._translate(
                [sources[i] for i in members], None if prefixes is None else [prefixes[i] for i in members], avoid
            )
            for i, h in zip(members, hypotheses):
                found[i] = h
        return found

    def _translate(
        self, sources: list[list[int]], prefixes: list[list[int]] | None, avoid: tuple[str, ...]
    ) -> list[list[Hypothesis]]:
        limits = output_limits(sources, self.decode, self.max_positions, prefixes)
        # the phrases as the tokenizer splits them: CTranslate2 suppresses subword sequences
        suppress = self.tokenizer.tgt.encode([p.replace(WORD_START, " ").strip() for p in avoid], out_type=str)
        try:
            results = self.translator.translate_batch(
                [self.tokenizer.src_pieces(s) for s in sources],
                beam_size=self.decode.beam_size,
                length_penalty=self.decode.alpha,
                num_hypotheses=self.decode.n_best,
                no_repeat_ngram_size=self.decode.no_repeat_ngram,
                target_prefix=None if prefixes is None else [self.tokenizer.tgt_pieces(p) for p in prefixes],
                suppress_sequences=suppress or None,
                max_decoding_length=max(limits),
                max_input_length=0,
                return_scores=True,
            )
        except RuntimeError as error:  # its GPU libraries are loaded at the first translation
            message = str(error).splitlines()[0]
            if "cannot be loaded" not in message and "not found" not in message:
                raise
            raise UserError(
                f"CTranslate2 cannot run on {self.translator.device}: {message} (the ctranslate2 wheels on PyPI "
                f"need the CUDA version they were built for); --device cpu runs it on the CPU"
            ) from None
        found = []
        for result, limit in zip(results, limits):
            hypotheses = []
            for pieces, score in zip(result.hypotheses, result.scores):
                # CTranslate2 takes one limit per batch: cut to this sentence's own, as our search would
                ids = [self.tokenizer.tgt.piece_to_id(p) for p in pieces[:limit]]
                # CTranslate2 returns the length-normalised score only: the summed log-probability is unknown
                hypotheses.append(Hypothesis(ids, score, float("nan")))
            found.append(hypotheses)
        return found
