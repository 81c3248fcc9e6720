"""An HTML fragment as sentences to translate, and its rebuilding around their translations.

Block elements (p, div, li, td, h1-h6, br, ...) and sentence ends cut the text into sentences;
inline elements (b, i, a, span, ...) are taken out of a sentence as spans over its words, to be
put back around the words of the translation aligned to them (markup/projection.py). What is not
prose passes through as written: script, style, pre, and any element with translate="no" (an
inline one, such as code, as one piece that sits between two words), comments and declarations.
The fragment is read with the standard library's lenient HTMLParser: broken markup still yields
text to translate, never an error.
"""

from __future__ import annotations

import bisect
import dataclasses
import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

from mt_transformer.markup.projection import Span, project, render

BLOCK = set(
    "address article aside blockquote br caption dd details dialog div dl dt fieldset figcaption figure footer "
    "form h1 h2 h3 h4 h5 h6 header hr li main nav ol option p section summary table tbody td tfoot th thead title "
    "tr ul".split()
)
VERBATIM = {"script", "style", "pre", "code", "kbd", "samp", "textarea"}  # their contents are not prose
VOID = set("area base br col embed hr img input link meta source track wbr".split())
SENTENCE_END = re.compile(r"[.!?…][\"'”’»)\]]*$")


class TooManyPieces(ValueError):
    """A fragment with more sentences and inline elements than its reader was given leave to read."""


@dataclass
class Sentence:
    words: list[str]
    spans: list[Span] = field(default_factory=list)

    @property
    def text(self) -> str:
        return " ".join(self.words)


@dataclass
class _Element:
    """An inline element of a run: its tags as written, the characters it covers (first to one
    past the last) and the element it is inside (an index into the run's elements) or None."""

    start_tag: str
    end_tag: str
    first_char: int
    stop_char: int
    parent: int | None


@dataclass
class _Run:
    """The prose between two pieces of block markup: its text (in chunks, joined once) and its
    inline elements."""

    chunks: list[str] = field(default_factory=list)
    length: int = 0
    has_words: bool = False  # any text but white space
    elements: list[_Element] = field(default_factory=list)
    open: list[tuple[int, str]] = field(default_factory=list)  # (element, its tag) not yet closed, innermost last
    open_tags: dict[str, int] = field(default_factory=dict)  # how many of `open` each tag has

    def write(self, text: str) -> None:
        self.chunks.append(text)
        self.length += len(text)
        self.has_words = self.has_words or (bool(text) and not text.isspace())

    @property
    def text(self) -> str:
        if len(self.chunks) > 1:
            self.chunks[:] = ["".join(self.chunks)]
        return self.chunks[0] if self.chunks else ""

    def add(self, written: str, tag: str, closes_later: bool) -> None:
        """An element that starts here, inside the innermost open one; `closes_later`: its end tag
        is still to come (else it holds no text: void, self-closing, or kept as one piece)."""
        parent = self.open[-1][0] if self.open else None
        self.elements.append(_Element(written, "", self.length, self.length, parent))
        if closes_later:
            self.open.append((len(self.elements) - 1, tag))
            self.open_tags[tag] = self.open_tags.get(tag, 0) + 1

    def close(self, tag: str) -> None:
        """The innermost open `tag` ends here, and the elements opened inside it with it."""
        while self.open:
            k, name = self.open.pop()
            self.open_tags[name] -= 1
            self.elements[k].end_tag, self.elements[k].stop_char = f"</{name}>", self.length
            if name == tag:
                break


class _Reader(HTMLParser):
    def __init__(self, limit: int | None = None):
        super().__init__(convert_charrefs=True)
        self.limit, self.pieces = limit, 0  # sentences and inline elements: read so far, and the most allowed
        self.parts: list[str | list[Sentence]] = []  # markup as written, or a run's sentences
        self.run = _Run()
        self.verbatim: list[str] = []  # the tags of the verbatim element being read, outermost first
        self.held: list[str] = []  # its text so far

    def handle_starttag(self, tag, attrs):
        written = self.get_starttag_text() or f"<{tag}>"
        if self.verbatim or tag in VERBATIM or ("translate", "no") in attrs:
            return self._hold(written, tag, tag not in VOID)
        if tag in BLOCK:
            return self._markup(written)
        self.run.add(written, tag, tag not in VOID)

    def handle_startendtag(self, tag, attrs):
        written = self.get_starttag_text() or f"<{tag}/>"
        if self.verbatim:
            return self._hold(written, tag, False)
        if tag in BLOCK:
            return self._markup(written)
        self.run.add(written, tag, False)

    def handle_endtag(self, tag):
        if self.verbatim:
            self.held.append(f"</{tag}>")
            if tag == self.verbatim[-1]:
                self.verbatim.pop()
                if not self.verbatim:
                    self._piece("".join(self.held), tag)
            return
        if tag in BLOCK or not self.run.open_tags.get(tag):  # no start in this run
            return self._markup(f"</{tag}>")
        self.run.close(tag)

    def handle_data(self, data):
        if self.verbatim:
            self.held.append(data if self.cdata_elem else html.escape(data, False))
        else:
            self.run.write(data)

    def handle_comment(self, data):
        self._aside(f"<!--{data}-->")

    def handle_decl(self, decl):
        self._aside(f"<!{decl}>")

    def handle_pi(self, data):
        self._aside(f"<?{data}>")

    def unknown_decl(self, data):  # a marked section: <![CDATA[ ... ]]>
        self._aside(f"<![{data}]]>")

    def close(self):
        super().close()
        if self.rawdata:  # a script or style never closed: the parser holds the rest of the line back
            rest, self.rawdata = self.rawdata, ""
            self.handle_data(rest)

    def _aside(self, written: str) -> None:
        if self.verbatim:
            self.held.append(written)
        else:
            self._piece(written, "")

    def _hold(self, written: str, tag: str, has_end: bool) -> None:
        if not self.verbatim and not has_end:  # a void element: one piece at once
            return self._piece(written, tag)
        if not self.verbatim:
            self.held = []
        self.held.append(written)
        if has_end:
            self.verbatim.append(tag)

    def _piece(self, written: str, tag: str) -> None:
        """Something kept as written: between a run's words if it is inline, else between runs."""
        if tag in BLOCK or tag in ("script", "style", "pre", "textarea") or not tag and not self.run.has_words:
            return self._markup(written)
        self.run.add(written, tag, False)

    def _markup(self, written: str) -> None:
        self.flush()
        self.parts.append(written)

    def flush(self) -> None:
        """The run so far as its sentences; an element still open there keeps its start tag alone."""
        run, self.run = self.run, _Run()
        if run.elements or run.text.strip():
            self.parts.append(run.text[: len(run.text) - len(run.text.lstrip())])
            self.parts.append(sentences(run))
            self.pieces += len(self.parts[-1]) + len(run.elements)
            if self.limit is not None and self.pieces > self.limit:
                raise TooManyPieces(f"more than {self.limit} sentences and inline elements")
            self.parts.append(run.text[len(run.text.rstrip()) :] if run.text.strip() else "")
        else:  # whitespace between blocks
            self.parts.append(run.text)
        if self.verbatim:  # an element never closed: what was read of it, as written
            self.verbatim, held, self.held = [], self.held, []
            self.parts.append("".join(held))


def sentences(run: _Run) -> list[Sentence]:
    """A run's words cut into sentences after a word that ends one, where no element is open; in
    time linear in the run's words and elements (bisection and running sums, no pairwise search)."""
    text = run.text
    found = [(m.start(), m.end(), m.group()) for m in re.finditer(r"\S+", text)]
    starts, ends = [s for s, _, _ in found], [e for _, e, _ in found]
    spans = []
    for element in run.elements:
        first, stop = element.first_char, element.stop_char
        first_word = bisect.bisect_right(ends, first)  # the words that end before the element starts
        stop_word = max(bisect.bisect_left(starts, stop) if stop > first else first_word, first_word)
        gap = " " if text[stop : stop + 1].isspace() and first_word == stop_word else ""
        last = found[stop_word - 1] if stop_word > first_word else None
        tail = last is not None and stop < last[1] and not re.search(r"[\w\s]", text[stop : last[1]])
        spans.append(Span(element.start_tag, element.end_tag, first_word, stop_word, element.parent, gap, tail))
    if not found:
        return [Sentence([], spans)]
    inside = [0] * (len(found) + 1)  # running sum: how many elements go on past word i
    for span in spans:
        if span.stop - 1 > span.first:
            inside[span.first] += 1
            inside[span.stop - 1] -= 1
    cuts, open_here = [0], 0
    for i, (_, _, word) in enumerate(found[:-1]):
        open_here += inside[i]
        if not open_here and SENTENCE_END.search(word):
            cuts.append(i + 1)
    cuts.append(len(found))
    owned: list[list[int]] = [[] for _ in cuts[1:]]  # each sentence's spans, by where they begin
    for k, span in enumerate(spans):
        owned[min(bisect.bisect_right(cuts, span.first) - 1, len(owned) - 1)].append(k)
    out = []
    for (a, b), mine in zip(zip(cuts, cuts[1:]), owned):
        index = {k: n for n, k in enumerate(mine)}
        shifted = [
            dataclasses.replace(
                spans[k], first=spans[k].first - a, stop=spans[k].stop - a, parent=index.get(spans[k].parent)
            )
            for k in mine
        ]
        out.append(Sentence([w for _, _, w in found[a:b]], shifted))
    return out


START_TAG = re.compile(r"<([a-zA-Z][^\t\n\r\f />\x00]*)[^<>]*>")
# what can hide a start tag from the reader, or make one tag of two: quotes, comments and
# declarations, raw-text elements, translate="no"
UNSURE = re.compile(r"[\"']|<[!?]|<(?:" + "|".join(sorted(VERBATIM)) + r")\b|translate", re.IGNORECASE)


def least_pieces(fragment: str) -> int:
    """How many inline elements the reader will find in `fragment` at least, by one regular
    expression (a bound a server checks before reading): each start tag of an element that is not
    a block, where nothing can hide a tag from the reader (UNSURE); 0 where something can."""
    if UNSURE.search(fragment):
        return 0
    return sum(1 for name in START_TAG.findall(fragment) if name.lower() not in BLOCK)


class HtmlFragment:
    """`sentences`: what to translate, in order; `rebuild(translations, alignments)` writes the
    fragment with each translation in place of its sentence and the markup around it."""

    def __init__(self, fragment: str, limit: int | None = None):
        """`limit`: the most sentences and inline elements to read; past it, TooManyPieces stops the
        reading (at the end of the run of text where it is passed)."""
        reader = _Reader(limit)
        reader.feed(fragment)
        reader.close()
        reader.flush()
        self.pieces = reader.pieces
        self._parts = reader.parts
        self.sentences = [s for part in self._parts if isinstance(part, list) for s in part]

    def rebuild(self, translations: list[str], alignments: list[list[tuple[int, int]] | None], covers=None) -> str:
        """`alignments`: per sentence, (source word, target word) pairs; None for one without spans;
        `covers`: per sentence, pairs for source words without one (projection.project's `cover`)."""
        if len(translations) != len(self.sentences):
            raise ValueError("one translation per sentence")
        done = iter(zip(self.sentences, translations, alignments, covers or [None] * len(alignments)))
        out = []
        for part in self._parts:
            if isinstance(part, str):
                out.append(part)
                continue
            written = [_sentence(*next(done)) for _ in part]
            out.append(" ".join(w for w in written if w))
        return "".join(out)


def _sentence(sentence: Sentence, translation: str, alignment, cover) -> str:
    words = [html.escape(w, False) for w in translation.split()]
    if not sentence.spans:
        return " ".join(words)
    ranges = project(sentence.spans, alignment or [], len(sentence.words), len(words), cover or [])
    spaces = [""] + [" "] * max(len(words) - 1, 0) + [""]
    return render(words, spaces, sentence.spans, ranges)
