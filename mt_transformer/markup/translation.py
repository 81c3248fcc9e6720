"""HTML fragments translated: each sentence once, its inline elements put back around the words
of its translation that its attention aligns to theirs (mt-translate --format html, mt-serve's
`format: html`)."""

from __future__ import annotations

from mt_transformer.decoding.alignment import aligned_words
from mt_transformer.markup.html import HtmlFragment


def has_markup(line: str) -> bool:
    """Whether a line holds a tag, a comment or an entity; one without is translated as plain text."""
    return "<" in line or "&" in line


def translate_html(translator, fragments: list[str], progress=False) -> list[str]:
    """The translation of each fragment; one without markup is translated exactly as plain text."""
    parsed = [HtmlFragment(f) if has_markup(f) else None for f in fragments]
    texts = [[s.text for s in p.sentences] if p else [f] for p, f in zip(parsed, fragments)]
    results = translator([t for ts in texts for t in ts], progress=progress)
    out, start = [], 0
    for fragment, lines in zip(parsed, texts):
        found, start = results[start : start + len(lines)], start + len(lines)
        if fragment is None:
            out.append(found[0][0].text)
            continue
        alignments = []
        for sentence, hypotheses in zip(fragment.sentences, found):
            best = hypotheses[0]
            if sentence.spans and sentence.words and best.tokens:
                src_ids = translator.source_ids([sentence.text])[0]
                alignments.append(aligned_words(translator, src_ids, [best.tokens])[0])
            else:
                alignments.append(None)
        out.append(fragment.rebuild([h[0].text for h in found], alignments))
    return out
