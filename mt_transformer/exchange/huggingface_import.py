"""Import from Hugging Face transformers: a Marian or Pegasus model (OPUS-MT's, or one our export
wrote) and its Marian tokenizer, or an M2M100 model (NLLB-200's, M2M100's) and its tokenizer, as
a checkpoint directory of ours.

    SRC/                                            OUT/ (what mt-train writes)
        config.json, model.safetensors                  model.safetensors, config.json
        source.spm, target.spm                          spm.src.model, spm.tgt.model
          (M2M100: sentencepiece.bpe.model)
        vocab.json (target_vocab.json)                  vocab.json (vocab.src.json, vocab.tgt.json)
          (NLLB: tokenizer.json)                        languages.json (NLLB, M2M100: code -> token)
        tokenizer_config.json                           finetune.yaml: a config to fine-tune it

Which of our model settings compute the model is read from its config; a field we do not model
is a one-line refusal naming it. Where the weights go is exchange/huggingface_layout.py, shared
with the export; how the vocabulary ids map to ours is exchange/marian_tokenizer.py and
exchange/m2m100_tokenizer.py. Before anything is written, the imported model's log-probabilities
are compared with the original's on a test batch.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile

import torch

from mt_transformer import checkpoint
from mt_transformer.config import (
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    config_from_dict,
    finetune_yaml,
    tag_language,
)
from mt_transformer.data.language_codes import model_code
from mt_transformer.data.tokenizer import (
    LANGUAGES_FILE,
    SRC_FILE,
    SRC_VOCAB_FILE,
    TGT_FILE,
    TGT_VOCAB_FILE,
    VOCAB_FILE,
    Tokenizer,
)
from mt_transformer.data.vocabulary import write_vocabulary
from mt_transformer.errors import UserError, first_line
from mt_transformer.exchange import vocabulary_edits
from mt_transformer.exchange.huggingface_export import import_transformers
from mt_transformer.exchange.huggingface_layout import (
    CHECK_TOLERANCE,
    CONFIG_FIELDS,
    from_transformers,
    gap_to,
    their_logits,
)
from mt_transformer.exchange.huggingface_source import Source, local_directory, read_model
from mt_transformer.exchange.m2m100_tokenizer import read_m2m100_tokenizer
from mt_transformer.exchange.marian_tokenizer import ImportedVocabularies, read_marian_tokenizer, spm_settings
from mt_transformer.files import WRITE_ERRORS, read_json, write_error_reason, write_text
from mt_transformer.model.transformer import NEVER_WRITTEN, Transformer
from mt_transformer.outputs import atomic_dir
from mt_transformer.special_tokens import BOS_ID

FINETUNE_FILE = "finetune.yaml"  # a config to fine-tune the import, written beside it

# transformers' activation names -> model.activation
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish", "gelu": "gelu"}
NORMS = {"marian": "post", "pegasus": "pre", "m2m_100": "pre"}
POSITIONS = {"marian": "sinusoidal", "pegasus": "sinusoidal", "m2m_100": "fairseq"}
# fields of older Marian and Pegasus configs (from BART's) that must hold these values: anything
# else is a layer we do not have (M2M100's layer drop, for training only, is not one of ours)
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
    """Our model section for a transformers MarianConfig, PegasusConfig or M2M100Config (without
    the output bias, which the weights decide). A size that theirs has per stack must be the same
    in both."""
    kind = getattr(hf_config, "model_type", None)
    if kind not in NORMS:
        raise UserError(f"model_type: {kind!r}: only Marian, Pegasus and M2M100 (NLLB) models can be imported")
    fixed = {k: v for k, v in FIXED.items() if kind != "m2m_100" or "layerdrop" not in k}
    for field, value in fixed.items():
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
        positions=POSITIONS[kind],
        decoder_start="eos" if kind == "m2m_100" else "bos",
        tie_embeddings=bool(getattr(hf_config, "tie_word_embeddings", True)),
    )


def import_model(
    hf_model, src_order=None, tgt_order=None, consume: bool = False, tag_after_eos: bool = False, extra_rows=None
) -> tuple[Transformer, ModelConfig]:
    """Our Transformer computing a transformers Marian or Pegasus model's function, and its
    settings; a one-line refusal if a test batch's log-probabilities differ by more than
    CHECK_TOLERANCE. `src_order`/`tgt_order` (tensors, None: the same ids) give, for each of our
    ids, the id of theirs whose rows it takes; where our start id takes the row of another of
    ours (OPUS-MT starts from its padding), its output logit is lowered by NEVER_WRITTEN, so that
    the probabilities stay those of the original (a model starting from EOS, M2M100's, does so
    itself). With `consume` each of its weights is freed once copied (`hf_model` is spent);
    `tag_after_eos`: its tokenizer puts a source's language code after its </s>; `extra_rows`
    (n, d_model): rows of ours alone after the ordered ones (an added language's)."""
    hf_config = hf_model.config
    src_vocab = hf_config.vocab_size
    tgt_vocab = getattr(hf_config, "decoder_vocab_size", None) or src_vocab
    bias = getattr(hf_model, "final_logits_bias", torch.zeros(1, tgt_vocab))[0]  # (vocab,); M2M100 has none
    shared = getattr(hf_config, "share_encoder_decoder_embeddings", True)
    src_order = torch.arange(src_vocab) if src_order is None else src_order
    tgt_order = torch.arange(tgt_vocab) if tgt_order is None else tgt_order
    settings = model_config(hf_config)
    muted = settings.decoder_start == "bos" and bool((tgt_order == tgt_order[BOS_ID]).sum() > 1)
    config = dataclasses.replace(settings, output_bias=bool(bias.any()) or muted, source_tag_after_eos=tag_after_eos)
    theirs = their_logits(hf_model, src_order, tgt_order)  # before their weights are freed
    added = 0 if extra_rows is None else len(extra_rows)
    model = Transformer.unfilled(config, len(src_order) + added, len(tgt_order) + added, share_vocab=shared).eval()
    reorder, rows = config.positions == "sinusoidal", (src_order, tgt_order)
    from_transformers(hf_model, model, config.norm == "pre", reorder, rows, consume=consume, extra_rows=extra_rows)
    if muted:  # starting from EOS, the model never writes BOS itself (model/transformer.py)
        with torch.no_grad():
            model.output.bias[BOS_ID] -= NEVER_WRITTEN
    gap = gap_to(model, theirs)
    if not gap <= CHECK_TOLERANCE:
        raise UserError(f"the imported model differs from the original by {gap:.2g} in log-probability")
    return model, config


def imported_config(model: ModelConfig, vocabularies: ImportedVocabularies, src_lang: str, tgt_lang: str) -> Config:
    """The config an imported checkpoint records: its model settings, and data settings that
    describe its tokenizer and languages (one corpus per target tag of a multilingual model).
    An export of ours brings back its data and decode settings as they were."""
    ours = os.path.join(vocabularies.directory, checkpoint.EXPORT_SETTINGS_FILE)
    if os.path.isfile(ours):
        saved = read_json(ours, "the settings of our export").get("config", {})
        data = {**saved.get("data", {}), "src_lang": src_lang, "tgt_lang": tgt_lang}
        sections = {"data": data, "model": dataclasses.asdict(model), "decode": saved.get("decode")}
    else:
        data = dict(
            src_lang=src_lang,
            tgt_lang=tgt_lang,
            joint_vocab=not vocabularies.separate,
            vocab_size=len(vocabularies.tgt_pieces),
            max_len=min(DataConfig.max_len, model.max_positions - 1),
            **spm_settings(os.path.join(vocabularies.directory, vocabularies.spm_files[0])),
            language_tokens=bool(vocabularies.languages),
        )
        languages = sorted(filter(None, map(tag_language, vocabularies.src_pieces)))
        if languages:
            corpora = [{"src_lang": src_lang, "tgt_lang": language} for language in languages]
            data |= dict(target_tags=True, corpora=corpora)
        sections = {"data": data, "model": dataclasses.asdict(model)}
    try:
        return config_from_dict(sections)
    except ConfigError as error:
        raise UserError(f"the imported settings are not valid here: {error}") from None


def write_checkpoint(out_dir: str, model, config: Config, vocabularies: ImportedVocabularies, source: str) -> None:
    """The checkpoint directory of an imported model, atomically: what mt-train writes, with
    both sentencepiece models and our vocabularies, and a config to fine-tune it."""
    try:
        with atomic_dir(out_dir, written_by="mt-import") as tmp:
            for theirs, ours in zip(vocabularies.spm_files, (SRC_FILE, TGT_FILE)):
                shutil.copyfile(os.path.join(vocabularies.directory, theirs), os.path.join(tmp, ours))
            if vocabularies.languages:
                write_text(os.path.join(tmp, LANGUAGES_FILE), json.dumps(vocabularies.languages, indent=0) + "\n")
            if vocabularies.separate:
                write_vocabulary(os.path.join(tmp, SRC_VOCAB_FILE), vocabularies.src_pieces)
                write_vocabulary(os.path.join(tmp, TGT_VOCAB_FILE), vocabularies.tgt_pieces)
            else:
                write_vocabulary(os.path.join(tmp, VOCAB_FILE), vocabularies.tgt_pieces)
            metadata = {**checkpoint.checkpoint_metadata(config, Tokenizer(tmp)), "step": None, "imported_from": source}
            checkpoint.write_model_dir(tmp, checkpoint.model_tensors(model)[0], metadata, tmp, [])
            finetuned = os.path.join("runs", os.path.basename(os.path.normpath(out_dir)) + "_finetuned")
            write_text(os.path.join(tmp, FINETUNE_FILE), finetune_yaml(config, out_dir, finetuned))
    except WRITE_ERRORS as error:
        raise UserError(f"{out_dir}: the import could not be written ({write_error_reason(error)})") from None


@dataclasses.dataclass(frozen=True)
class VocabularyEdits:
    """What mt-import changes in an NLLB or M2M100 model's vocabulary (exchange/vocabulary_edits.py)."""

    keep_vocab: tuple[str, ...] = ()  # text files: keep only the pieces they use
    add_language: str | None = None  # a language code to add a token for
    init_from: str | None = None  # the language whose token's rows the new one copies (None: their mean)


def check_files(paths) -> None:
    for path in paths:
        if not os.path.isfile(path):
            raise UserError(f"--keep-vocab: no such file: {path}")


def import_directory(
    source: Source, out_dir: str, src_lang: str | None, tgt_lang: str | None, edits: VocabularyEdits = VocabularyEdits()
) -> dict:
    """Import the transformers model and tokenizer of a Source (a directory or a hub id) into the
    checkpoint directory `out_dir`, after checking that the imported model computes the
    original's log-probabilities, with `edits` to an NLLB or M2M100 model's vocabulary made
    after that check; returns what was imported (its vocabulary's sizes: before and after trimming)."""
    transformers = import_transformers()
    directory = local_directory(source.path, source.revision)
    try:
        hf_config = transformers.AutoConfig.from_pretrained(directory, trust_remote_code=False)
    except Exception as error:  # transformers raises its own types on a config.json of another shape
        raise UserError(f"{directory}: not a transformers model ({first_line(error, 120)})") from None
    model_config(hf_config)  # a refusal before the weights are read
    with tempfile.TemporaryDirectory() as scratch:  # a sentencepiece model made from tokenizer.json
        if hf_config.model_type == "m2m_100":
            vocabularies = read_m2m100_tokenizer(directory, hf_config, transformers, scratch)
        else:
            vocabularies = read_marian_tokenizer(directory, hf_config)
        src_lang = src_lang or vocabularies.settings.get("source_lang")
        tgt_lang = tgt_lang or vocabularies.settings.get("target_lang")
        known = set(vocabularies.languages) | ({edits.add_language} if edits.add_language else set())
        for flag, value in (("--src-lang", src_lang), ("--tgt-lang", tgt_lang)):
            if not value:
                raise UserError(f"{flag}: required: the tokenizer's settings name no such language")
            if vocabularies.languages and model_code(value, known) is None:  # de names NLLB's deu_Latn
                raise UserError(
                    f"{flag}: {value!r} is not among the model's {len(vocabularies.languages)} language codes"
                )
        if edits.add_language or edits.keep_vocab:
            if not vocabularies.languages:
                raise UserError("--add-language and --keep-vocab: for NLLB and M2M100 models (with language tokens)")
            check_files(edits.keep_vocab)
        hf_model = read_model(transformers, directory, source.allow_pickle)
        sizes, added = [len(vocabularies.tgt_pieces)], None
        if edits.add_language:  # its row from theirs, before any is freed
            vocabularies, added = vocabulary_edits.add_language(
                hf_model, vocabularies, edits.add_language, edits.init_from
            )
        if edits.keep_vocab:  # the kept rows alone are ever made: memory near the trimmed model's
            given = [src_lang, tgt_lang, edits.add_language, edits.init_from]  # None: not a code
            kept = [model_code(code, known) for code in given if code]
            vocabularies = vocabulary_edits.trim(vocabularies, edits.keep_vocab, kept)
            sizes.append(len(vocabularies.tgt_pieces))
        orders = [
            torch.tensor([i for i in order if i >= 0]) for order in (vocabularies.src_order, vocabularies.tgt_order)
        ]
        model, model_settings = import_model(
            hf_model, *orders, consume=True, tag_after_eos=vocabularies.legacy, extra_rows=added
        )
        architecture = type(hf_model).__name__
        del hf_model  # its weights were freed as they were copied
        config = imported_config(model_settings, vocabularies, src_lang, tgt_lang)
        write_checkpoint(out_dir, model, config, vocabularies, source.path)
        return {"architecture": architecture, "config": config, "vocabulary": sizes}
