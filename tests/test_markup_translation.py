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


def test_a_model_taught_to_leave_words_unaligned_gives_an_element_a_cover_only_where_it_has_nothing_else():
    """der <b>Hund bellt</b> -> the dog barks, where "bellt" drew no word and "the" attends to it
    most: a model taught unaligned_to_eos leaves "bellt" untranslated, any other takes "the" too."""
    from types import SimpleNamespace

    import torch

    from mt_transformer.markup.translation import translate_html

    pieces = {1: "▁der", 2: "▁Hund", 3: "▁bellt", 10: "▁the", 11: "▁dog", 12: "▁barks"}
    attention = torch.tensor(  # (target + EOS, source + EOS)
        [[0.6, 0.0, 0.4, 0.0], [0.0, 0.9, 0.1, 0.0], [0.0, 0.7, 0.3, 0.0], [0.0, 0.0, 0.0, 1.0]]
    )
    best = SimpleNamespace(tokens=[10, 11, 12], attention=attention, text="the dog barks")

    def translator(leaves_unaligned: bool):
        return SimpleNamespace(
            leads=([], []),
            alignment_step=0,
            attention_of=None,  # the search gave every attention
            leaves_unaligned=leaves_unaligned,
            tokenizer=SimpleNamespace(
                src_pieces=lambda ids: [pieces[i] for i in ids], tgt_pieces=lambda ids: [pieces[i] for i in ids]
            ),
            source_ids=lambda lines: [[1, 2, 3] for _ in lines],
            with_attention=lambda: lambda lines, progress=False: [[best] for _ in lines],
        )

    assert translate_html(translator(True), ["der <b>Hund bellt</b>"]) == ["the <b>dog barks</b>"]
    assert translate_html(translator(False), ["der <b>Hund bellt</b>"]) == ["<b>the dog barks</b>"]


def test_markup_a_model_writes_comes_back_escaped_on_every_html_path():
    """A model trained on inline tags writes them; on a line without markup of its own, and on
    one with, what it wrote is text, never markup."""
    from types import SimpleNamespace

    from mt_transformer.markup.translation import translate_html

    written = "<b>Die</b> rote Katze & <script>x</script>"

    class Translator:
        leaves_unaligned = False

        def with_attention(self):
            return self

        def source_ids(self, lines):
            return [[1] for _ in lines]

        def __call__(self, lines, progress=False):
            return [[SimpleNamespace(text=written, tokens=[1], attention=None)] for _ in lines]

    escaped = "&lt;b&gt;Die&lt;/b&gt; rote Katze &amp; &lt;script&gt;x&lt;/script&gt;"
    lines = ["＜b＞The red cat＜/b＞ costs 5 euros.", "<p>The red cat.</p>"]
    assert translate_html(Translator(), lines) == [escaped, f"<p>{escaped}</p>"]
