"""LibreTranslate's `format: html`: the text between the tags of an HTML fragment is translated,
the tags, comments, scripts and styles are kept as they are.

The fragment is read with the standard library's lenient HTMLParser, so broken markup (a tag
never closed, a stray `<`) still yields text to translate rather than an error.
"""

from __future__ import annotations

import html
from html.parser import HTMLParser

KEPT_AS_IS = {"code", "pre"}  # their contents are not prose (nor are those of script and style)


class _Pieces(HTMLParser):
    """The fragment as pieces: ("markup", source text) or ("text", the text, unescaped)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.pieces: list[tuple[str, str]] = []
        self.kept = 0  # depth inside elements whose contents stay as they are

    def handle_starttag(self, tag, attrs):
        self.pieces.append(("markup", self.get_starttag_text() or f"<{tag}>"))
        self.kept += tag in KEPT_AS_IS

    def handle_startendtag(self, tag, attrs):
        self.pieces.append(("markup", self.get_starttag_text() or f"<{tag}/>"))

    def handle_endtag(self, tag):
        self.pieces.append(("markup", f"</{tag}>"))
        if tag in KEPT_AS_IS and self.kept:
            self.kept -= 1

    def handle_data(self, data):
        if self.cdata_elem:  # inside <script> or <style>: the source text itself
            self.pieces.append(("markup", data))
        elif self.kept:  # inside <code> or <pre>: kept, its entities written back
            self.pieces.append(("markup", html.escape(data, False)))
        else:
            self.pieces.append(("text", data))

    def handle_comment(self, data):
        self.pieces.append(("markup", f"<!--{data}-->"))

    def handle_decl(self, decl):
        self.pieces.append(("markup", f"<!{decl}>"))

    def handle_pi(self, data):
        self.pieces.append(("markup", f"<?{data}>"))


class HtmlFragment:
    """`texts`: the runs of text to translate (whitespace around each left out); `rebuild(translations)`
    puts one translation per run back between the original markup."""

    def __init__(self, fragment: str):
        parser = _Pieces()
        parser.feed(fragment)
        parser.close()
        self._pieces = parser.pieces
        self._slots = [i for i, (kind, text) in enumerate(self._pieces) if kind == "text" and text.strip()]
        self.texts = [" ".join(self._pieces[i][1].split()) for i in self._slots]

    def rebuild(self, translations: list[str]) -> str:
        if len(translations) != len(self._slots):
            raise ValueError("one translation per run of text")
        out = [text if kind == "markup" else html.escape(text, False) for kind, text in self._pieces]
        for i, translation in zip(self._slots, translations):
            text = self._pieces[i][1]
            lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()) :]
            out[i] = lead + html.escape(translation, False) + trail
        return "".join(out)
