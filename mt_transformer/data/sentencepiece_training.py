"""Training the sentencepiece models of a tokenizer (data/tokenizer.py): one joint model (the
paper's shared vocabulary) or one per side, with the fixed special ids of special_tokens.py and
the source tags as pieces of their own; what sentencepiece refuses is a one-line error."""

from __future__ import annotations

import io
import logging
import os
import re
from collections.abc import Iterable, Iterator

import sentencepiece as spm

from mt_transformer.data.from_text import auto_coverage
from mt_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from mt_transformer.data.tokenizer import JOINT_FILE, SRC_FILE, TGT_FILE, Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.files import write_bytes

log = logging.getLogger(__name__)


def train_sentencepiece(
    sentences: Iterable[str],
    path: str,
    vocab_size: int,
    model_type: str,
    character_coverage: float,
    max_sentences: int,
    seed: int,
    byte_fallback: bool,
    tags: Iterable[str] = (),
    exact_size: bool = True,
) -> None:
    """Train a sentencepiece model on `sentences` and write it atomically to `path`; each of
    `tags` becomes one piece (ids 4, 5, ... in order) that the text around it never merges into;
    with `byte_fallback` the 256 byte pieces <0x00>..<0xFF> spell what the other pieces cannot.
    Without `exact_size`, `vocab_size` is an upper bound (text too small for it makes fewer)."""
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
            pad_id=PAD_ID,
            unk_id=UNK_ID,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            max_sentence_length=1 << 16,
            user_defined_symbols=list(tags),
            byte_fallback=byte_fallback,
            hard_vocab_limit=exact_size,
            num_threads=os.cpu_count() or 1,
            minloglevel=2,
        )
    except RuntimeError as error:
        message = str(error).strip().splitlines()[-1] if str(error).strip() else repr(error)
        needed = re.search(r"smaller than required_chars\. \d+ vs (\d+)", message)
        if needed:
            raise UserError(
                f"data.vocab_size: {vocab_size} is too small for this data; it needs at least {needed.group(1)} "
                f"pieces (its characters, the special pieces{' and 256 byte pieces' if byte_fallback else ''})"
            ) from None
        limit = re.search(r"<= (\d+)", message)
        if "Vocabulary size" in message and limit:
            raise UserError(
                f"data.vocab_size: {vocab_size} is too large for this data; "
                f"at most {limit.group(1)} pieces are possible"
            ) from None
        raise UserError(f"sentencepiece training failed: {message}") from None
    write_bytes(path, model.getvalue())


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
    byte_fallback: bool,
    tags: Iterable[str] = (),
    exact_size: bool = True,
) -> Tokenizer:
    """Train the joint model, or one per side, into `directory`; source `tags` are pieces of the
    source model. `character_coverage` 0 means choose it from the text (`auto_coverage`); the
    lines are then read twice, so they must be sequences, not one-shot iterators."""
    options = dict(
        vocab_size=vocab_size, model_type=model_type, seed=seed, byte_fallback=byte_fallback, exact_size=exact_size
    )

    def train(lines, name, limit, tags=()):
        coverage = character_coverage or auto_coverage(lines)
        if not character_coverage:
            log.info("%s: character coverage %g (chosen from the text)", name, coverage)
        train_sentencepiece(
            lines, os.path.join(directory, name), max_sentences=limit, character_coverage=coverage, tags=tags, **options
        )

    if joint:
        train(_Interleaved(src_lines, tgt_lines), JOINT_FILE, 2 * max_sentences, tags)
    else:
        train(src_lines, SRC_FILE, max_sentences, tags)
        train(tgt_lines, TGT_FILE, max_sentences)
    return Tokenizer(directory)


class _Interleaved:
    """Source and target lines alternating (a joint model learns from both), iterable again."""

    def __init__(self, a: Iterable[str], b: Iterable[str]):
        self.a, self.b = a, b

    def __iter__(self) -> Iterator[str]:
        for x, y in zip(self.a, self.b):
            yield x
            yield y
