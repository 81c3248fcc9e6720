"""Export to transformers' M2M100ForConditionalGeneration: what an NLLB or M2M100 import of ours
(trimmed, with a language added, fine-tuned) becomes again, with an NLLB tokenizer for it.

    OUT_DIR/
        config.json, generation_config.json, model.safetensors      the model
        sentencepiece.bpe.model, tokenizer.json, tokenizer_config.json   NllbTokenizer's files
        mt_transformer.json                                          the settings of the checkpoint

Their ids are ours but for the first four and our start id, which a model starting from </s>
(model.decoder_start: eos) never reads or writes: their <s>, <pad>, </s>, <unk> (0-3) are our
<unused0> (their <s> when it was imported), padding, end and unknown, and our other ids follow
in order. The tokenizer is the one transformers converts from the sentencepiece model, its
vocabulary given our ids, its merges those among our pieces (a trimmed vocabulary keeps every
piece a kept one is merged from, so text made of kept pieces is split as before), the language
tokens its special tokens. Before anything is written, the exported model's log-probabilities
are compared with ours, and the written tokenizer's ids with ours on the vocabulary's own text.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil

import torch

from mt_transformer.data.batching import encoder_input
from mt_transformer.errors import UserError
from mt_transformer.exchange.huggingface_export import generation_defaults, import_transformers, save
from mt_transformer.exchange.huggingface_layout import CHECK_TOLERANCE, log_prob_gap, to_transformers
from mt_transformer.exchange.m2m100_tokenizer import SPM_FILE
from mt_transformer.exchange.vocabulary_edits import IMPORTED_START, with_rows
from mt_transformer.files import write_text
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

CHECK_LINES = 50  # lines of the vocabulary's own text the written tokenizer is checked on


def refusal(loaded) -> str | None:
    """Why a checkpoint has no exact M2M100 (None: it has one)."""
    model, settings, tokenizer = loaded.model, loaded.config.model, loaded.tokenizer
    if settings.norm != "pre" or settings.decoder_start != "eos" or settings.output_bias:
        return (
            "M2M100 is a pre-norm model starting from </s> without an output bias (model.norm: pre, "
            "model.decoder_start: eos, model.output_bias: false)"
        )
    if model.src_embed is not model.tgt_embed or model.output.weight is not model.tgt_embed.weight:
        return "M2M100 has one embedding matrix for source, target and output"
    if not tokenizer.languages or IMPORTED_START not in tokenizer.tgt.ids:
        return "only an import of an NLLB or M2M100 model (with its language tokens and <s> row) becomes one again"
    return None


def their_order(tokenizer) -> list[int]:
    """For each id of the export, our id whose rows it takes (our start id has none)."""
    start = tokenizer.tgt.piece_to_id(IMPORTED_START)
    rest = [i for i in range(tokenizer.tgt_vocab_size) if i not in (PAD_ID, UNK_ID, BOS_ID, EOS_ID, start)]
    return [start, PAD_ID, EOS_ID, UNK_ID, *rest]


def build_model(loaded, order: list[int]):
    """The M2M100ForConditionalGeneration computing our model's function, in eval mode."""
    transformers = import_transformers()
    m = loaded.config.model
    config = transformers.M2M100Config(
        vocab_size=len(order),
        d_model=m.d_model,
        encoder_layers=m.encoder_layers,
        decoder_layers=m.decoder_layers,
        encoder_attention_heads=m.n_heads,
        decoder_attention_heads=m.n_heads,
        encoder_ffn_dim=m.d_ff,
        decoder_ffn_dim=m.d_ff,
        activation_function=m.activation if m.activation != "swish" else "silu",
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        activation_dropout=0.0,
        encoder_layerdrop=0.0,
        decoder_layerdrop=0.0,
        max_position_embeddings=m.max_positions,
        scale_embedding=True,
        tie_word_embeddings=True,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )
    hf_model = transformers.M2M100ForConditionalGeneration(config).eval()
    # our weights in their id order: a model of ours starting from BOS holds them (no start mask)
    rows = with_rows(loaded.model, dataclasses.replace(m, decoder_start="bos"), torch.tensor(order))
    to_transformers(rows, hf_model, pre_norm=True, reorder=False)
    return hf_model


def check_model(loaded, hf_model, order: list[int]) -> float:
    theirs = {ours: i for i, ours in enumerate(order)}
    ids = torch.tensor([theirs.get(i, 2) for i in range(loaded.tokenizer.tgt_vocab_size)])  # BOS: their </s>
    gap = log_prob_gap(loaded.model, hf_model, ids, ids)
    if not gap <= CHECK_TOLERANCE:
        raise UserError(f"the exported model differs from ours by {gap:.2g} in log-probability; nothing was written")
    return gap


def write_tokenizer(loaded, order: list[int], directory: str, work: str) -> None:
    """NllbTokenizer's files for our tokenizer: converted by transformers from the sentencepiece
    model, then given our ids and only the merges among our pieces."""
    transformers = import_transformers()
    tokenizer, data = loaded.tokenizer, loaded.config.data
    pieces = [tokenizer.tgt.id_to_piece(i) for i in order]
    pieces[0] = "<s>"
    codes = sorted(tokenizer.languages, key=tokenizer.languages.get)
    tokens = [tokenizer.tgt.id_to_piece(tokenizer.languages[code]) for code in codes]
    shutil.copyfile(tokenizer.path(tokenizer.model_files[0]), os.path.join(work, SPM_FILE))
    src, tgt = (
        tokenizer.tgt.id_to_piece(tokenizer.language_id(lang, key))
        for lang, key in ((data.src_lang, "data.src_lang"), (data.tgt_lang, "data.tgt_lang"))
    )
    settings = {
        "tokenizer_class": "NllbTokenizer",
        "src_lang": src,
        "tgt_lang": tgt,
        "additional_special_tokens": tokens,
    }
    if loaded.config.model.source_tag_after_eos:  # the model reads "text </s> code"
        settings["legacy_behaviour"] = True
    if "<mask>" not in pieces:  # trimmed away, or M2M100's vocabulary: no new id for it
        settings["mask_token"] = "<unk>"
    write_text(os.path.join(work, "tokenizer_config.json"), json.dumps(settings))
    transformers.AutoTokenizer.from_pretrained(work).save_pretrained(directory)
    path = os.path.join(directory, "tokenizer.json")
    with open(path, encoding="utf-8") as f:
        converted = json.load(f)
    ids = {piece: i for i, piece in enumerate(pieces)}
    model = converted["model"]
    model["vocab"] = ids
    model["merges"] = [
        m for m in model["merges"] if _merge(m)[0] in ids and _merge(m)[1] in ids and "".join(_merge(m)) in ids
    ]
    converted["added_tokens"] = [
        dict(t, id=ids[t["content"]]) for t in converted["added_tokens"] if t["content"] in ids
    ]
    write_text(path, json.dumps(converted, ensure_ascii=False))
    shutil.copyfile(os.path.join(work, SPM_FILE), os.path.join(directory, SPM_FILE))


def _merge(merge) -> tuple[str, str]:
    """A merge of tokenizer.json: ["a", "b"], or "a b" in older files."""
    return tuple(merge) if isinstance(merge, list) else tuple(merge.split(" ", 1))


def check_tokenizer(loaded, order: list[int], directory: str) -> None:
    """The written tokenizer gives our ids (in the export's order) on lines of our vocabulary's
    own pieces that our tokenizer splits into pieces it has (else a one-line refusal)."""
    transformers = import_transformers()
    tokenizer, data = loaded.tokenizer, loaded.config.data
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    theirs = {ours: i for i, ours in enumerate(order)}
    words = [i for i in range(4, tokenizer.tgt_vocab_size) if i not in set(tokenizer.languages.values())]
    generator = random.Random(0)
    lines = [tokenizer.tgt.decode(generator.sample(words, min(8, len(words)))) for _ in range(CHECK_LINES)]
    source = tokenizer.language_id(data.src_lang, "data.src_lang")
    for line, ids in zip(lines, tokenizer.encode_src(lines)):
        if UNK_ID in ids or not line:
            continue
        expected = [theirs[i] for i in encoder_input([source, *ids], loaded.config.model.source_tag_after_eos)]
        if hf_tokenizer(line).input_ids != expected:
            raise UserError(f"the exported tokenizer splits {line!r} otherwise than ours; nothing was written")


def export(loaded, out_dir: str) -> dict:
    """Write the M2M100ForConditionalGeneration of a checkpoint.LoadedModel and its tokenizer to
    out_dir, atomically, after checking both; returns its settings."""
    why = refusal(loaded)
    if why:
        raise UserError(f"this model cannot be exported as M2M100: {why}")
    order = their_order(loaded.tokenizer)
    hf_model = build_model(loaded, order)
    gap = check_model(loaded, hf_model, order)
    generation_defaults(hf_model, loaded.config.decode, loaded.config.model.max_positions)
    hf_model.generation_config.update(
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, forced_eos_token_id=2
    )

    def tokenizer_files(directory: str, work: str) -> None:
        write_tokenizer(loaded, order, directory, work)
        check_tokenizer(loaded, order, directory)

    return save(loaded, hf_model, gap, out_dir, tokenizer_files)
