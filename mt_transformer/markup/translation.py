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
    per_line, start = [], 0
    for lines in texts:
        per_line.append(results[start : start + len(lines)])
        start += len(lines)
    # the best translation of each sentence with inline elements, aligned to it in one call
    wanted = [
        (i, k)
        for i, fragment in enumerate(parsed)
        if fragment is not None
        for k, sentence in enumerate(fragment.sentences)
        if sentence.spans and sentence.words and per_line[i][k][0].tokens
    ]
    sources = translator.source_ids([parsed[i].sentences[k].text for i, k in wanted])
    aligned = aligned_words(translator, sources, [per_line[i][k][0].tokens for i, k in wanted])
    alignments = {key: pairs for key, (pairs, _) in zip(wanted, aligned)}
    out = []
    for i, (fragment, found) in enumerate(zip(parsed, per_line)):
        if fragment is None:
            out.append(found[0][0].text)
            continue
        aligned_here = [alignments.get((i, k)) for k in range(len(found))]
        out.append(fragment.rebuild([hypotheses[0].text for hypotheses in found], aligned_here))
    return out
