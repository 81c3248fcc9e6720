"""An NLLB or M2M100 tokenizer (sentencepiece.bpe.model, and the vocabulary transformers reads
beside it: NLLB's tokenizer.json, M2M100's vocab.json) read for an import: the order of our ids
in its vocabulary, and its language tokens.

Both put start of sentence at 0, padding at 1, end of sentence at 2 and unknown at 3, and start
decoding from end of sentence: our ids 0-3 (padding, unknown, start, end) take the rows of 1, 3,
2 and 2, and their other ids follow in order (the unused <s> named <unused0>). A sentence of
language xx reads "xx_Tok text </s>" (NLLB; its legacy layout "text </s> xx_Tok", which our
model reads with model.source_tag_after_eos) or "__xx__ text </s>" (M2M100), and a translation
into yy begins with yy's token: the checkpoint's languages.json (code -> token) and
data.language_tokens say so to our tokenizer and translator.
"""

from __future__ import annotations

import os
import re

from mt_transformer.errors import UserError, first_line
from mt_transformer.exchange.marian_tokenizer import ImportedVocabularies, id_order
from mt_transformer.exchange.tokenizer_json import sentencepiece_from_tokenizer_json

SPM_FILE = "sentencepiece.bpe.model"
NLLB_CODE = re.compile(r"[a-z]{3}_[A-Z][a-z]{3}")  # eng_Latn
M2M100_TOKEN = re.compile(r"__[a-z]{2,3}__")  # __en__


def language_tokens(tokenizer) -> dict[str, str]:
    """The tokenizer's languages: code -> token (M2M100: de -> __de__; NLLB: deu_Latn -> deu_Latn)."""
    if hasattr(tokenizer, "lang_code_to_id"):  # M2M100Tokenizer
        return {code: tokenizer.get_lang_token(code) for code in tokenizer.lang_code_to_id}
    special = tokenizer.all_special_tokens  # NllbTokenizer's (ours for an M2M100 model: __xx__ tokens)
    return {token: token for token in special if NLLB_CODE.fullmatch(token)} | {
        token[2:-2]: token for token in special if M2M100_TOKEN.fullmatch(token)
    }


def legacy_layout(tokenizer, vocab: dict[str, int], code: str, token: str, directory: str) -> bool:
    """Whether the tokenizer writes a source "text </s> token" (NLLB's legacy layout, which our
    model reads with model.source_tag_after_eos) rather than "token text </s>"."""
    tokenizer.src_lang = code if hasattr(tokenizer, "lang_code_to_id") else token  # NllbTokenizer: the token
    ids = tokenizer("a").input_ids
    eos = vocab["</s>"]
    if ids[-2:] == [eos, vocab[token]]:
        return True
    if ids[0] != vocab[token] or ids[-1] != eos:
        raise UserError(f"{directory}: the tokenizer writes neither the language code first nor </s> last")
    return False


def read_m2m100_tokenizer(directory: str, hf_config, transformers, scratch: str) -> ImportedVocabularies:
    """The NLLB or M2M100 tokenizer of a model directory, checked against the model's config; one
    saved as tokenizer.json alone gets its sentencepiece model made in the directory `scratch`."""
    spm_file = SPM_FILE
    if not os.path.isfile(os.path.join(directory, SPM_FILE)):
        if not os.path.isfile(os.path.join(directory, "tokenizer.json")):
            raise UserError(f"{directory}: neither {SPM_FILE} nor tokenizer.json (an NLLB or M2M100 tokenizer's)")
        spm_file = os.path.join(scratch, SPM_FILE)  # absolute: os.path.join(directory, it) is it
        with open(spm_file, "wb") as f:
            f.write(sentencepiece_from_tokenizer_json(os.path.join(directory, "tokenizer.json")))
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory, trust_remote_code=False)
    except Exception as error:  # transformers and tokenizers raise their own types on files of other shapes
        raise UserError(f"{directory}: its tokenizer cannot be read ({first_line(error, 120)})") from None
    vocab = {**tokenizer.get_vocab(), **getattr(tokenizer, "lang_token_to_id", {})}  # M2M100's lacks the languages
    languages = language_tokens(tokenizer)
    if not languages:
        raise UserError(f"{directory}: the tokenizer has no language codes (an NLLB or M2M100 tokenizer has)")
    for field, piece in (("pad_token_id", "<pad>"), ("eos_token_id", "</s>"), ("decoder_start_token_id", "</s>")):
        if getattr(hf_config, field) != vocab.get(piece):
            raise UserError(f"{field}: {getattr(hf_config, field)} in the config but {piece} is {vocab.get(piece)}")
    codes = {token: code for code, token in languages.items()}  # NllbTokenizer names its languages by tokens
    defaults = (getattr(tokenizer, name, None) for name in ("src_lang", "tgt_lang"))
    settings = dict(zip(("source_lang", "target_lang"), [codes.get(lang, lang) for lang in defaults]))
    legacy = legacy_layout(tokenizer, vocab, *next(iter(languages.items())), directory)  # it sets src_lang
    order, pieces = id_order(vocab, hf_config.vocab_size, hf_config.decoder_start_token_id, directory)
    files = (spm_file, spm_file)
    return ImportedVocabularies(directory, settings, False, order, pieces, order, pieces, files, languages, legacy)
