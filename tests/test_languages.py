from types import SimpleNamespace

import pytest

from mt_transformer.config import CorpusConfig, DataConfig
from mt_transformer.data.languages import language_scheme
from mt_transformer.errors import UserError


def tokenizer(tags=None, languages=None):
    return SimpleNamespace(tags=tags or {}, languages=languages or {}, directory="tok")


def two_way() -> DataConfig:
    corpora = (CorpusConfig(src_lang="de", tgt_lang="en"), CorpusConfig(src_lang="en", tgt_lang="de"))
    return DataConfig(corpora=corpora, target_tags=True)


def test_a_model_of_one_pair_has_no_heads():
    scheme = language_scheme(DataConfig(src_lang="de", tgt_lang="en"), tokenizer())
    assert scheme.leads() == scheme.token_leads() == ([], [])
    assert scheme.served() == {("de", "en"): ([], [])}
    assert scheme.language(([], [])) is None


def test_target_tags_begin_the_source_and_name_the_language_asked_for():
    scheme = language_scheme(two_way(), tokenizer(tags={"<2en>": 4, "<2de>": 5, "<news>": 6}))
    assert scheme.leads(tgt_lang="en") == ([4], []) and scheme.leads(tgt_lang="de") == ([5], [])
    assert scheme.token_leads() == ([], [])  # a training pair's tag is in its text
    assert scheme.served() == {("de", "en"): ([4], []), ("en", "de"): ([5], [])}
    assert scheme.language(([5], [])) == "de"
    with pytest.raises(UserError, match="--tgt-lang: required: this model translates into de, en"):
        scheme.leads()
    with pytest.raises(UserError, match="--tgt-lang: 'fr' is not among the model's target languages"):
        scheme.leads(tgt_lang="fr")


def test_language_tokens_begin_both_sides_by_model_codes_or_two_letter_ones():
    data = DataConfig(src_lang="deu_Latn", tgt_lang="eng_Latn", language_tokens=True)
    codes = {"deu_Latn": 7, "eng_Latn": 8, "fra_Latn": 9}
    scheme = language_scheme(data, tokenizer(languages=codes), tag_after_eos=True)
    assert scheme.tag_after_eos
    assert scheme.leads() == scheme.token_leads() == ([7], [8])
    assert scheme.leads("fr", "de") == ([9], [7]) and scheme.language(([9], [7])) == "deu_Latn"
    assert scheme.token_leads("en", "fr", ("data.src_lang", "data.tgt_lang")) == ([8], [9])
    assert len(scheme.served()) == 6 and scheme.served()[("de", "fr")] == ([7], [9])
    with pytest.raises(UserError, match="data.tgt_lang: 'xx' is not among the model's 3 languages"):
        scheme.token_leads("de", "xx", ("data.src_lang", "data.tgt_lang"))
    with pytest.raises(UserError, match="data.language_tokens: the tokenizer in tok has no language tokens"):
        language_scheme(data, tokenizer())
