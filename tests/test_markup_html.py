import re
from html.parser import HTMLParser

import pytest

from mt_transformer.markup.html import HtmlFragment


def upper_cased(fragment: str) -> tuple[HtmlFragment, str]:
    """The fragment "translated" word for word into capitals, each word aligned to itself."""
    found = HtmlFragment(fragment)
    alignments = [[(i, i) for i in range(len(s.words))] for s in found.sentences]
    return found, found.rebuild([s.text.upper() for s in found.sentences], alignments)


class Tags(HTMLParser):
    """The start and end tags of a fragment in order, and whether they nest."""

    def __init__(self, fragment: str):
        super().__init__()
        self.tags, self.open, self.nested = [], [], True
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, tuple(attrs)))
        if tag not in ("img", "br", "hr", "input", "wbr"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        self.nested = self.nested and bool(self.open) and self.open.pop() == tag


@pytest.mark.parametrize(
    "fragment, expected",
    [
        ("I bought <b>23 red apples</b> on March 5.", "I BOUGHT <b>23 RED APPLES</b> ON MARCH 5."),
        ('Hi <a href="x?a=1&amp;b=2">big <i>world</i></a>.', 'HI <a href="x?a=1&amp;b=2">BIG <i>WORLD</i></a>.'),
        (
            "Run <code>ls -l &amp;&amp; x</code> now <img src=a.png> ok",
            "RUN <code>ls -l &amp;&amp; x</code> NOW <img src=a.png> OK",
        ),
        (
            '<div translate="no">keep <b>it</b></div> and <!-- c --> that',
            '<div translate="no">keep <b>it</b></div> AND <!-- c --> THAT',
        ),
        ("<p>One. Two?</p><ul><li>Fish &amp; chips</li></ul>", "<p>ONE. TWO?</p><ul><li>FISH &amp; CHIPS</li></ul>"),
        ("a <br> b<script>if (a<b) x();</script>", "A <br> B<script>if (a<b) x();</script>"),
        ("<p><img src=x></p>", "<p><img src=x></p>"),
    ],
)
def test_markup_goes_back_around_the_words_it_wrapped(fragment, expected):
    assert upper_cased(fragment)[1] == expected


def test_sentences_are_cut_at_blocks_and_sentence_ends_but_not_inside_an_element():
    found = HtmlFragment("<p>One. <b>Two. Three.</b> Four</p><div>Five &lt;6</div>")
    assert [s.text for s in found.sentences] == ["One.", "Two. Three.", "Four", "Five <6"]


def test_every_element_comes_back_once_and_nested_on_awkward_markup():
    for fragment in ["<b>a</b><i>b</i> c", "x <b>y <i>z</i></b> <u>w</u>.", "<b>unclosed <i>text", "a </i> b"]:
        found, out = upper_cased(fragment)
        assert Tags(out).tags == Tags(fragment).tags
        if Tags(fragment).nested:
            assert Tags(out).nested


def test_elements_follow_their_words_when_the_translation_reorders_them():
    found = HtmlFragment("the <b>red</b> house")
    assert found.rebuild(["das Haus rot"], [[(0, 0), (2, 1), (1, 2)]]) == "das Haus <b>rot</b>"


def test_text_without_markup_is_one_sentence_per_run_as_given():
    found = HtmlFragment("  plain text, no tags  ")
    assert [s.text for s in found.sentences] == ["plain text, no tags"]
    assert found.rebuild(["x y"], [None]) == "  x y  "


def test_blocks_entities_scripts_styles_and_comments_come_back_as_they_were():
    fragment = '<p class="x">Hello <b>red</b> world!</p>\n<img src="a.png" alt="cat"/><br>'
    assert upper_cased(fragment)[1] == '<p class="x">HELLO <b>RED</b> WORLD!</p>\n<img src="a.png" alt="cat"/><br>'
    fragment = "<div>Tom &amp; Anna &lt;3</div><script>if (a < b) x();</script><!-- note --><style>p {}</style>"
    assert upper_cased(fragment)[1] == fragment.replace("Tom", "TOM").replace("Anna", "ANNA")
    assert upper_cased("<p>Run <code>a &lt; b</code> now</p>")[1] == "<p>RUN <code>a &lt; b</code> NOW</p>"


def test_an_unclosed_script_or_style_and_cdata_sections_come_back_as_they_came():
    for fragment, kept in (
        ("See this <script>if (a<b) x(). And the rest", "<script>if (a<b) x(). And the rest"),
        ("Red <style>p {color: red} more text", "<style>p {color: red} more text"),
        ("One <![CDATA[ x < y && z ]]> two.", "<![CDATA[ x < y && z ]]>"),
    ):
        found, rebuilt = upper_cased(fragment)
        assert kept in rebuilt and rebuilt.upper() == fragment.upper(), rebuilt
    assert upper_cased("<![CDATA[only]]>")[1] == "<![CDATA[only]]>"


def test_broken_or_empty_markup_still_gives_text():
    assert [s.text for s in HtmlFragment("<b>never closed <i>nor this").sentences] == ["never closed nor this"]
    assert upper_cased("a < b <b>c")[1] == "A &lt; B <b>C"
    assert upper_cased("")[1] == "" and upper_cased("<p> </p>")[1] == "<p> </p>"
    assert HtmlFragment("<p> </p>").sentences == []


def test_a_limit_on_sentences_and_elements_stops_the_reading_where_it_is_passed(monkeypatch):
    from mt_transformer.markup import html

    runs = []
    real = html.sentences
    monkeypatch.setattr(html, "sentences", lambda run: runs.append(run) or real(run))
    fragment = "<p>One <b>red</b> dog.</p>" * 1000  # a sentence and an element a paragraph
    assert HtmlFragment(fragment, limit=2000).pieces == 2000 and len(runs) == 1000
    runs.clear()
    with pytest.raises(html.TooManyPieces, match="more than 20 sentences and inline elements"):
        HtmlFragment(fragment, limit=20)
    assert len(runs) == 11  # read up to the paragraph past the limit, not the 989 after it


def test_many_elements_on_one_line_are_read_and_rebuilt_whole():
    """What took time growing with the square of a line's elements (the sentence cut, the
    projection among siblings) is done by bisection: the result stays the same."""
    line = "<s>a. " * 3000 + "x " + "<i>y " * 3000 + "<b>z</b> w. " * 3000
    found, rebuilt = upper_cased(line)
    assert found.pieces == len(found.sentences) + 9000 and Tags(rebuilt).tags == Tags(line).tags
    words = [w for w in re.sub(r"<[^>]+>", " ", rebuilt).split()]
    assert words == re.sub(r"<[^>]+>", " ", line).upper().split()


def test_the_quick_bound_never_counts_more_elements_than_the_reader_finds():
    import random

    from mt_transformer.markup.html import least_pieces

    rng = random.Random(0)
    units = ["a", "b.", "<b>", "</b>", "<i x=1>", "<a href=x>", "</a>", "<br>", "<p>", "<img src=y/>", "<s>", " "]
    units += ["<!-- <b> -->", "<script><b></script>", '<a title="<b><i>">', "<span translate=no><b>x</b></span>", "<"]
    for _ in range(2000):
        fragment = " ".join(rng.choice(units) for _ in range(rng.randint(1, 30)))
        found = HtmlFragment(fragment)
        elements = sum(len(s.spans) for s in found.sentences)
        assert least_pieces(fragment) <= elements, fragment
    assert least_pieces("<s>a. " * 833) == 833 and least_pieces('<a title="x">y</a>') == 0
