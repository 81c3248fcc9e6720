"""A sentencepiece model read through a vocabulary of its own: the model segments the text, and
each piece's id is its place in the vocabulary, not in the model (Marian's vocab.json, which
OPUS-MT models ship; a piece the vocabulary lacks is <unk>, a character the model lacks is a
piece of its own). The ids 0-3 are the special ids of special_tokens.py.

`VocabularyProcessor` answers the calls the rest of the package makes on a
sentencepiece.SentencePieceProcessor, in vocabulary ids, so that a tokenizer of either kind is
used the same way.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

from mt_transformer.errors import UserError
from mt_transformer.files import write_text
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SPECIAL_PIECES = {PAD_ID: "<pad>", UNK_ID: "<unk>", BOS_ID: "<s>", EOS_ID: "</s>"}
CONTROL_IDS = (PAD_ID, BOS_ID, EOS_ID)  # ids that spell no text
WORD_START = "\u2581"  # sentencepiece's mark of a piece that begins a word


def read_vocabulary(path: str) -> list[str]:
    """The pieces of a vocabulary file (a JSON list, piece i has id i), checked."""
    try:
        with open(path, encoding="utf-8") as f:
            pieces = json.load(f)
    except (OSError, ValueError):
        raise UserError(f"{path}: not a readable vocabulary (a JSON list of pieces)") from None
    if not isinstance(pieces, list) or not all(isinstance(p, str) for p in pieces) or len(set(pieces)) != len(pieces):
        raise UserError(f"{path}: a vocabulary is a JSON list of distinct pieces")
    if [pieces[i] for i in SPECIAL_PIECES if i < len(pieces)] != list(SPECIAL_PIECES.values()):
        raise UserError(f"{path}: the vocabulary must begin with {', '.join(SPECIAL_PIECES.values())}")
    return pieces


def write_vocabulary(path: str, pieces: list[str]) -> None:
    write_text(path, json.dumps(pieces, ensure_ascii=False, indent=0) + "\n")


class VocabularyProcessor:
    """A sentencepiece processor whose ids are those of `pieces` (piece i has id i)."""

    def __init__(self, processor, pieces: list[str]):
        self.processor, self.pieces = processor, pieces
        self.ids = {piece: i for i, piece in enumerate(pieces)}

    def _ids(self, pieces: list[str]) -> list[int]:
        """Ids through the pieces' text, as Marian's tokenizer finds them: a character the
        sentencepiece model does not know is its own piece, known to the vocabulary or not."""
        return [self.ids.get(piece, UNK_ID) for piece in pieces]

    def encode(self, text, out_type=int, **options):
        """Ids (or pieces, or for out_type "proto" an object with .pieces, each with .id and
        .surface) of one text or a list of them, as SentencePieceProcessor.encode."""
        if out_type is str:
            return self.processor.encode(text, out_type=str, **options)
        if out_type == "proto":
            found = self.processor.encode(text, out_type="proto", **options).pieces
            pieces = [
                SimpleNamespace(id=i, surface=p.surface, piece=p.piece)
                for p, i in zip(found, self._ids([p.piece for p in found]))
            ]
            return SimpleNamespace(pieces=pieces)
        encoded = self.processor.encode(text, out_type=str, **options)
        return self._ids(encoded) if isinstance(text, str) else [self._ids(pieces) for pieces in encoded]

    def _text(self, ids: list[int]) -> str:
        return self.decode_pieces([self.pieces[i] for i in ids if i not in CONTROL_IDS])

    def decode(self, ids):
        """The text of one id list, or of each of a list of them; the special ids spell nothing."""
        if ids and isinstance(ids[0], list):
            return [self._text(one) for one in ids]
        return self._text(ids)

    def decode_pieces(self, pieces: list[str]) -> str:
        """The text of pieces as Marian's tokenizer writes it: a piece the sentencepiece model lacks
        (from the other side of a shared vocabulary) is kept as it is, its word marks as spaces."""
        return self.processor.decode_pieces(pieces).replace(WORD_START, " ").strip()

    def id_to_piece(self, i):
        """One id's piece, or each of a list's (as sentencepiece's)."""
        return [self.pieces[k] for k in i] if isinstance(i, list) else self.pieces[i]

    def piece_to_id(self, piece):
        """One piece's id, or each of a list's (as sentencepiece's)."""
        return [self.ids.get(p, UNK_ID) for p in piece] if isinstance(piece, list) else self.ids.get(piece, UNK_ID)

    def get_piece_size(self) -> int:
        return len(self.pieces)

    def is_control(self, i: int) -> bool:
        return i in CONTROL_IDS

    def is_unknown(self, i: int) -> bool:
        return i == UNK_ID

    def is_byte(self, i: int) -> bool:
        own = self.processor.piece_to_id(self.pieces[i])
        return own != self.processor.unk_id() and self.processor.is_byte(own)
