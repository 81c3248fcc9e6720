"""A sentencepiece model read through a vocabulary of its own ids (an imported Marian one)."""

import io
import json

import pytest
import sentencepiece

from mt_transformer.data.vocabulary import VocabularyProcessor, read_vocabulary, write_vocabulary
from mt_transformer.errors import UserError
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

LINES = ["the red apples were sold", "tom bought twenty green shirts", "apples and shirts"] * 20


@pytest.fixture(scope="module")
def processor(tmp_path_factory):
    """A sentencepiece model with its own ids (unknown 0, start 1, end 2) that knows no capitals."""
    buffer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(LINES), model_writer=buffer, vocab_size=25, character_coverage=1.0, minloglevel=2
    )
    return sentencepiece.SentencePieceProcessor(model_proto=buffer.getvalue())


def vocabulary(processor, extra=()) -> list[str]:
    """Our specials, then the model's own pieces in reverse order (ids unlike the model's), then `extra`."""
    own = [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]
    return ["<pad>", "<unk>", "<s>", "</s>", *reversed(own), *extra]


def test_ids_are_places_in_the_vocabulary_found_by_piece_text(processor):
    pieces = vocabulary(processor, extra=["T"])  # a character the model lacks, in the vocabulary
    mapped = VocabularyProcessor(processor, pieces)
    ids = mapped.encode("Tom bought Xmas apples")
    assert [mapped.id_to_piece(i) for i in ids] == [
        p if p in pieces else "<unk>" for p in processor.encode("Tom bought Xmas apples", out_type=str)
    ]
    assert pieces.index("T") in ids and UNK_ID in ids  # "T" through the vocabulary; "X" unknown to both
    assert mapped.encode(["apples", "tom"]) == [mapped.encode("apples"), mapped.encode("tom")]
    assert mapped.get_piece_size() == len(pieces) and mapped.piece_to_id("nothing like it") == UNK_ID


def test_decoding_leaves_out_the_special_ids_and_keeps_pieces_the_model_lacks(processor):
    pieces = vocabulary(processor, extra=["\u2581Zebra"])
    mapped = VocabularyProcessor(processor, pieces)
    ids = [BOS_ID, *mapped.encode("tom bought apples"), pieces.index("\u2581Zebra"), EOS_ID, PAD_ID]
    assert mapped.decode(ids) == "tom bought apples Zebra"  # as Marian's tokenizer writes it
    assert mapped.decode([ids, ids[:2]]) == ["tom bought apples Zebra", mapped.decode(ids[:2])]
    assert all(mapped.is_control(i) for i in (PAD_ID, BOS_ID, EOS_ID)) and mapped.is_unknown(UNK_ID)


def test_a_vocabulary_file_is_checked(tmp_path, processor):
    path = str(tmp_path / "vocab.json")
    write_vocabulary(path, vocabulary(processor))
    assert read_vocabulary(path) == vocabulary(processor)
    for content, says in [
        ({"<pad>": 0}, "a JSON list of distinct pieces"),
        (["<pad>", "<unk>", "<s>", "</s>", "a", "a"], "a JSON list of distinct pieces"),
        (["</s>", "<unk>", "a", "<pad>"], "must begin with <pad>, <unk>, <s>, </s>"),
    ]:
        (tmp_path / "vocab.json").write_text(json.dumps(content), encoding="utf-8")
        with pytest.raises(UserError, match=says):
            read_vocabulary(path)
    (tmp_path / "vocab.json").write_text("[not json", encoding="utf-8")
    with pytest.raises(UserError, match="not a readable vocabulary"):
        read_vocabulary(path)
