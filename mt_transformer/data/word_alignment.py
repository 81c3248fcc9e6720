"""Word alignments of training pairs, for train.guided_alignment: an aligner that knows nothing
of the model (eflomal, as Firefox Translations' pipeline uses) aligns the words of each pair in
both directions, and the two are joined by grow-diag-final-and (Koehn et al., 2005); a batch
turns the word pairs into the attention each target subword should give the source subwords
(attention_targets.py).

Words are the whitespace-separated words of a line, as sentencepiece marks their first piece
(WORD_START) and as mt-translate --alignment counts them; so a modifier of data.augment that
changes letters or case keeps a pair's alignment.
"""

from __future__ import annotations

import os
import tempfile

from mt_transformer.errors import UserError

Pairs = list[tuple[int, int]]  # (source word, target word), from 0

NEIGHBOURS = ((-1, 0), (0, -1), (1, 0), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1))


def alignment_heads(config) -> tuple[int, int]:
    """Where a model's word alignments are read: (decoder layer, how many of its first heads are
    averaged): the heads train.guided_alignment taught, else the last layer's mean of all heads."""
    guided = config.train.guided_alignment
    return (guided.layer, guided.heads) if guided.weight > 0 else (-1, config.model.n_heads)


def alignment_step(config) -> int:
    """Which decoder step's attention aligns a target piece, counted from the step that writes it:
    0, or 1 (the next step, which reads it) where train.guided_alignment taught that one."""
    guided = config.train.guided_alignment
    return int(guided.weight > 0 and guided.step == "reads")


def leaves_unaligned(config) -> bool:
    """Whether a target word whose alignment row gives the source's EOS the most is unaligned:
    where train.guided_alignment taught it to words the aligner left unaligned."""
    guided = config.train.guided_alignment
    return guided.weight > 0 and guided.unaligned_to_eos


def grow_diag_final_and(forward: Pairs, reverse: Pairs) -> Pairs:
    """The symmetrized alignment of the two directions' links: their intersection, grown by
    neighbouring (also diagonal) links of the union that align a word not yet aligned, then
    the union's links whose two words are both still unaligned."""
    union, links = set(forward) | set(reverse), set(forward) & set(reverse)
    aligned_src, aligned_tgt = {s for s, _ in links}, {t for _, t in links}
    grown = True
    while grown:
        grown = False
        for s, t in sorted(links):
            for ds, dt in NEIGHBOURS:
                link = (s + ds, t + dt)
                if link in union and link not in links and (link[0] not in aligned_src or link[1] not in aligned_tgt):
                    links.add(link)
                    aligned_src.add(link[0])
                    aligned_tgt.add(link[1])
                    grown = True
    for direction in (forward, reverse):
        for s, t in sorted(direction):
            if s not in aligned_src and t not in aligned_tgt:
                links.add((s, t))
                aligned_src.add(s)
                aligned_tgt.add(t)
    return sorted(links)


def _read_links(path: str) -> list[Pairs]:
    with open(path, encoding="utf-8") as f:
        return [[tuple(map(int, link.split("-"))) for link in line.split()] for line in f]


def align_words(sources: list[str], targets: list[str]) -> list[Pairs]:
    """Each pair's word alignment by eflomal (both directions, lower-cased words), symmetrized;
    [] for a pair with an empty side."""
    try:
        import eflomal
    except ImportError:
        raise UserError("train.guided_alignment: needs the eflomal package (pip install eflomal)") from None
    kept = [k for k, (s, t) in enumerate(zip(sources, targets)) if s.split() and t.split()]
    found: list[Pairs] = [[] for _ in sources]
    if not kept:
        return found
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = os.path.join(tmp, "fwd"), os.path.join(tmp, "rev")
        eflomal.Aligner().align(
            [" ".join(sources[k].lower().split()) for k in kept],
            [" ".join(targets[k].lower().split()) for k in kept],
            links_filename_fwd=fwd,
            links_filename_rev=rev,
        )
        for k, forward, reverse in zip(kept, _read_links(fwd), _read_links(rev)):
            found[k] = grow_diag_final_and(forward, reverse)
    return found


def flat(pairs: Pairs) -> list[int]:
    """A pair list as a dataset column holds it: s0, t0, s1, t1, ..."""
    return [i for pair in pairs for i in pair]
