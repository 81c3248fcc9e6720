import pytest

from mt_transformer.config import UserError
from mt_transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer

SRC = [f"das Haus Nummer {i} ist rot" for i in range(200)]
TGT = [f"the house number {i} is red" for i in range(200)]


@pytest.mark.parametrize("joint, model_type", [(True, "unigram"), (False, "bpe")])
def test_train_and_round_trip(tmp_path, joint, model_type):
    tokenizer = train_tokenizer(str(tmp_path), SRC, TGT, joint, 50, model_type, 1.0, 1000, seed=1)
    assert tokenizer.joint == joint
    reloaded = Tokenizer(str(tmp_path))
    for processor in (reloaded.src, reloaded.tgt):
        assert (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id()) == \
            (PAD_ID, UNK_ID, BOS_ID, EOS_ID)
    ids = reloaded.encode_tgt(["the house number 7 is red"])
    assert reloaded.decode_tgt(ids) == ["the house number 7 is red"]
    if joint:
        assert reloaded.src_vocab_size == reloaded.tgt_vocab_size == 50


def test_vocabulary_too_large_for_the_data(tmp_path):
    with pytest.raises(UserError, match=r"data.vocab_size: 5000 is too large for this data; at most \d+"):
        train_tokenizer(str(tmp_path), SRC, TGT, True, 5000, "unigram", 1.0, 1000, seed=1)
