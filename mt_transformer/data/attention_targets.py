"""The attention each target subword of a batch should give the source subwords, from its pair's
word links (word_alignment.py): train.guided_alignment's targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


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
