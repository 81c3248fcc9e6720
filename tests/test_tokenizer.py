import pytest

from mt_transformer.data.sentencepiece_training import train_tokenizer
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SRC = [f"das Haus Nummer {i} ist rot" for i in range(200)]
TGT = [f"the house number {i} is red" for i in range(200)]


@pytest.mark.parametrize("joint, model_type", [(True, "unigram"), (False, "bpe")])
def test_train_and_round_trip(tmp_path, joint, model_type):
    tokenizer = train_tokenizer(str(tmp_path), SRC, TGT, joint, 50, model_type, 1.0, 1000, seed=1, byte_fallback=False)
    assert tokenizer.joint == joint
    reloaded = Tokenizer(str(tmp_path))
    for processor in (reloaded.src, reloaded.tgt):
        assert (processor.pad_id(), processor.unk_id(), processor.bos_id(), processor.eos_id()) == (
            PAD_ID,
            UNK_ID,
            BOS_ID,
            EOS_ID,
        )
    ids = reloaded.tgt.encode(["the house number 7 is red"])
    assert reloaded.decode_tgt(ids) == ["the house number 7 is red"]
    if joint:
        assert reloaded.src_vocab_size == reloaded.tgt_vocab_size == 50


def test_vocabulary_too_large_for_the_data(tmp_path):
    with pytest.raises(UserError, match=r"data.vocab_size: 5000 is too large for this data; at most \d+"):
        train_tokenizer(str(tmp_path), SRC, TGT, True, 5000, "unigram", 1.0, 1000, seed=1, byte_fallback=False)


def test_a_vocabulary_too_small_for_the_byte_pieces(tmp_path):
    with pytest.raises(
        UserError, match=r"^data.vocab_size: 100 is too small .* at least \d+ pieces .*256 byte pieces\)$"
    ):
        train_tokenizer(str(tmp_path), SRC, TGT, True, 100, "bpe", 1.0, 1000, seed=1, byte_fallback=True)


def test_auto_coverage_trains_on_text_without_spaces(tmp_path, caplog):
    words = ["猫", "狗", "红色", "苹果", "桌子", "书", "买", "卖", "看见", "昨天", "明天", "我", "他", "旧", "新"]
    chinese = ["".join(words[(i * k) % len(words)] for k in range(1, 6)) + "。" for i in range(300)]
    english = [f"sentence number {i}" for i in range(300)]
    with caplog.at_level("INFO"):
        tokenizer = train_tokenizer(
            str(tmp_path), english, chinese, True, 60, "unigram", 0.0, 1000, seed=1, byte_fallback=False
        )
    assert "character coverage 0.9995" in caplog.text
    ids = tokenizer.tgt.encode(chinese[:3])
    assert tokenizer.decode_tgt(ids) == chinese[:3]
    assert all(UNK_ID not in row for row in ids)


def test_source_tags_are_pieces_of_their_own(tmp_path):
    tokenizer = train_tokenizer(
        str(tmp_path), SRC, TGT, False, 50, "bpe", 1.0, 1000, seed=1, byte_fallback=False, tags=["<2en>", "<bt>"]
    )
    assert tokenizer.tags == {"<2en>": 4, "<bt>": 5}
    assert Tokenizer(str(tmp_path)).tags == tokenizer.tags
    plain = tokenizer.encode_src(["das Haus"])[0]
    assert tokenizer.encode_src(["<2en> <bt> das Haus", "<2en> das Haus"]) == [[4, 5, *plain], [4, *plain]]
    assert tokenizer.tgt.piece_to_id("<2en>") == UNK_ID  # the target side never holds them


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_byte_fallback_spells_unseen_characters(tmp_path, model_type):
    tokenizer = train_tokenizer(str(tmp_path), SRC, TGT, True, 300, model_type, 1.0, 1000, seed=1, byte_fallback=True)
    line = "the house 😀 is 中 red, Zoë"
    ids = tokenizer.encode_src([line])[0]
    assert UNK_ID not in ids
    assert any(tokenizer.tgt.is_byte(i) for i in ids)
    assert tokenizer.decode_tgt([ids]) == [line]
    assert tokenizer.detokenize(ids, []) == (line, 0)
    assert Tokenizer(str(tmp_path)).tgt.piece_to_id("<0xF0>") != UNK_ID


def test_broken_bytes_are_left_out_and_counted(tmp_path):
    tokenizer = train_tokenizer(str(tmp_path), SRC, TGT, True, 300, "bpe", 1.0, 1000, seed=1, byte_fallback=True)
    house, red = tokenizer.tgt.encode(["the house", "is red"])
    smile = tokenizer.tgt.encode("😀")[-4:]  # its four UTF-8 bytes
    assert tokenizer.detokenize(house + smile[:2] + red, []) == ("the house is red", 1)
    assert tokenizer.detokenize(house + smile + red, []) == ("the house😀 is red", 0)
    # fills go to the <unk> pieces in order, whatever broken bytes come before them
    assert tokenizer.detokenize(house + smile[:2] + [UNK_ID] + red, ["X"]) == ("the houseX is red", 2)


def test_unknowns_are_filled_or_left_out_never_printed(tmp_path):
    tokenizer = train_tokenizer(str(tmp_path), SRC, TGT, True, 50, "unigram", 1.0, 1000, seed=1, byte_fallback=False)
    source = tokenizer.encode_src(["das 😀 Haus 中"])[0]
    positions = [i for i, piece in enumerate(source) if piece == UNK_ID]
    assert tokenizer.src_unknowns("das 😀 Haus 中") == list(zip(positions, ["😀", "中"]))
    ids = tokenizer.tgt.encode("the house 😀 is red 中")
    assert ids.count(UNK_ID) == 2 and "⁇" in tokenizer.decode_tgt([ids])[0]
    assert tokenizer.detokenize(ids, ["😀", "中"]) == ("the house 😀 is red 中", 2)
    assert tokenizer.detokenize(ids, ["😀"]) == ("the house 😀 is red", 2)
    assert tokenizer.detokenize(ids, []) == ("the house is red", 2)


@pytest.mark.parametrize("joint", [True, False])
def test_a_folded_source_reads_capitals_and_title_case_as_the_usual_text(tmp_path, joint):
    src = [line.replace("das Haus", "das Haus" if i % 2 else "Das Haus") for i, line in enumerate(SRC)]
    tgt = [line.capitalize() for line in TGT]
    train_tokenizer(
        str(tmp_path), src, tgt, joint, 40, "unigram", 1.0, 1000, seed=1, byte_fallback=False, fold_source=True
    )
    reloaded = Tokenizer(str(tmp_path))
    usual, upper, title = reloaded.encode_src(
        ["das haus nummer 7 ist rot", "DAS HAUS NUMMER 7 IST ROT", "Das Haus Nummer 7 Ist Rot"]
    )
    assert usual == upper == title and UNK_ID not in usual
    assert reloaded.decode_tgt(reloaded.encode_tgt(["The house number 7 is red"])) == ["The house number 7 is red"]
    if joint:  # the source's copy: the joint pieces under the same ids
        assert reloaded.model_files == ["spm.src.model", "spm.model"] and reloaded.joint
        assert all(reloaded.src.id_to_piece(i) == reloaded.tgt.id_to_piece(i) for i in range(reloaded.tgt_vocab_size))
        assert reloaded.files == ["spm.model", "spm.src.model"]  # checkpoints, averages and exports carry both
    unfolded = train_tokenizer(
        str(tmp_path / "u"), src, tgt, joint, 40, "unigram", 1.0, 1000, seed=1, byte_fallback=False
    )
    assert unfolded.encode_src(["DAS HAUS"]) != unfolded.encode_src(["das haus"])
