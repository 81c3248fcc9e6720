"""A sentencepiece BPE model made from a tokenizer.json alone, as transformers 5 saves an NLLB or
M2M100 tokenizer (without its sentencepiece.bpe.model).

transformers built that tokenizer.json from a sentencepiece BPE model: its normalizer is the
model's precompiled character map, its pre-tokenizer the word-start mark, its merges the order in
which sentencepiece joins pieces (the higher a piece's score, the earlier). So the model comes back
with each piece scored by minus the rank of the merge that makes it (pieces no merge makes: single
characters, scored below every merge) and the map as its normalizer: the same pieces for every text.
"""

from __future__ import annotations

import base64
import os

from mt_transformer.errors import UserError, first_line
from mt_transformer.files import read_json

NOT_MERGED = -1e9  # a piece no merge makes: a single character


def _merge_ranks(merges: list) -> dict[str, int]:
    """The piece each merge makes -> the rank of the first merge that makes it."""
    ranks: dict[str, int] = {}
    for rank, merge in enumerate(merges):
        left, right = merge if isinstance(merge, list) else merge.split(" ")
        ranks.setdefault(left + right, rank)
    return ranks


def _charsmap(normalizer: dict | None, path: str) -> bytes:
    for step in (normalizer or {}).get("normalizers", [normalizer] if normalizer else []):
        if step.get("type") == "Precompiled":
            return base64.b64decode(step["precompiled_charsmap"])
    raise UserError(f"{path}: no precompiled normalizer (not a tokenizer made from a sentencepiece model)")


def sentencepiece_from_tokenizer_json(path: str) -> bytes:
    """The serialized sentencepiece model of the tokenizer.json at `path`: ids 0-2 <unk>, <s>, </s>
    (sentencepiece.bpe.model's), then the BPE vocabulary's other pieces in the order of their ids
    (tokens added beside the vocabulary, such as language codes, are not pieces)."""
    try:
        return _sentencepiece_model(read_json(path, "the tokenizer", dict, os.path.dirname(path)), path)
    except (KeyError, TypeError, AttributeError, ValueError) as error:  # a shape other than the one described
        reason = f"{type(error).__name__}: {first_line(error, 80)}"
        raise UserError(f"{path}: not a tokenizer made from a sentencepiece BPE model ({reason})") from None


def _sentencepiece_model(found: dict, path: str) -> bytes:
    from sentencepiece import sentencepiece_model_pb2 as proto

    model = found.get("model", {})
    if model.get("type") != "BPE" or "merges" not in model:
        raise UserError(f"{path}: not a BPE tokenizer with merges (NLLB's and M2M100's are)")
    spm = proto.ModelProto()
    spm.trainer_spec.model_type = proto.TrainerSpec.BPE
    spm.trainer_spec.unk_id, spm.trainer_spec.bos_id, spm.trainer_spec.eos_id, spm.trainer_spec.pad_id = 0, 1, 2, -1
    spm.normalizer_spec.name = "nmt_nfkc"
    spm.normalizer_spec.precompiled_charsmap = _charsmap(found.get("normalizer"), path)
    spm.normalizer_spec.add_dummy_prefix = True
    spm.normalizer_spec.remove_extra_whitespaces = True
    spm.normalizer_spec.escape_whitespaces = True
    unknown, control = proto.ModelProto.SentencePiece.UNKNOWN, proto.ModelProto.SentencePiece.CONTROL
    kinds = {"<unk>": unknown, "<s>": control, "</s>": control}
    for piece, kind in kinds.items():
        spm.pieces.add(piece=piece, score=0.0, type=kind)
    ranks = _merge_ranks(model["merges"])
    added = {token["content"] for token in found.get("added_tokens", [])} | {"<pad>"}
    for piece, _ in sorted(model["vocab"].items(), key=lambda item: item[1]):
        if piece not in kinds and piece not in added:
            score = -float(ranks[piece]) if piece in ranks else NOT_MERGED
            spm.pieces.add(piece=piece, score=score, type=proto.ModelProto.SentencePiece.NORMAL)
    return spm.SerializeToString()
