"""Word alignments of training pairs, for train.guided_alignment: an aligner that knows nothing
of the model (eflomal, as Firefox Translations' pipeline uses) aligns the words of each pair in
both directions, the two are joined by grow-diag-final-and (Koehn et al., 2005), and a batch
turns the word pairs into the attention each target subword should give the source subwords.

Words are the whitespace-separated words of a line, as sentencepiece marks their first piece
(WORD_START) and as mt-translate --alignment counts them; so a modifier of data.augment that
changes letters or case keeps a pair's alignment.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import torch

from mt_transformer.errors import UserError
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

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


def word_starts(pieces: list[str], no_word: set[int]) -> torch.Tensor:
    """Per id of a vocabulary whose pieces are `pieces`: 1 where its piece begins a word, 0 where
    it continues one, -1 where it is in no word (padding, BOS, EOS and the ids of `no_word`:
    target tags, language tokens): (vocab,) int8."""
    from mt_transformer.data.tokenizer import WORD_START  # here: batching needs no sentencepiece

    table = torch.tensor([1 if piece.startswith(WORD_START) else 0 for piece in pieces], dtype=torch.int8)
    table[[PAD_ID, BOS_ID, EOS_ID, *no_word]] = -1
    return table


def tokenizer_word_starts(tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """word_starts of the tokenizer's source and target vocabularies."""
    no_word = set(tokenizer.tags.values()) | set(getattr(tokenizer, "languages", {}).values())
    src = word_starts(tokenizer.src_pieces(list(range(tokenizer.src_vocab_size))), no_word)
    tgt = word_starts(tokenizer.tgt_pieces(list(range(tokenizer.tgt_vocab_size))), no_word)
    return src, tgt


def word_positions(ids: torch.Tensor, starts: torch.Tensor) -> torch.Tensor:
    """The word of each position of `ids` (batch, len), from 0; -1 for a position in no word."""
    start = starts[ids].long()  # (batch, len)
    words = start.clamp(min=0).cumsum(dim=1) - 1
    return words.masked_fill(start < 0, -1).clamp(min=-1)


def attention_targets(
    src: torch.Tensor,
    tgt: torch.Tensor,
    alignments: list[list[int]],
    starts: tuple[torch.Tensor, torch.Tensor],
    unaligned_to_eos: bool = False,
) -> torch.Tensor:
    """What each target position (the step that writes, or reads, `tgt`'s piece) should attend
    to: 1/n on each of the n source positions in words aligned to its word, 0 elsewhere and on
    rows of no word; a word the aligner left unaligned: 0, or (`unaligned_to_eos`) 1 on the
    source's EOS: (batch, tgt_len, src_len). `alignments`: each row's flat word pairs."""
    src_words, tgt_words = word_positions(src, starts[0]), word_positions(tgt, starts[1])
    batch = src.size(0)
    size_s, size_t = int(src_words.max()) + 2, int(tgt_words.max()) + 2  # + a column for "no word"
    links = torch.zeros(batch, size_s, size_t)  # (batch, source words + 1, target words + 1)
    for row, pairs in enumerate(alignments):
        pairs = torch.tensor(pairs, dtype=torch.long).view(-1, 2)
        pairs = pairs[(pairs[:, 0] < size_s - 1) & (pairs[:, 1] < size_t - 1)]  # words a modifier removed
        links[row, pairs[:, 0], pairs[:, 1]] = 1.0
    s = src_words.masked_fill(src_words < 0, size_s - 1)  # "no word" indexes the empty last column
    t = tgt_words.masked_fill(tgt_words < 0, size_t - 1)
    rows = torch.arange(batch)[:, None, None]
    target = links[rows, s[:, None, :], t[:, :, None]]  # (batch, tgt_len, src_len)
    target = target / target.sum(-1, keepdim=True).clamp(min=1.0)
    if unaligned_to_eos:
        unaligned = (tgt_words >= 0) & (target.sum(-1) == 0)  # (batch, tgt_len)
        target = target + unaligned[:, :, None] * (src == EOS_ID)[:, None, :]
    return target


@dataclass(frozen=True)
class GuidedTargets:
    """What train.guided_alignment teaches a batch: where each id's word begins
    (tokenizer_word_starts), whether the steps that read a piece learn its word's links (step
    reads) or those that write it, and whether words the aligner left unaligned learn the EOS."""

    starts: tuple[torch.Tensor, torch.Tensor]
    reads: bool = False
    unaligned_to_eos: bool = False

    def of(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, alignments) -> torch.Tensor:
        """attention_targets of a batch: (batch, tgt_len, src_len)."""
        tgt = tgt_in if self.reads else tgt_out
        return attention_targets(src, tgt, alignments, self.starts, self.unaligned_to_eos)
