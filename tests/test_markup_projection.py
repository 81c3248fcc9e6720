from mt_transformer.markup.projection import Span, project, render


def rendered(target: str, spans: list[Span], alignment, source_words: int, cover=()) -> str:
    words = target.split()
    ranges = project(spans, alignment, source_words, len(words), cover)
    return render(words, [""] + [" "] * (len(words) - 1) + [""], spans, ranges)


def monotone(n: int) -> list[tuple[int, int]]:
    return [(i, i) for i in range(n)]


def test_an_element_covers_the_target_words_aligned_to_its_words():
    # I bought <b>23 red apples</b> today -> Ich kaufte heute 23 rote Äpfel
    spans = [Span("<b>", "</b>", 2, 5)]
    alignment = [(0, 0), (1, 1), (5, 2), (2, 3), (3, 4), (4, 5)]
    assert rendered("Ich kaufte heute 23 rote Äpfel", spans, alignment, 6) == "Ich kaufte heute <b>23 rote Äpfel</b>"


def test_a_reordered_span_is_spread_to_one_range_and_attributes_stay_verbatim():
    # the <a href="x?a=1&amp;b=2">red house</a> -> das Haus rot (crossing): the range of both
    spans = [Span('<a href="x?a=1&amp;b=2">', "</a>", 1, 3)]
    out = rendered("das Haus , rot", spans, [(0, 0), (2, 1), (1, 3)], 3)
    assert out == 'das <a href="x?a=1&amp;b=2">Haus , rot</a>'


def test_an_element_whose_words_lie_apart_takes_the_part_with_most_of_them():
    # <b>spielt am</b> Strand -> playing with the dog on the beach: "playing" and "on the" lie three
    # words apart, so the element goes around the larger part
    spans = [Span("<b>", "</b>", 0, 2)]
    alignment = [(0, 0), (4, 1), (4, 2), (4, 3), (1, 4), (1, 5), (2, 6)]
    out = rendered("playing with the dog on the beach", spans, alignment, 5)
    assert out == "playing with the dog <b>on the</b> beach"


def test_words_between_that_no_outside_word_took_join_the_range():
    # Männer <b>gehen bergauf</b> -> men are walking up a mountain: "up a" aligned to nothing
    spans = [Span("<b>", "</b>", 1, 3)]
    out = rendered("men are walking up a mountain", spans, [(0, 0), (1, 2), (2, 5)], 3)
    assert out == "men are <b>walking up a mountain</b>"


def test_a_word_of_the_element_that_drew_no_target_word_takes_its_cover_only_where_the_others_drew_none():
    # der <b>Hund bellt</b> -> the dog barks: "bellt" drew nothing, the most attending word is "the"
    spans = [Span("<b>", "</b>", 1, 3)]
    cover = [(2, 0)]
    out = rendered("the dog barks", spans, [(0, 0), (1, 1), (1, 2)], 3, cover)
    assert out == "the <b>dog barks</b>"
    # ... but an element with only that word takes it
    out = rendered("the dog barks", [Span("<i>", "</i>", 2, 3)], [(0, 0), (1, 1), (1, 2)], 3, cover)
    assert out == "<i>the</i> dog barks"


def test_nested_elements_stay_nested_and_siblings_apart():
    # <b>very <i>big</i></b> <u>dog</u> with big aligned to the dog's word and dog to big's:
    spans = [Span("<b>", "</b>", 0, 2), Span("<i>", "</i>", 1, 2, parent=0), Span("<u>", "</u>", 2, 3)]
    out = rendered("sehr großer Hund", spans, [(0, 0), (1, 2), (2, 1)], 3)
    assert out.count("<b>") == out.count("<i>") == out.count("<u>") == 1
    assert out.index("<b>") < out.index("<i>") < out.index("</i>") < out.index("</b>")  # i inside b
    assert out.index("</b>") < out.index("<u>") or out.index("</u>") < out.index("<b>")  # u outside b


def test_adjacent_elements_keep_their_order_and_words():
    spans = [Span("<b>", "</b>", 0, 1), Span("<i>", "</i>", 1, 2)]
    assert rendered("rot blau", spans, monotone(2), 2) == "<b>rot</b> <i>blau</i>"


def test_an_element_whose_words_align_to_nothing_sits_where_the_next_word_went():
    # one <b>big</b> dog: big aligned to nothing; dog -> Hund
    spans = [Span("<b>", "</b>", 1, 2)]
    assert rendered("ein Hund", spans, [(0, 0), (2, 1)], 3) == "ein <b></b>Hund"


def test_void_and_empty_elements_sit_between_words():
    # a <img src="s.png"> b <br/> -> x y: the image before b's word, the break at the end
    spans = [Span('<img src="s.png">', "", 1, 1), Span("<span>", "</span>", 2, 2)]
    assert rendered("x y", spans, monotone(2), 2) == 'x <img src="s.png">y<span></span>'


def test_without_alignments_elements_go_at_their_share_of_the_sentence():
    spans = [Span("<b>", "</b>", 2, 4)]
    out = rendered("a b c d", spans, [], 4)
    assert out.replace("<b></b>", "") == "a b c d" and out.count("<b></b>") == 1
