"""LibreTranslate's requests: parsed and checked, every client mistake a status and one line."""

import pytest

from mt_transformer.serve.api import ApiError, Limits, languages, parse_translate

PAIRS = {("de", "en"), ("en", "de"), ("fr", "en")}
LIMITS = Limits(max_lines=3, max_chars=20)


def parse(**payload):
    return parse_translate(payload, PAIRS, LIMITS)


def test_a_string_or_a_list_of_strings_with_their_options():
    one = parse(q="Hallo Welt", source="de", target="en")
    assert (one.lines, one.as_list, one.source, one.target, one.format) == (["Hallo Welt"], False, "de", "en", "text")
    assert (one.alternatives, one.api_key) == (0, None)
    many = parse(q=["a", "b"], source="en", target="de", format="html", alternatives="2", api_key="k")
    assert (many.lines, many.as_list, many.format, many.alternatives, many.api_key) == (
        ["a", "b"],
        True,
        "html",
        2,
        "k",
    )


def test_source_auto_takes_the_one_source_language_into_the_target():
    assert parse(q="x", source="auto", target="de").source == "en"
    with pytest.raises(ApiError, match=r"source auto needs one source language into en, not \['de', 'fr'\]"):
        parse(q="x", source="auto", target="en")


@pytest.mark.parametrize(
    "payload, status, message",
    [
        ({"source": "de", "target": "en"}, 400, "missing q parameter"),
        ({"q": 5, "source": "de", "target": "en"}, 400, "q must be a string or a list of strings"),
        ({"q": ["a", None], "source": "de", "target": "en"}, 400, "q must be a string or a list of strings"),
        ({"q": "  ", "source": "de", "target": "en"}, 400, "q is empty"),
        ({"q": ["a"] * 4, "source": "de", "target": "en"}, 413, "4 lines in q, more than this server's 3"),
        ({"q": "x" * 21, "source": "de", "target": "en"}, 413, "a line of 21 characters, more than 20"),
        ({"q": "x", "target": "en"}, 400, "missing source parameter"),
        ({"q": "x", "source": "de"}, 400, "missing target parameter"),
        ({"q": "x", "source": "de", "target": "fr"}, 400, "de -> fr is not available on this server"),
        ({"q": "x", "source": "de", "target": "en", "format": "pdf"}, 400, "format must be text or html"),
        ({"q": "x", "source": "de", "target": "en", "alternatives": "many"}, 400, "alternatives must be a whole"),
        ({"q": "x", "source": "de", "target": "en", "alternatives": 11}, 400, "a whole number from 0 to 10"),
        ({"q": "x", "source": "de", "target": "en", "api_key": 7}, 400, "api_key must be a string"),
    ],
)
def test_client_mistakes_are_a_status_and_one_line(payload, status, message):
    with pytest.raises(ApiError) as raised:
        parse_translate(payload, PAIRS, LIMITS)
    assert raised.value.status == status and message in raised.value.message
    assert "\n" not in raised.value.message


def test_a_body_that_is_not_an_object():
    with pytest.raises(ApiError, match="must be a JSON object"):
        parse_translate(["q"], PAIRS, LIMITS)


def test_languages_lists_each_source_with_its_targets():
    assert languages(PAIRS) == [
        {"code": "de", "name": "German", "targets": ["en"]},
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "fr", "name": "French", "targets": ["en"]},
    ]
    assert languages({("xx", "en")})[1] == {"code": "xx", "name": "xx", "targets": ["en"]}  # no name known: its code


def test_languages_lists_a_language_only_translated_into_with_empty_targets():
    # LibreTranslate clients build their target menus from this list: the target must be in it
    assert languages({("en", "de"), ("en", "fr")}) == [
        {"code": "de", "name": "German", "targets": []},
        {"code": "en", "name": "English", "targets": ["de", "fr"]},
        {"code": "fr", "name": "French", "targets": []},
    ]
