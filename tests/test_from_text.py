import pytest

from mt_transformer.data.from_text import RICH_COVERAGE, VOCAB_RANGE, auto_coverage, vocabulary_size_for

SRC = [f"das Haus Nummer {i} ist rot" for i in range(200)]
TGT = [f"the house number {i} is red" for i in range(200)]


def test_coverage_is_chosen_from_the_script():
    assert auto_coverage(SRC + TGT) == 1.0
    assert auto_coverage(["Grüße aus Köln, sagte Zoë."] * 10) == 1.0
    chinese = ["我昨天买了一个红色的苹果。", "他明天会卖五个旧杯子。"]
    assert auto_coverage(chinese) == RICH_COVERAGE
    assert auto_coverage([s for pair in zip(TGT, chinese * 100) for s in pair]) == RICH_COVERAGE  # joint zh-en
    assert auto_coverage(["これは日本語の文です。"]) == RICH_COVERAGE
    noisy = ["".join(chr(0x100 + i + j) for j in range(50)) for i in range(0, 1500, 50)]  # 1,500 distinct letters
    assert auto_coverage(noisy) == RICH_COVERAGE


def words(prefix: str, count: int) -> list[str]:
    """`count` distinct words, ten to a line."""
    return [" ".join(f"{prefix}{i + j}" for j in range(10)) for i in range(0, count, 10)]


def test_a_vocabulary_sized_from_the_data_has_a_piece_per_ten_distinct_words():
    german, english = words("wort", 24_900), words("word", 15_500)
    assert vocabulary_size_for([german, english], joint=True, max_sentences=10**6) == (4000, 40_400)
    # words both sides share count once in a joint vocabulary
    assert vocabulary_size_for([german, german], joint=True, max_sentences=10**6) == (2000, 24_900)
    # one model per side: the side with more distinct words decides
    assert vocabulary_size_for([german, english], joint=False, max_sentences=10**6) == (2000, 24_900)
    # what sentencepiece would learn from: each side's first max_sentences lines
    assert vocabulary_size_for([german, english], joint=True, max_sentences=100)[1] == 2000


@pytest.mark.parametrize("count, expected", [(30, VOCAB_RANGE[0]), (200_000, VOCAB_RANGE[1])])
def test_the_size_stays_within_its_range(count, expected):
    assert vocabulary_size_for([words("a", count), words("b", count)], joint=True, max_sentences=10**6)[0] == expected
