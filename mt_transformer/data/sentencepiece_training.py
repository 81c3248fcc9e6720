"""Training the sentencepiece models of a tokenizer (data/tokenizer.py): one joint model (the
paper's shared vocabulary) or one per side, with the fixed special ids of special_tokens.py and
the source tags as pieces of their own; what sentencepiece refuses is a one-line error."""

from __future__ import annotations

import functools
import io
import logging
import os
import re
from collections.abc import Iterable, Iterator

import sentencepiece as spm

from mt_transformer.data.from_text import auto_coverage
from mt_transformer.data.tokenizer import JOINT_FILE, SRC_FILE, TGT_FILE, Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.files import write_bytes
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

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
    normalization: str = "nmt_nfkc",
) -> None:
    """Train a sentencepiece model on `sentences` and write it atomically to `path`; each of
    `tags` becomes one piece (ids 4, 5, ... in order) that the text around it never merges into;
    with `byte_fallback` the 256 byte pieces <0x00>..<0xFF> spell what the other pieces cannot.
    Without `exact_size`, `vocab_size` is an upper bound (text too small for it makes fewer).
    `normalization`: sentencepiece's rule for the text it reads (nmt_nfkc_cf also folds case)."""
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
            normalization_rule_name=normalization,
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
    fold_source: bool = False,
) -> Tokenizer:
    """Train the joint model, or one per side, into `directory`; source `tags` are pieces of the
    source model. `character_coverage` 0 means choose it from the text (`auto_coverage`); the
    lines are then read twice, so they must be sequences, not one-shot iterators.
    `fold_source`: sources are read case-folded (data.fold_source_case): the source model folds
    what it reads; a joint model learns from folded sources and gets a source copy that folds."""
    options = dict(
        vocab_size=vocab_size, model_type=model_type, seed=seed, byte_fallback=byte_fallback, exact_size=exact_size
    )

    def train(lines, name, limit, tags=(), normalization="nmt_nfkc"):
        coverage = character_coverage or auto_coverage(lines)
        if not character_coverage:
            log.info("%s: character coverage %g (chosen from the text)", name, coverage)
        path = os.path.join(directory, name)
        train_sentencepiece(
            lines,
            path,
            max_sentences=limit,
            character_coverage=coverage,
            tags=tags,
            normalization=normalization,
            **options,
        )

    if joint:
        train(
            _Interleaved(_Folded(src_lines) if fold_source else src_lines, tgt_lines),
            JOINT_FILE,
            2 * max_sentences,
            tags,
        )
        if fold_source:
            write_bytes(os.path.join(directory, SRC_FILE), folding_copy(os.path.join(directory, JOINT_FILE)))
    else:
        train(src_lines, SRC_FILE, max_sentences, tags, "nmt_nfkc_cf" if fold_source else "nmt_nfkc")
        train(tgt_lines, TGT_FILE, max_sentences)
    return Tokenizer(directory)


@functools.cache
def _folding_spec() -> bytes:
    """sentencepiece's normalizer spec of the rule nmt_nfkc_cf (NFKC and case folding), taken
    from a model trained on a few characters: the library gives the spec of a rule no other way."""
    from sentencepiece import sentencepiece_model_pb2

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(["ab cd"] * 4),
        model_writer=model,
        vocab_size=8,
        hard_vocab_limit=False,
        normalization_rule_name="nmt_nfkc_cf",
        minloglevel=2,
    )
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model.getvalue())
    return proto.normalizer_spec.SerializeToString()


def folding_copy(path: str) -> bytes:
    """The sentencepiece model of `path` with the normalizer of nmt_nfkc_cf: the same pieces and
    ids, reading its text case-folded."""
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(path, "rb") as f:
        proto.ParseFromString(f.read())
    proto.normalizer_spec.ParseFromString(_folding_spec())
    return proto.SerializeToString()


class _Folded:
    """Lines as a case-folding sentencepiece model reads them (nmt_nfkc_cf), iterable again."""

    def __init__(self, lines: Iterable[str]):
        self.lines = lines

    def __iter__(self) -> Iterator[str]:
        fold = spm.SentencePieceNormalizer(rule_name="nmt_nfkc_cf", add_dummy_prefix=False, escape_whitespaces=False)
        for line in self.lines:
            yield fold.normalize(line)


class _Interleaved:
    """Source and target lines alternating (a joint model learns from both), iterable again."""

    def __init__(self, a: Iterable[str], b: Iterable[str]):
        self.a, self.b = a, b

    def __iter__(self) -> Iterator[str]:
        for x, y in zip(self.a, self.b):
            yield x
            yield y
