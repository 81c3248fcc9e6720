"""Edits of an imported model's vocabulary (mt-import), decided before its weights are copied,
so that only the rows kept are ever made:

- add a language: a new language token (spelled as the model's others are: NLLB's xxx_Latn,
  M2M100's __xx__) after the others, its embedding row copied from a related language's token,
  or their mean, for a fine-tune to learn it from;
- trim to the text at hand: only the special ids, the kept languages' tokens, the pieces that
  given text files use and those these are merged from keep their rows of the embedding and
  output matrices (most of NLLB's 256,206 x 1,024 rows). On a kept piece the trimmed model's
  logits are the full model's; its probabilities are those renormalized over the kept pieces.

Both need one vocabulary for source and target (NLLB's and M2M100's). Each edit gives the
vocabularies whose orders say which row of the original each of ours takes (-1: a row of ours
alone); with_rows makes such a model from one of ours (the export back).
"""

from __future__ import annotations

import dataclasses
import os

import torch

from mt_transformer.data.language_codes import model_code
from mt_transformer.data.vocabulary import VocabularyProcessor
from mt_transformer.errors import UserError
from mt_transformer.exchange.marian_tokenizer import ImportedVocabularies
from mt_transformer.model.transformer import Transformer
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

ROW_MODULES = ("src_embed", "tgt_embed", "output")  # the modules whose rows are vocabulary ids
IMPORTED_START = "<unused0>"  # our name for NLLB's and M2M100's <s> row, kept for their export
LINES_PER_CALL = 10_000  # lines encoded per sentencepiece call while reading text to keep


def with_rows(model: Transformer, config, rows: torch.Tensor) -> Transformer:
    """A model of the same weights whose vocabulary is the ids `rows` of `model`'s, in that order."""
    edited = Transformer.unfilled(config, len(rows), len(rows), share_vocab=True).eval()  # every weight written below
    source = model.state_dict()
    with torch.no_grad():
        for name, tensor in edited.state_dict().items():
            in_rows = name.split(".")[0] in ROW_MODULES
            tensor.copy_(source[name].index_select(0, rows) if in_rows else source[name])
    return edited


def _language_token(languages: dict[str, str], code: str) -> str:
    """The token of a new language, spelled as the model's others are."""
    if all(token == f"__{known}__" for known, token in languages.items()):
        return f"__{code}__"
    if all(token == known for known, token in languages.items()):
        return code
    raise UserError("--add-language: the model's language tokens follow no one pattern to spell a new one by")


def add_language(
    hf_model, vocabularies: ImportedVocabularies, code: str, init_from: str | None
) -> tuple[ImportedVocabularies, torch.Tensor]:
    """The vocabularies with language `code` added last, and its embedding row (1, d_model): the
    transformers model's row of `init_from`'s token (None: the mean of every language token's)."""
    languages = vocabularies.languages
    if not languages or vocabularies.separate:
        raise UserError("--add-language: for a model with language tokens and one vocabulary (NLLB, M2M100)")
    if code in languages:
        raise UserError(f"--add-language: {code!r} is one of the model's languages already")
    related = model_code(init_from, languages) if init_from is not None else None  # de: NLLB's deu_Latn
    if init_from is not None and related is None:
        raise UserError(f"--init-from: {init_from!r} is not among the model's {len(languages)} language codes")
    token = _language_token(languages, code)
    ids = {piece: i for i, piece in enumerate(vocabularies.tgt_pieces)}
    if token in ids:
        raise UserError(f"--add-language: {token!r} is a piece of the vocabulary already")
    like = [ids[languages[related]]] if related else [ids[t] for t in languages.values()]
    theirs = [vocabularies.tgt_order[i] for i in like]
    with torch.no_grad():
        row = hf_model.get_input_embeddings().weight[theirs].mean(0, keepdim=True)  # (1, d_model)
    order = [*vocabularies.tgt_order, -1]  # a row of ours alone
    return _with_pieces(vocabularies, [*vocabularies.tgt_pieces, token], order, {**languages, code: token}), row


def _with_pieces(vocabularies: ImportedVocabularies, pieces, order, languages) -> ImportedVocabularies:
    """The vocabularies with these pieces on both sides, their order in the original's ids, and languages."""
    return dataclasses.replace(
        vocabularies, src_pieces=pieces, tgt_pieces=pieces, src_order=order, tgt_order=order, languages=languages
    )


def used_ids(spm_path: str, pieces: list[str], paths: list[str]) -> set[int]:
    """The ids of the vocabulary `pieces` that the text of `paths` (one sentence per line) is
    made of, as the imported tokenizer segments it."""
    import sentencepiece

    processor = VocabularyProcessor(sentencepiece.SentencePieceProcessor(model_file=spm_path), pieces)
    found: set[int] = set()
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                lines = [line.strip() for line in f]
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"--keep-vocab: {path}: not readable as UTF-8 text ({error})") from None
        for start in range(0, len(lines), LINES_PER_CALL):
            for ids in processor.encode(lines[start : start + LINES_PER_CALL]):
                found.update(ids)
    return found


def with_parts(kept: set[int], pieces: list[str]) -> set[int]:
    """The ids `kept` and those of every piece a kept one splits into (two pieces of the
    vocabulary, each split again): every merge that makes a kept piece then has its inputs, so
    a BPE tokenizer given only these pieces (transformers', exchange/m2m100_export.py) splits
    text made of kept pieces as the full one does."""
    ids = {piece: i for i, piece in enumerate(pieces)}
    found, todo = set(kept), list(kept)
    while todo:
        piece = pieces[todo.pop()]
        for cut in range(1, len(piece)):
            left, right = ids.get(piece[:cut]), ids.get(piece[cut:])
            if left is None or right is None:
                continue
            for part in (left, right):
                if part not in found:
                    found.add(part)
                    todo.append(part)
    return found


def trim(vocabularies: ImportedVocabularies, paths: list[str], keep_languages: list[str]) -> ImportedVocabularies:
    """The vocabularies reduced to the special ids, the tokens of `keep_languages` and the pieces
    the text files `paths` use, in their order."""
    if vocabularies.separate:
        raise UserError("--keep-vocab: for a model with one vocabulary for both sides")
    pieces = vocabularies.tgt_pieces
    spm_path = os.path.join(vocabularies.directory, vocabularies.spm_files[0])
    ids = {piece: i for i, piece in enumerate(pieces)}
    languages = {code: vocabularies.languages[code] for code in keep_languages if code in vocabularies.languages}
    kept = {PAD_ID, UNK_ID, BOS_ID, EOS_ID} | {ids[token] for token in languages.values()}
    kept |= {ids[piece] for piece in (IMPORTED_START,) if piece in ids}
    kept = with_parts(kept | used_ids(spm_path, pieces, paths), pieces)
    rows = sorted(kept)  # an added language, last, stays last
    order = [vocabularies.tgt_order[i] for i in rows]
    return _with_pieces(vocabularies, [pieces[i] for i in rows], order, languages)
