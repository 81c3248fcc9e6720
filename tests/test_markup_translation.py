"""mt-translate --format html end to end on a tiny model: every element back, well-formed."""

import pytest
from test_markup_html import Tags

from conftest import run_cli

LINES = [
    "I saw a dog.",
    "I saw <b>a red dog</b>.",
    'The <a href="/x?a=1&amp;b=2">house <i>is</i> big</a>. I <em>like</em> it!',
    "<p>one <img src=a.png> two</p><ul><li>red &amp; blue</li></ul>",
    "Run <code>ls &lt; x</code> now <b>",
]


@pytest.mark.parametrize("engine", ["torch", "auto"])
def test_html_lines_come_back_with_every_element_nested_and_plain_lines_as_text(trained_run, engine):
    given = "".join(line + "\n" for line in LINES)
    html = run_cli("mt-translate", "--checkpoint", trained_run, "--engine", engine, "--format", "html", input=given)
    assert html.returncode == 0, html.stderr
    text = run_cli("mt-translate", "--checkpoint", trained_run, "--engine", engine, input=LINES[0] + "\n")
    out = html.stdout.splitlines()
    assert len(out) == len(LINES) and out[0] == text.stdout.strip()  # no markup: translated as text
    for line, translated in zip(LINES[1:], out[1:]):
        assert Tags(translated).tags == Tags(line).tags
        assert Tags(translated).nested == Tags(line).nested
    assert "<code>ls &lt; x</code>" in out[4]


def test_html_refuses_what_it_cannot_give(trained_run):
    result = run_cli("mt-translate", "--checkpoint", trained_run, "--format", "html", "--nbest", "2", input="a\n")
    assert result.returncode == 2 and "--format html: one translation per line" in result.stderr
