"""Subword tokenization with sentencepiece: one joint model (the paper's shared vocabulary) or
one model per side. Special ids are fixed: pad 0, unk 1, bos 2, eos 3.
"""

from __future__ import annotations

import io
import os
import re
from typing import Iterable, Iterator

import sentencepiece as spm

from .config import UserError
from .files import write_bytes

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
JOINT_FILE = "spm.model"
SRC_FILE, TGT_FILE = "spm.src.model", "spm.tgt.model"


def train_sentencepiece(
    sentences: Iterable[str],
    path: str,
    vocab_size: int,
    model_type: str = "unigram",
    character_coverage: float = 1.0,
    max_sentences: int = 2_000_000,
    seed: int = 1,
) -> None:
    """Train a sentencepiece model on `sentences` and write it atomically to `path`."""
    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences),
            model_writer=model,
            vocab_size=vocab_size,
            model_type=model_type,
            character_coverage=character_coverage,
            input_sentence_size=max_sentences,
            shuffle_input_sentence=True,
            pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            max_sentence_length=1 << 16,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
        )
    except RuntimeError as error:
        message = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
        limit = re.search(r"<= (\d+)", message)
        if "Vocabulary size" in message and limit:
            raise UserError(f"data.vocab_size: {vocab_size} is too large for this data; "
                            f"at most {limit.group(1)} pieces are possible") from None
        raise UserError(f"sentencepiece training failed: {message}") from None
    write_bytes(path, model.getvalue())


def _load(path: str) -> spm.SentencePieceProcessor:
    if not os.path.isfile(path):
        raise UserError(f"{path}: sentencepiece model not found")
    processor = spm.SentencePieceProcessor()
    try:
        processor.load(path)
    except (OSError, RuntimeError):
        raise UserError(f"{path}: not a valid sentencepiece model") from None
    return processor


class Tokenizer:
    """Source and target sentencepiece processors (the same one when the vocabulary is joint)."""

    def __init__(self, directory: str):
        self.directory = directory
        joint = os.path.join(directory, JOINT_FILE)
        self.joint = os.path.isfile(joint)
        if self.joint:
            self.files = [JOINT_FILE]
            self.src = self.tgt = _load(joint)
        else:
            self.files = [SRC_FILE, TGT_FILE]
            self.src = _load(os.path.join(directory, SRC_FILE))
            self.tgt = _load(os.path.join(directory, TGT_FILE))

    @staticmethod
    def exists(directory: str) -> bool:
        return os.path.isfile(os.path.join(directory, JOINT_FILE)) or (
            os.path.isfile(os.path.join(directory, SRC_FILE)) and os.path.isfile(os.path.join(directory, TGT_FILE))
        )

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def encode_src(self, lines: list[str]) -> list[list[int]]:
        return self.src.encode(lines, out_type=int)

    def encode_tgt(self, lines: list[str]) -> list[list[int]]:
        return self.tgt.encode(lines, out_type=int)

    def src_pieces(self, ids: list[int]) -> list[str]:
        return [self.src.id_to_piece(i) for i in ids]

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        return [self.tgt.id_to_piece(i) for i in ids]

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        return self.tgt.decode(ids)


def train_tokenizer(
    directory: str,
    src_lines: Iterable[str],
    tgt_lines: Iterable[str],
    joint: bool,
    vocab_size: int,
    model_type: str,
    character_coverage: float,
    max_sentences: int,
    seed: int,
) -> Tokenizer:
    """Train the joint model, or one per side, into `directory`."""
    options = dict(vocab_size=vocab_size, model_type=model_type, character_coverage=character_coverage, seed=seed)
    if joint:
        both = _interleave(src_lines, tgt_lines)
        train_sentencepiece(both, os.path.join(directory, JOINT_FILE), max_sentences=2 * max_sentences, **options)
    else:
        train_sentencepiece(src_lines, os.path.join(directory, SRC_FILE), max_sentences=max_sentences, **options)
        train_sentencepiece(tgt_lines, os.path.join(directory, TGT_FILE), max_sentences=max_sentences, **options)
    return Tokenizer(directory)


def _interleave(a: Iterable[str], b: Iterable[str]) -> Iterator[str]:
    for x, y in zip(a, b):
        yield x
        yield y
