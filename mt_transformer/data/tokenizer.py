"""Subword tokenization with sentencepiece: one joint model (the paper's shared vocabulary) or
one model per side, with the fixed special ids of special_tokens.py. An imported model's
tokenizer is one model per side read through vocabularies of their own (data/vocabulary.py):
one for both sides, or one per side.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os

import sentencepiece as spm

from mt_transformer.config import tag_language
from mt_transformer.data.language_codes import model_code
from mt_transformer.data.vocabulary import WORD_START, VocabularyProcessor, read_vocabulary
from mt_transformer.errors import UserError
from mt_transformer.special_tokens import UNK_ID

JOINT_FILE = "spm.model"
SRC_FILE, TGT_FILE = "spm.src.model", "spm.tgt.model"
VOCAB_FILE = "vocab.json"  # one vocabulary for both sides' models
SRC_VOCAB_FILE, TGT_VOCAB_FILE = "vocab.src.json", "vocab.tgt.json"
# the language tokens of an imported NLLB or M2M100 model: language code -> its piece
LANGUAGES_FILE = "languages.json"

log = logging.getLogger(__name__)


def user_symbols(path: str) -> dict[str, int]:
    """The user-defined pieces (source tags) of a sentencepiece model file, with their ids."""
    from sentencepiece import sentencepiece_model_pb2

    model = sentencepiece_model_pb2.ModelProto()
    with open(path, "rb") as f:
        model.ParseFromString(f.read())
    user_defined = sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED
    return {p.piece: i for i, p in enumerate(model.pieces) if p.type == user_defined}


def encode_lines(processor: spm.SentencePieceProcessor, lines: list[str], **options) -> list[list[int]]:
    """Encode lines into ids. A sampled segmentation (`enable_sampling`) is drawn one line at a
    time: sentencepiece encodes a list on threads of its own, each starting its random generator
    from the seed again, so every call with a list would draw the same segmentations."""
    if options.get("enable_sampling"):
        return [processor.encode(line, out_type=int, **options) for line in lines]
    return processor.encode(lines, out_type=int, **options)


def encode_tagged(processor: spm.SentencePieceProcessor, lines: list[str], tags: dict[str, int], **options):
    """Encode lines into ids; the tags a line begins with (space-separated, from `tags`) become
    their own ids without the word-boundary piece sentencepiece would put before them."""
    if not tags:
        return encode_lines(processor, lines, **options)
    heads, rests = [], []
    for line in lines:
        words = line.split(" ")
        n = 0
        while n < len(words) and words[n] in tags:
            n += 1
        heads.append([tags[w] for w in words[:n]])
        rests.append(" ".join(words[n:]) if n else line)
    return [head + ids for head, ids in zip(heads, encode_lines(processor, rests, **options))]


def _load(path: str) -> spm.SentencePieceProcessor:
    if not os.path.isfile(path):
        raise UserError(f"{path}: sentencepiece model not found")
    processor = spm.SentencePieceProcessor()
    try:
        processor.load(path)
    except (OSError, RuntimeError):
        raise UserError(f"{path}: not a valid sentencepiece model") from None
    return processor


def read_languages(path: str, src, tgt) -> dict[str, int]:
    """The language tokens of languages.json (code -> piece), as code -> id, each a piece of both
    sides' vocabularies with one id."""
    try:
        with open(path, encoding="utf-8") as f:
            pieces = json.load(f)
    except (OSError, ValueError):
        raise UserError(f"{path}: not readable (a JSON object of language code -> token)") from None
    if not isinstance(pieces, dict) or not all(isinstance(p, str) for p in pieces.values()):
        raise UserError(f"{path}: a JSON object of language code -> token")
    ids = {code: src.piece_to_id(piece) for code, piece in pieces.items()}
    for code, piece in pieces.items():
        if ids[code] == UNK_ID or tgt.piece_to_id(piece) != ids[code]:
            raise UserError(f"{path}: {piece!r} ({code}) is not one piece of both vocabularies")
    return ids


class Tokenizer:
    """Source and target sentencepiece processors (the same one when the vocabulary is joint);
    `joint`: one id space for both sides. `languages`: the language tokens of an imported NLLB or
    M2M100 model (code -> id), which begin its sources and targets (data.language_tokens)."""

    languages: dict[str, int] = {}

    def __init__(self, directory: str):
        self.directory = directory
        if os.path.isfile(self.path(JOINT_FILE)):
            self.files, self.joint = [JOINT_FILE], True
            self.src = self.tgt = _load(self.path(JOINT_FILE))
            self.tags = user_symbols(self.path(JOINT_FILE))  # source tag -> id
            if os.path.isfile(self.path(SRC_FILE)):  # the joint pieces read case-folded (data.fold_source_case)
                self.files.append(SRC_FILE)
                self.src = _load(self.path(SRC_FILE))
            return
        self.files = [SRC_FILE, TGT_FILE]
        self.src, self.tgt = _load(self.path(SRC_FILE)), _load(self.path(TGT_FILE))
        self.joint = os.path.isfile(self.path(VOCAB_FILE))
        vocabularies = [VOCAB_FILE] * 2 if self.joint else [SRC_VOCAB_FILE, TGT_VOCAB_FILE]
        if not os.path.isfile(self.path(vocabularies[0])):  # each model with its own ids
            self.tags = user_symbols(self.path(SRC_FILE))
            return
        self.files += sorted(set(vocabularies))
        src_pieces = read_vocabulary(self.path(vocabularies[0]))
        tgt_pieces = src_pieces if self.joint else read_vocabulary(self.path(vocabularies[1]))
        self.src, self.tgt = VocabularyProcessor(self.src, src_pieces), VocabularyProcessor(self.tgt, tgt_pieces)
        self.tags = {piece: i for i, piece in enumerate(src_pieces) if tag_language(piece)}
        if os.path.isfile(self.path(LANGUAGES_FILE)):
            self.files.append(LANGUAGES_FILE)
            self.languages = read_languages(self.path(LANGUAGES_FILE), self.src, self.tgt)
            self.tags |= {self.src.id_to_piece(i): i for i in self.languages.values()}

    def path(self, name: str) -> str:
        return os.path.join(self.directory, name)

    @staticmethod
    def exists(directory: str) -> bool:
        return os.path.isfile(os.path.join(directory, JOINT_FILE)) or (
            os.path.isfile(os.path.join(directory, SRC_FILE)) and os.path.isfile(os.path.join(directory, TGT_FILE))
        )

    @property
    def model_files(self) -> list[str]:
        """The sentencepiece model files among `files`, the source's first: the joint one (with the
        source's case-folding copy of it, if any), or the source's and the target's."""
        if self.files[0] == JOINT_FILE:
            return [SRC_FILE, JOINT_FILE] if SRC_FILE in self.files else [JOINT_FILE]
        return self.files[:2]

    def paths(self) -> list[str]:
        return [self.path(name) for name in self.files]

    def fingerprint(self) -> str:
        """A digest of the model files and their names: what must share one tokenizer (the ranks
        of a run, the members of an ensemble, the checkpoints of an average) compares it."""
        digest = hashlib.sha256()
        for name in self.files:
            digest.update(name.encode() + b"\0")
            with open(os.path.join(self.directory, name), "rb") as f:
                digest.update(f.read())
        return digest.hexdigest()

    @property
    def src_vocab_size(self) -> int:
        return self.src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self.tgt.get_piece_size()

    def encode_src(self, lines: list[str], **options) -> list[list[int]]:
        """Ids of source lines, the tags they begin with kept whole; `options` are sentencepiece's
        (a drawn segmentation)."""
        return encode_tagged(self.src, lines, self.tags, **options)

    def encode_tgt(self, lines: list[str], **options) -> list[list[int]]:
        """Ids of target lines; a language token a line begins with is kept whole."""
        if not self.languages:
            return encode_lines(self.tgt, lines, **options)
        return encode_tagged(self.tgt, lines, {self.tgt.id_to_piece(i): i for i in self.languages.values()}, **options)

    def language_id(self, code: str, key: str) -> int:
        """The id of a language's token, by the model's code or a two-letter one (de for NLLB's
        deu_Latn, data/language_codes.py); one not in the model is a one-line error naming `key`."""
        found = model_code(code, self.languages)
        if found is None:
            raise UserError(f"{key}: {code!r} is not among the model's {len(self.languages)} languages")
        return self.languages[found]

    def src_pieces(self, ids: list[int]) -> list[str]:
        return self.src.id_to_piece(list(ids))

    def tgt_pieces(self, ids: list[int]) -> list[str]:
        return self.tgt.id_to_piece(list(ids))

    def decode_tgt(self, ids: list[list[int]]) -> list[str]:
        return self.tgt.decode([self._spelled(one) for one in ids])

    def _spelled(self, ids: list[int]) -> list[int]:
        """The ids that spell text: without language tokens (an output begins with one)."""
        if not self.languages:
            return ids
        languages = set(self.languages.values())
        return [i for i in ids if i not in languages]

    def src_unknowns(self, text: str) -> list[tuple[int, str]]:
        """The pieces of the encoded source `text` that are <unk>: (position, the text it stands
        for). Source tags a line begins with are left out of the text and the positions alike."""
        head = 0
        words = text.split(" ")
        while head < len(words) and words[head] in self.tags:
            head += 1
        rest = " ".join(words[head:])
        pieces = self.src.encode(rest, out_type="proto").pieces if rest else []
        return [(head + i, p.surface.strip()) for i, p in enumerate(pieces) if p.id == UNK_ID]

    def detokenize(self, ids: list[int], fills: list[str]) -> tuple[str, int]:
        """Target text of `ids` without sentencepiece's "⁇": the k-th <unk> becomes fills[k] (or
        nothing, past the end of `fills`), and byte pieces that spell no valid UTF-8 are left out.
        Returns the text and how many unknowns (an <unk>, or a run of broken bytes) it had."""
        ids = self._spelled(ids)
        if UNK_ID not in ids and not any(self.tgt.is_byte(i) for i in ids):
            return self.tgt.decode(ids), 0
        pieces, unknowns, holes, run = [], 0, 0, bytearray()
        for i in [*ids, None]:  # None closes a last run of bytes
            if i is not None and self.tgt.is_byte(i):
                run.append(int(self.tgt.id_to_piece(i)[1:-1], 16))  # "<0xC3>" -> 0xC3
                continue
            if run:
                text = run.decode("utf-8", errors="ignore")
                unknowns += text.encode("utf-8") != run
                pieces.append(text.replace(" ", WORD_START))
                run = bytearray()
            if i == UNK_ID:
                pieces.append(fills[holes] if holes < len(fills) else "")
                holes += 1
                unknowns += 1
            elif i is not None:
                pieces.append(self.tgt.id_to_piece(i))
        text = self.tgt.decode_pieces([p for p in pieces if p])
        return " ".join(text.split()), unknowns
