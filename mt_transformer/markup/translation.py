"""HTML fragments translated: each sentence once, its inline elements put back around the words
of its translation that its attention aligns to theirs (mt-translate --format html, mt-serve's
`format: html`)."""

from __future__ import annotations

import html
from typing import Protocol

from mt_transformer.decoding.alignment import Aligning, aligned_words
from mt_transformer.markup.html import HtmlFragment


class HtmlTranslator(Aligning, Protocol):
    """What translate_html asks of a translator (decoding/translator.Translator has it all): its
    calls, with and without attention, and the source ids it reads, beside what alignment reads."""

    def __call__(self, lines: list[str], progress: bool = False) -> list[list]: ...

    def with_attention(self) -> HtmlTranslator: ...

    def source_ids(self, lines: list[str]) -> list[list[int]]: ...


def has_markup(line: str) -> bool:
    """Whether a line holds a tag, a comment or an entity; one without is translated as plain text."""
    return "<" in line or "&" in line


def translate_html(translator: HtmlTranslator, fragments: list[str], progress=False) -> list[str]:
    """The translation of each fragment, as HTML; one without markup is translated as plain text is.
    Sentences with inline elements are translated with their attention (from the same CTranslate2
    call), the others as plain text."""
    parsed = [HtmlFragment(f) if has_markup(f) else None for f in fragments]
    texts = [[s.text for s in p.sentences] if p else [f] for p, f in zip(parsed, fragments)]
    keys = [(i, k) for i, lines in enumerate(texts) for k in range(len(lines))]
    tagged = {(i, k) for i, k in keys if parsed[i] and parsed[i].sentences[k].spans and parsed[i].sentences[k].words}
    found = {}
    for group, engine in ((tagged, translator.with_attention()), (set(keys) - tagged, translator)):
        chosen = [key for key in keys if key in group]
        found.update(zip(chosen, engine([texts[i][k] for i, k in chosen], progress=progress) if chosen else []))
    # the best translation of each sentence with inline elements, aligned to it
    wanted = [key for key in keys if key in tagged and found[key][0].tokens]
    best = [found[key][0] for key in wanted]
    sources = translator.source_ids([texts[i][k] for i, k in wanted])
    known = [t.attention for t in best]
    aligned = (
        aligned_words(translator, sources, [t.tokens for t in best], known=known, cover_source=True) if best else []
    )
    # a model taught to leave words unaligned gives no target word to a source word it does not
    # translate, so an element takes such a word's cover only where its other words drew none;
    # another model's attention leaves many words to a neighbour, and their covers count in full
    alone = translator.leaves_unaligned
    links = {key: (pairs, cover) if alone else (pairs + cover, []) for key, (pairs, cover, _) in zip(wanted, aligned)}
    out = []
    for i, fragment in enumerate(parsed):
        if fragment is None:  # what the model wrote is text here too, even where it looks like markup
            out.append(html.escape(found[i, 0][0].text, False))
            continue
        sentences = range(len(texts[i]))
        translations = [found[i, k][0].text for k in sentences]
        chosen = [links.get((i, k), (None, None)) for k in sentences]
        out.append(fragment.rebuild(translations, [pairs for pairs, _ in chosen], [cover for _, cover in chosen]))
    return out
