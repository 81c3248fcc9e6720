from mt_transformer.data.demo_data import generate, number_word, ordinal_dative


def test_german_numbers_and_ordinals():
    assert [number_word(n) for n in (1, 7, 11, 16, 20, 21, 23, 57, 99)] == [
        "eins",
        "sieben",
        "elf",
        "sechzehn",
        "zwanzig",
        "einundzwanzig",
        "dreiundzwanzig",
        "siebenundfünfzig",
        "neunundneunzig",
    ]
    assert [ordinal_dative(n) for n in (1, 3, 5, 7, 8, 12, 19, 20, 21, 31)] == [
        "ersten",
        "dritten",
        "fünften",
        "siebten",
        "achten",
        "zwölften",
        "neunzehnten",
        "zwanzigsten",
        "einundzwanzigsten",
        "einunddreißigsten",
    ]


def test_generation_is_deterministic_and_splits_are_disjoint(tmp_path):
    generate(str(tmp_path / "a"), train=300, valid=30, test=30, seed=3)
    generate(str(tmp_path / "b"), train=300, valid=30, test=30, seed=3)
    for name in ("train.en", "train.de", "test.de"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    train = set((tmp_path / "a" / "train.en").read_text().splitlines())
    test = (tmp_path / "a" / "test.en").read_text().splitlines()
    valid = (tmp_path / "a" / "valid.en").read_text().splitlines()
    assert len(test) == 30 and not train & set(test) and not train & set(valid)
    german = (tmp_path / "a" / "train.de").read_text()
    assert "und" in german and "am " in german  # number words and dates occur
