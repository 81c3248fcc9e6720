"""Export to Hugging Face transformers: a directory that `AutoModelForSeq2SeqLM`, `AutoTokenizer`
and `pipeline("translation")` load offline.

    OUT_DIR/
        config.json, generation_config.json, model.safetensors     the model
        tokenizer_config.json, source.spm, target.spm, vocab.json  (and target_vocab.json with
                                                                    separate vocabularies)
        mt_transformer.json                                        the settings of the checkpoint

Which architecture computes our function exactly:
- post-norm, sinusoidal positions: `MarianMTModel` (post-norm layers, embeddings scaled by
  sqrt(d_model), fixed sinusoidal positions from 0, no embedding LayerNorm; shared or separate
  source/target embeddings, output tied to the target embeddings or not);
- pre-norm, sinusoidal positions, one embedding matrix for source, target and output:
  `PegasusForConditionalGeneration` (pre-norm layers, a final LayerNorm after each stack, the
  same embeddings and positions as Marian).
- fairseq's positions (an import of an NLLB or M2M100 model): `M2M100ForConditionalGeneration`
  (exchange/m2m100_export.py).
Learned positions, and pre-norm models with more than one embedding matrix, have no such
architecture (Marian and Pegasus compute their positions themselves; Pegasus has one embedding
matrix), and are refused.

Where each weight goes, and how the residual stream is reordered on the way (their sinusoid
puts all sines first), is exchange/huggingface_layout.py, shared with the import. Before anything
is written, the exported model's log-probabilities are compared with ours on a test batch.

The tokenizer is transformers' `MarianTokenizer` (for both architectures): sentencepiece model(s)
and a vocabulary with our ids. Target-language tags `<2xx>` are written `>>xx<<`, the form that
tokenizer splits off the front of a line (what OPUS-MT models use).
"""

from __future__ import annotations

import json
import os
import shutil
import warnings

from mt_transformer import checkpoint
from mt_transformer.config import tag_language
from mt_transformer.errors import UserError
from mt_transformer.exchange.huggingface_layout import CHECK_TOLERANCE, CONFIG_FIELDS, log_prob_gap, to_transformers
from mt_transformer.files import WRITE_ERRORS, write_error_reason
from mt_transformer.outputs import atomic_dir
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

# our special ids, for the model config (padding rows of the embeddings) and for generate();
# decoding starts from BOS, and EOS is forced at the length limit as ours does
SPECIAL_IDS = dict(
    pad_token_id=PAD_ID,
    bos_token_id=BOS_ID,
    eos_token_id=EOS_ID,
    decoder_start_token_id=BOS_ID,
    forced_eos_token_id=EOS_ID,
)


def import_transformers():
    try:
        import transformers
    except ImportError:
        raise UserError(
            "transformers is not installed: pip install transformers (or pip install 'mt_transformer[huggingface]')"
        ) from None
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # the commands print one line each
    return transformers


def architecture(loaded) -> str:
    """ "marian" or "pegasus" for a checkpoint.LoadedModel one of them computes exactly; else a
    one-line error saying why."""
    model, settings = loaded.model, loaded.config.model
    if settings.positions != "sinusoidal":
        raise UserError(
            f"this model has {settings.positions} positions (model.positions: {settings.positions}); the "
            "transformers models that match it otherwise (Marian, Pegasus) compute the paper's sinusoid, so it "
            "cannot be exported"
        )
    if settings.norm == "post":
        return "marian"
    if model.src_embed is not model.tgt_embed or model.output.weight is not model.tgt_embed.weight:
        raise UserError(
            "this pre-norm model has separate embedding matrices (separate vocabularies or "
            "model.tie_embeddings: false); transformers' pre-norm translation model (Pegasus) has one "
            "for source, target and output, so it cannot be exported"
        )
    return "pegasus"


def hf_config(loaded, arch: str):
    """The transformers config of the model: its sizes, tying and special ids."""
    transformers = import_transformers()
    model, m, tokenizer = loaded.model, loaded.config.model, loaded.tokenizer
    shared = model.src_embed is model.tgt_embed
    settings = dict(
        {theirs: getattr(m, ours) for ours, theirs in CONFIG_FIELDS},
        vocab_size=tokenizer.src_vocab_size,
        activation_dropout=0.0,
        scale_embedding=True,
        tie_word_embeddings=model.output.weight is model.tgt_embed.weight,
        is_encoder_decoder=True,
        **SPECIAL_IDS,
    )
    if arch == "marian":
        return transformers.MarianConfig(
            decoder_vocab_size=tokenizer.tgt_vocab_size, share_encoder_decoder_embeddings=shared, **settings
        )
    return transformers.PegasusConfig(**settings)


def build_model(loaded):
    """The transformers model computing `loaded.model`'s function, in eval mode."""
    transformers = import_transformers()
    arch = architecture(loaded)
    config = hf_config(loaded, arch)
    model_class = transformers.MarianMTModel if arch == "marian" else transformers.PegasusForConditionalGeneration
    hf_model = model_class(config).eval()
    to_transformers(loaded.model, hf_model, loaded.config.model.norm == "pre")
    return hf_model


def check_same_function(model, hf_model) -> float:
    """The largest difference between the two models' log-probabilities on the test batch
    (huggingface_layout.log_prob_gap), refusing the export above CHECK_TOLERANCE."""
    gap = log_prob_gap(model, hf_model)
    if not gap <= CHECK_TOLERANCE:
        transformers = import_transformers()
        raise UserError(
            f"the exported model differs from ours by {gap:.2g} in log-probability (transformers "
            f"{transformers.__version__}); nothing was written"
        )
    return gap


def vocabulary(processor, tags: dict[str, int]) -> dict[str, int]:
    """Piece -> id for a sentencepiece model, our target-language tags written >>xx<<."""
    names = {i: f">>{tag_language(tag)}<<" for tag, i in tags.items() if tag_language(tag)}
    return {names.get(i, processor.id_to_piece(i)): i for i in range(processor.get_piece_size())}


def write_tokenizer(tokenizer, config, directory: str, work: str) -> None:
    """transformers' MarianTokenizer files for our tokenizer into `directory` (`work` holds inputs)."""
    transformers = import_transformers()
    vocab = os.path.join(work, "vocab.json")
    with open(vocab, "w", encoding="utf-8") as f:
        json.dump(vocabulary(tokenizer.src, tokenizer.tags), f, ensure_ascii=False)
    target_vocab = None
    if not tokenizer.joint:
        target_vocab = os.path.join(work, "target_vocab.json")
        with open(target_vocab, "w", encoding="utf-8") as f:
            json.dump(vocabulary(tokenizer.tgt, {}), f, ensure_ascii=False)
    files = [tokenizer.path(name) for name in tokenizer.model_files]
    with warnings.catch_warnings():  # its advice to install sacremoses, which only its normalize() uses
        warnings.filterwarnings("ignore", message="Recommended: pip install sacremoses")
        hf_tokenizer = transformers.MarianTokenizer(
            source_spm=files[0],
            target_spm=files[-1],
            vocab=vocab,
            target_vocab_file=target_vocab,
            separate_vocabs=not tokenizer.joint,
            source_lang=config.data.src_lang,
            target_lang=config.data.tgt_lang,
            model_max_length=config.model.max_positions,
        )
    hf_tokenizer.save_pretrained(directory)


def generation_defaults(hf_model, decode, max_positions: int) -> None:
    """Our decode settings where generate() has them: beam size, length penalty, no-repeat n-grams,
    the special ids. A new GenerationConfig, not the one derived from the model config: older
    transformers (4.x) rebuild a derived one from config.json, losing these settings.

    generate() divides a finished beam's log-probability by length ** length_penalty; ours
    divides by GNMT's ((5 + length) / 6) ** alpha. The two agree on which of two hypotheses of
    equal length is better, not always across lengths; alpha is kept as length_penalty. Its
    output limit is one number for all inputs (max_length, counting the start token); ours is
    max_len_a * source length + max_len_b per sentence, which a caller gives as max_new_tokens.
    """
    hf_model.generation_config = import_transformers().GenerationConfig(
        num_beams=decode.beam_size,
        length_penalty=decode.alpha,
        no_repeat_ngram_size=decode.no_repeat_ngram,
        max_length=max_positions,
        early_stopping=True,
        **SPECIAL_IDS,
    )


def export(loaded, out_dir: str) -> dict:
    """Write the transformers model of a checkpoint.LoadedModel and its tokenizer to out_dir,
    atomically, after checking it computes our log-probabilities; returns its settings."""
    hf_model = build_model(loaded)
    gap = check_same_function(loaded.model, hf_model)
    generation_defaults(hf_model, loaded.config.decode, loaded.config.model.max_positions)
    return save(
        loaded, hf_model, gap, out_dir, lambda tmp, work: write_tokenizer(loaded.tokenizer, loaded.config, tmp, work)
    )


def save(loaded, hf_model, gap: float, out_dir: str, tokenizer_files) -> dict:
    """Write a checked transformers model, its tokenizer (`tokenizer_files(directory, work)`,
    `work` a scratch directory) and our settings to out_dir, atomically; returns the settings."""
    transformers = import_transformers()
    settings = {
        "engine": "transformers",
        "architecture": type(hf_model).__name__,
        "transformers_version": transformers.__version__,
        "largest_log_prob_difference": gap,
        "config": {key: loaded.config.to_dict()[key] for key in ("data", "model", "decode")},
        "step": loaded.step,
    }
    try:
        with atomic_dir(out_dir, written_by="mt-export") as tmp:
            hf_model.save_pretrained(tmp)
            work = os.path.join(tmp, "work")
            os.makedirs(work)
            tokenizer_files(tmp, work)
            shutil.rmtree(work)
            checkpoint.write_export_settings(tmp, settings)
    except WRITE_ERRORS as error:
        raise UserError(f"{out_dir}: the export could not be written ({write_error_reason(error)})") from None
    return settings
