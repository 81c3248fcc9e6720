"""A Marian tokenizer (source.spm, target.spm, vocab.json, target_vocab.json,
tokenizer_config.json) read for an import, and the order of our ids in its vocabulary.

Marian's vocabulary ids are not sentencepiece's, and OPUS-MT puts end of sentence at 0, unknown
at 1 and padding last, and starts decoding from padding: our ids 0-3 (padding, unknown, start,
end) take the rows of theirs, padding's row twice when it is also the start, and the other ids
follow in their order; the tokenizer reads each side's sentencepiece model through the
vocabulary in that order (data/vocabulary.py). Target-language tokens >>xx<< become our target
tags <2xx>.
"""

from __future__ import annotations

import dataclasses
import os

from mt_transformer.config import language_tag
from mt_transformer.data.vocabulary import SPECIAL_PIECES
from mt_transformer.errors import UserError
from mt_transformer.files import read_json


def id_order(vocab: dict[str, int], rows: int, start: int | None, path: str) -> tuple[list[int], list[str]]:
    """For each of our ids, the id of theirs whose rows it takes, and its piece: padding, unknown,
    the decoder `start` (None: their <s>, else padding; the source never starts with it), end of
    sentence, then their other ids in order. Target-language tokens >>xx<< are named <2xx>."""
    missing = [piece for piece in ("<pad>", "<unk>", "</s>") if piece not in vocab]
    if missing:
        raise UserError(f"{path}: no {missing[0]} in the vocabulary")
    if not all(isinstance(i, int) and 0 <= i < rows for i in vocab.values()):
        raise UserError(f"{path}: ids outside the model's {rows} embedding rows")
    pad, unk, eos = vocab["<pad>"], vocab["<unk>"], vocab["</s>"]
    specials = [pad, unk, vocab.get("<s>", pad) if start is None else start, eos]
    names = {i: piece for piece, i in vocab.items()}
    rest = [i for i in range(rows) if i not in set(specials)]
    pieces = [_our_piece(names.get(i), i) for i in rest]
    return specials + rest, list(SPECIAL_PIECES.values()) + pieces


def _our_piece(piece: str | None, i: int) -> str:
    """A piece of theirs as our vocabulary names it: >>xx<< as <2xx>; one of our special pieces
    that is not special here (NLLB's unused <s>), or a row without a piece, as <unusedI>."""
    if piece is None or piece in SPECIAL_PIECES.values():
        return f"<unused{i}>"
    if piece.startswith(">>") and piece.endswith("<<") and len(piece) > 4:
        return language_tag(piece[2:-2])
    return piece


def spm_settings(path: str) -> dict:
    """data settings that describe a sentencepiece model file, from its trainer spec."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    spec = proto.trainer_spec
    kinds = {spec.UNIGRAM: "unigram", spec.BPE: "bpe"}
    if spec.model_type not in kinds:
        raise UserError(f"{path}: a sentencepiece model of another type than unigram or bpe")
    return dict(
        spm_type=kinds[spec.model_type],
        character_coverage=round(spec.character_coverage, 6),
        byte_fallback=spec.byte_fallback,
    )


@dataclasses.dataclass
class ImportedVocabularies:
    """An imported tokenizer's files and, per side, our ids' order (the id of theirs each takes)
    and pieces; the sides are the same when the vocabulary is shared."""

    directory: str
    settings: dict  # its tokenizer_config.json
    separate: bool
    src_order: list[int]
    src_pieces: list[str]
    tgt_order: list[int]
    tgt_pieces: list[str]
    spm_files: tuple[str, str] = ("source.spm", "target.spm")  # each side's sentencepiece model in `directory`
    languages: dict[str, str] = dataclasses.field(default_factory=dict)  # NLLB, M2M100: code -> token
    legacy: bool = False  # NLLB's legacy layout: a source's language code after its </s>


def read_marian_tokenizer(directory: str, hf_config) -> ImportedVocabularies:
    """The Marian tokenizer of a model directory, checked against the model's config."""
    path = os.path.join(directory, "tokenizer_config.json")
    settings = read_json(path, "the tokenizer's settings", dict, directory) if os.path.isfile(path) else {}
    separate = bool(settings.get("separate_vocabs", False))
    names = ["source.spm", "target.spm", "vocab.json"] + ["target_vocab.json"] * separate
    for name in names:
        if not os.path.isfile(os.path.join(directory, name)):
            raise UserError(f"{directory}: no {name} (a Marian tokenizer: {', '.join(names)})")
    if separate == getattr(hf_config, "share_encoder_decoder_embeddings", True):
        raise UserError(f"{path}: separate_vocabs {separate} does not fit the model's embeddings")
    src_rows = hf_config.vocab_size
    tgt_rows = getattr(hf_config, "decoder_vocab_size", None) or src_rows
    tgt_path = os.path.join(directory, names[-1])
    tgt_vocab = read_json(tgt_path, "the target vocabulary", dict, directory)
    tgt_order, tgt_pieces = id_order(tgt_vocab, tgt_rows, hf_config.decoder_start_token_id, tgt_path)
    for field, piece in (("pad_token_id", "<pad>"), ("eos_token_id", "</s>")):
        if getattr(hf_config, field) != tgt_vocab.get(piece):
            raise UserError(f"{field}: {getattr(hf_config, field)} in the config but {piece} is {tgt_vocab.get(piece)}")
    src_order, src_pieces = tgt_order, tgt_pieces
    if separate:
        src_path = os.path.join(directory, "vocab.json")
        src_vocab = read_json(src_path, "the source vocabulary", dict, directory)
        src_order, src_pieces = id_order(src_vocab, src_rows, None, src_path)
    return ImportedVocabularies(directory, settings, separate, src_order, src_pieces, tgt_order, tgt_pieces)
