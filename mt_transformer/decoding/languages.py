"""Which languages a translator reads and writes, as the ids every source begins with and those
every output is forced to begin with (a translator's `heads`): the target tag <2xx> of a model
trained with data.target_tags (a source head), or the language tokens of an NLLB or M2M100 import
(data.language_tokens: a source head and an output head)."""

from __future__ import annotations

from mt_transformer.config import Config, language_tag, tag_language
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError

Heads = tuple[list[int], list[int]]  # (source head ids, output head ids)


def language_heads(
    config: Config, tokenizer: Tokenizer, src_lang: str | None = None, tgt_lang: str | None = None
) -> Heads:
    """For a model with data.language_tokens, the ids of the source and the target language's
    tokens (default: the languages of its first corpus); ([], []) for any other model."""
    if not config.data.language_tokens:
        return [], []
    first = config.data.corpus_list()[0]
    return tokenizer.language_heads(src_lang or first.src_lang, tgt_lang or first.tgt_lang)


def tag_heads(config: Config, tokenizer: Tokenizer, tgt_lang: str | None) -> Heads:
    """For a model trained with data.target_tags, the id of the tag <2xx> that asks it for
    language xx, as its sources' head; a language it does not write is a one-line error.
    ([], []) for a model without target tags."""
    if not config.data.target_tags:
        return [], []
    languages = config.data.target_languages
    if tgt_lang is not None and tgt_lang not in languages:
        raise UserError(f"--tgt-lang: {tgt_lang!r} is not among the model's target languages ({', '.join(languages)})")
    if tgt_lang is None and len(languages) > 1:
        raise UserError(f"--tgt-lang: required: this model translates into {', '.join(languages)}")
    return [tokenizer.tags[language_tag(tgt_lang or languages[0])]], []


def heads_for(config: Config, tokenizer: Tokenizer, src_lang: str | None, tgt_lang: str | None) -> Heads:
    """The heads of a model asked for these languages, whichever way it names them."""
    if config.data.language_tokens:
        return language_heads(config, tokenizer, src_lang, tgt_lang)
    return tag_heads(config, tokenizer, tgt_lang)


def head_language(tokenizer: Tokenizer, heads: Heads) -> str | None:
    """The language the heads ask for, by its model code (NLLB's deu_Latn) or its tag's code; None
    without heads."""
    if heads[1]:
        return next(code for code, i in tokenizer.languages.items() if i == heads[1][0])
    return tag_language(tokenizer.src.id_to_piece(heads[0][0])) if heads[0] else None
