"""format: html: the text between tags is translated, the markup kept."""

from mt_transformer.serve.html_text import HtmlFragment


def upper(fragment: str) -> str:
    parsed = HtmlFragment(fragment)
    return parsed.rebuild([text.upper() for text in parsed.texts])


def test_text_between_tags_is_translated_and_the_markup_kept():
    fragment = '<p class="x">Hello <b>red</b> world!</p>\n<img src="a.png" alt="cat"/><br>'
    assert HtmlFragment(fragment).texts == ["Hello", "red", "world!"]
    assert upper(fragment) == '<p class="x">HELLO <b>RED</b> WORLD!</p>\n<img src="a.png" alt="cat"/><br>'


def test_entities_come_out_escaped_and_scripts_styles_and_comments_untouched():
    fragment = "<div>Tom &amp; Anna &lt;3</div><script>if (a < b) x();</script><!-- note --><style>p {}</style>"
    parsed = HtmlFragment(fragment)
    assert parsed.texts == ["Tom & Anna <3"]
    assert upper(fragment) == (
        "<div>TOM &amp; ANNA &lt;3</div><script>if (a < b) x();</script><!-- note --><style>p {}</style>"
    )


def test_code_keeps_its_text_and_entities():
    assert upper("<p>Run <code>a &lt; b</code> now</p>") == "<p>RUN <code>a &lt; b</code> NOW</p>"


def test_broken_markup_still_gives_text():
    assert HtmlFragment("<b>never closed <i>nor this").texts == ["never closed", "nor this"]
    assert upper("a < b <b>c") == "A &lt; B <b>C"
    assert HtmlFragment("").texts == [] and upper("") == ""
    assert HtmlFragment("<p> </p>").texts == []
