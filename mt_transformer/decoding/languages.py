"""Which languages a translator reads and writes: the target tag <2xx> of a model trained with
data.target_tags, or the language tokens of an NLLB or M2M100 import (data.language_tokens)."""

from __future__ import annotations

from mt_transformer.config import Config, language_tag
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError


def target_tag(config: Config, tgt_lang: str | None) -> str:
    """The tag <2xx> that asks a model trained with data.target_tags for language xx; a language
    it does not write is a one-line error. "" for a model without target tags."""
    if not config.data.target_tags:
        return ""
    languages = config.data.target_languages
    if tgt_lang is not None and tgt_lang not in languages:
        raise UserError(f"--tgt-lang: {tgt_lang!r} is not among the model's target languages ({', '.join(languages)})")
    if tgt_lang is None and len(languages) > 1:
        raise UserError(f"--tgt-lang: required: this model translates into {', '.join(languages)}")
    return language_tag(tgt_lang or languages[0])


def language_heads(
    config: Config, tokenizer: Tokenizer, src_lang: str | None = None, tgt_lang: str | None = None
) -> tuple[list[int], list[int]]:
    """For a model with data.language_tokens, the ids of the source and the target language's
    tokens (default: the languages of its first corpus); ([], []) for any other model."""
    if not config.data.language_tokens:
        return [], []
    first = config.data.corpus_list()[0]
    return tokenizer.language_heads(src_lang or first.src_lang, tgt_lang or first.tgt_lang)
