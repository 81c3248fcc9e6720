"""How a model is told which languages it reads and writes: its language scheme.

- A model of one pair: sources and outputs as they are.
- Target tags (data.target_tags): each source begins with the tag <2xx> that asks for language xx.
- Language tokens (an NLLB or M2M100 import, data.language_tokens): each source begins with its
  language's token and each output is forced to begin with the target language's; NLLB's legacy
  layout reads the source's token after its EOS (model.source_tag_after_eos: batching.encoder_input).

The translator, the data, validation, the server and the teacher stage ask the scheme for the ids
a pair's sources and outputs begin with (its `leads`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mt_transformer.config import DataConfig, language_tag
from mt_transformer.data.language_codes import model_code, public_code
from mt_transformer.errors import UserError

Leads = tuple[list[int], list[int]]  # (the ids every source begins with, those every output is forced to)
OPTIONS = ("--src-lang", "--tgt-lang")  # what messages name the languages by


@dataclass(frozen=True)
class LanguageScheme:
    pairs: tuple[tuple[str, str], ...]  # the corpora's (source, target) languages; the first is the default
    tags: dict[str, int] = field(default_factory=dict)  # target language -> the id of its tag <2xx>
    tokens: dict[str, int] = field(default_factory=dict)  # model code (deu_Latn) -> its language token's id
    tag_after_eos: bool = False  # NLLB's legacy layout

    def leads(self, src_lang: str | None = None, tgt_lang: str | None = None, keys=OPTIONS) -> Leads:
        """The leads of a pair (default: the first corpus's); a language the model does not read
        or write is a one-line error naming `keys`."""
        if self.tokens:
            src, tgt = self.pairs[0]
            return [self._token(src_lang or src, keys[0])], [self._token(tgt_lang or tgt, keys[1])]
        if not self.tags:
            return [], []
        languages = sorted(self.tags)
        if tgt_lang is not None and tgt_lang not in self.tags:
            raise UserError(
                f"{keys[1]}: {tgt_lang!r} is not among the model's target languages ({', '.join(languages)})"
            )
        if tgt_lang is None and len(languages) > 1:
            raise UserError(f"{keys[1]}: required: this model translates into {', '.join(languages)}")
        return [self.tags[tgt_lang or languages[0]]], []

    def token_leads(self, src_lang: str | None = None, tgt_lang: str | None = None, keys=OPTIONS) -> Leads:
        """The language tokens of a pair (default: the first corpus's), ([], []) for a model
        without them: what a translator starts with, and what training pairs' ids begin with
        (their target tags are in their text)."""
        return self.leads(src_lang, tgt_lang, keys) if self.tokens else ([], [])

    def served(self) -> dict[tuple[str, str], Leads]:
        """The pairs a server offers, each with its leads: every pair of an import's languages (by
        their two-letter codes where they have one), else the corpora's pairs."""
        if self.tokens:
            codes = self.tokens
            return {(public_code(a), public_code(b)): ([codes[a]], [codes[b]]) for a in codes for b in codes if a != b}
        return {(src, tgt): self.leads(tgt_lang=tgt) for src, tgt in self.pairs}

    def language(self, leads: Leads) -> str | None:
        """The language `leads` ask for, by the model's code (NLLB's deu_Latn) or a tag's; None without leads."""
        asked = leads[1] or leads[0]
        named = self.tokens if leads[1] else self.tags
        return next((code for code, i in named.items() if asked and i == asked[0]), None)

    def _token(self, code: str, key: str) -> int:
        found = model_code(code, self.tokens)
        if found is None:
            raise UserError(f"{key}: {code!r} is not among the model's {len(self.tokens)} languages")
        return self.tokens[found]


def language_scheme(data: DataConfig, tokenizer, tag_after_eos: bool = False) -> LanguageScheme:
    """The scheme of a model of these data settings whose tokenizer is `tokenizer`
    (data/tokenizer.py); `tag_after_eos`: its model.source_tag_after_eos."""
    pairs = tuple((c.src_lang, c.tgt_lang) for c in data.corpus_list())
    if data.language_tokens:
        if not tokenizer.languages:
            raise UserError(f"data.language_tokens: the tokenizer in {tokenizer.directory} has no language tokens")
        return LanguageScheme(pairs, tokens=dict(tokenizer.languages), tag_after_eos=tag_after_eos)
    if data.target_tags:
        tags = {lang: tokenizer.tags.get(language_tag(lang)) for lang in data.target_languages}
        return LanguageScheme(pairs, tags={lang: i for lang, i in tags.items() if i is not None})
    return LanguageScheme(pairs)
