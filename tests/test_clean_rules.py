"""data.clean's rules of one pair, on handmade pairs: what each drops, and what it keeps (names and
numbers both sides share, one-word lines, a sentence the same in both languages)."""

import pytest

from mt_transformer.config import CleanConfig
from mt_transformer.data.clean_rules import PairRules, repair


def judge(src: str, tgt: str, src_lang: str = "de", tgt_lang: str = "en", **settings) -> str | None:
    return PairRules.of(CleanConfig(**settings), src_lang, tgt_lang).judge(repair(src), repair(tgt))


def test_repair_reads_entities_and_escapes_and_drops_invisible_characters():
    assert repair("  Tom &amp; Jerry\u200b sind\tda &#124; ok  ") == "Tom & Jerry sind da | ok"
    assert repair("Ka\u0308se\x00\x07 und Brot\u00ad") == "K\u00e4se und Brot"
    assert repair("a &b c") == "a &b c"  # no entity: as it was


@pytest.mark.parametrize(
    "src, tgt, reason",
    [
        ("", "A house.", "empty"),
        ("Ein Haus.", "  \u200b ", "empty"),
        (" ".join(["Wort"] * 151), " ".join(["word"] * 151), "too_many_words"),
        ("Siehe " + "x" * 151, "See " + "x" * 151, "word_too_long"),
        ("Ein Mann.", "A man is walking down the street with his two big black dogs today.", "length_ratio"),
        ("12345 67890 / 555 - 2019", "12345 67890 / 555 - 2019", "script"),
        ("Ein Haus kostet 500 Euro.", "A house costs 700 euros.", "numbers"),
        ("Mehr auf https://example.org/de heute.", "More at https://example.com/en today.", "urls"),
        ("Schreib an info@example.org bitte.", "Please write to us today.", "urls"),
        ("A man rides his red bike to work.", "A man rides his red bike to work!", "copy"),
        ("Ein Mann fährt Fahrrad.", "Ein Mann fährt Fahrrad.", "copy"),
        ("Zum Warenkorb hinzufügen", "Add to basket", "boilerplate"),
    ],
)
def test_each_rule_drops_what_it_is_for(src, tgt, reason):
    assert judge(src, tgt, boilerplate=("Warenkorb",)) == reason


@pytest.mark.parametrize(
    "src, tgt",
    [
        ("Ein Haus kostet 500 Euro.", "A house costs 500 euros."),  # the same numbers
        ("Zwei Hunde spielen.", "2 dogs are playing."),  # a side that spells them out
        ("Berlin", "Berlin"),  # a one-word line both languages share
        ("Hotel Adlon Berlin", "Hotel Adlon Berlin"),  # names: a copy of fewer than 4 words
        ("Ja.", "Yes, of course."),  # short lines vary in length most
        ("Die Fläche beträgt 1.234,5 km².", "The area is 1,234.5 km²."),  # separators differ, numbers not
        ("Mehr auf https://example.org heute.", "More at https://example.org today."),
    ],
)
def test_pairs_that_only_look_odd_are_kept(src, tgt):
    assert judge(src, tgt) is None


def test_the_script_is_the_languages_and_a_rule_set_to_null_is_off():
    assert judge("Мужчина едет на велосипеде.", "A man rides a bike.", "ru", "en") is None
    assert judge("A man rides a bike.", "A man rides a bike.", "ru", "en") == "script"  # Latin where Cyrillic is
    assert judge("Мужчина едет на велосипеде.", "A man rides a bike.", "rus_Cyrl", "eng_Latn") is None
    assert judge("Ein Haus kostet 500 Euro.", "A house costs 700 euros.", numbers=False) is None
    # a language written without spaces: one "word" a third of the English length, never a ratio
    assert judge("一个男人骑着自行车穿过城市。", "A man rides his bicycle through the busy city.", "zh", "en") is None
    off = PairRules.of(CleanConfig.off(), "de", "en")
    assert off.judge("12345", "x" * 400) is None and off.judge("", "a") == "empty"  # an empty side never passes
