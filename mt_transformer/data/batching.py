"""Token-budget batches (fairseq's `max_tokens`) and padding them into tensors.

Sentences are sorted by length after a seeded shuffle (so equal lengths are mixed), cut into
batches whose padded size stays within the budget, and the batch order is shuffled every epoch
with a generator seeded by (seed, epoch): the same seed gives the same epochs on every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mt_transformer.data.attention_targets import GuidedTargets
from mt_transformer.data.budgets import budget_batches
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


def lengths(dataset) -> tuple[np.ndarray, np.ndarray]:
    """The `src_len` and `tgt_len` columns of an encoded split as numpy arrays, read straight from
    its memory-mapped Arrow table: no Python object per sentence, whatever the corpus size."""
    columns = dataset.with_format("numpy", columns=["src_len", "tgt_len"])[:]  # one slice: whole arrays at once
    return columns["src_len"].astype(np.int64), columns["tgt_len"].astype(np.int64)


def token_batches(
    src_lens: np.ndarray,
    tgt_lens: np.ndarray,
    max_tokens: int,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
) -> list[np.ndarray]:
    """Group example indices into batches of at most `max_tokens` padded tokens.

    A batch's size is `count * longest`, where `longest` counts the EOS (source) or BOS (target)
    that collation adds. Every index appears in exactly one batch. An example longer than the
    budget on its own raises ValueError.
    """
    src_lens = np.asarray(src_lens, dtype=np.int64) + 1
    tgt_lens = np.asarray(tgt_lens, dtype=np.int64) + 1
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(src_lens)) if shuffle else np.arange(len(src_lens))
    # stable sort by (target length, source length) keeps the shuffle among equal lengths
    order = order[np.lexsort((src_lens[order], tgt_lens[order]))]
    sizes = np.maximum(src_lens, tgt_lens)[order]
    if len(sizes) and sizes.max() > max_tokens:
        raise ValueError(f"an example of {int(sizes.max())} tokens exceeds max_tokens={max_tokens}")

    batches = budget_batches(order, sizes.tolist(), max_tokens)
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def corpus_shares(sizes: list[int], temperature: float) -> np.ndarray:
    """Each corpus's share of an epoch: (its share of the pairs) ** (1 / temperature), normalised."""
    weights = (np.asarray(sizes, dtype=np.float64) / max(sum(sizes), 1)) ** (1.0 / temperature)
    return weights / max(weights.sum(), 1e-300)


def corpus_rows(sizes: list[int], temperature: float, seed: int = 0, epoch: int = 0) -> np.ndarray | None:
    """The training rows of one epoch over corpora laid end to end (corpus i's rows follow corpus
    i - 1's): as many rows as they hold together, corpus i's count in proportion to its
    `corpus_shares`. A corpus drawn more often than its size repeats whole copies of itself, then
    a random part; less often, a random part. None where every corpus keeps its own size (one
    corpus, or temperature 1): each row once, as with a single corpus."""
    if len(sizes) < 2 or temperature == 1.0:
        return None
    counts = np.round(corpus_shares(sizes, temperature) * sum(sizes)).astype(np.int64)
    rng = np.random.default_rng([seed, epoch, 1])
    rows, offset = [], 0
    for size, count in zip(sizes, counts.tolist()):
        if size:
            copies, rest = divmod(count, size)
            rows += [np.arange(offset, offset + size)] * copies
            rows.append(offset + rng.choice(size, rest, replace=False))
        offset += size
    return np.concatenate(rows)


@dataclass
class Batch:
    src: torch.Tensor  # (batch, src_len): subwords + EOS, padded
    tgt_in: torch.Tensor  # (batch, tgt_len): BOS + subwords, padded
    tgt_out: torch.Tensor  # (batch, tgt_len): subwords + EOS, padded
    # train.guided_alignment: the attention each target position should give the source, or None
    alignment: torch.Tensor | None = None  # (batch, tgt_len, src_len)

    @property
    def target_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    def _tensors(self) -> tuple:
        return (self.src, self.tgt_in, self.tgt_out) + ((self.alignment,) if self.alignment is not None else ())

    def to(self, device) -> Batch:
        return Batch(*(t.to(device, non_blocking=True) for t in self._tensors()))

    def pin_memory(self) -> Batch:
        return Batch(*(t.pin_memory() for t in self._tensors()))

    @property
    def size(self) -> int:
        return self.src.size(0)

    def split(self, pieces: int) -> list[Batch]:
        """Up to `pieces` batches of consecutive rows, each trimmed to its own longest sentence."""
        rows = -(-self.size // pieces)  # ceiling division
        parts = []
        for start in range(0, self.size, rows):
            src, tgt_in, tgt_out, *alignment = (t[start : start + rows] for t in self._tensors())
            src_len, tgt_len = int((src != PAD_ID).sum(1).max()), int((tgt_out != PAD_ID).sum(1).max())
            alignment = alignment[0][:, :tgt_len, :src_len] if alignment else None
            parts.append(Batch(src[:, :src_len], tgt_in[:, :tgt_len], tgt_out[:, :tgt_len], alignment))
        return parts


def pad(
    sequences: list[list[int]], prefix: list[int] = (), suffix: list[int] = (), value: int = PAD_ID
) -> torch.Tensor:
    """Right-pad token lists with `value` into a (batch, longest) tensor, adding prefix/suffix tokens."""
    longest = max(len(s) for s in sequences) + len(prefix) + len(suffix)
    out = torch.full((len(sequences), longest), value, dtype=torch.long)
    for row, sequence in enumerate(sequences):
        tokens = list(prefix) + list(sequence) + list(suffix)
        out[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return out


def encoder_input(ids: list[int], tag_after_eos: bool = False) -> list[int]:
    """A source's ids as the encoder reads them: EOS appended; with `tag_after_eos` (NLLB's legacy
    layout, model.source_tag_after_eos) the language token the ids begin with goes after the EOS."""
    if tag_after_eos and ids:
        return ids[1:] + [EOS_ID, ids[0]]
    return ids + [EOS_ID]


def pad_sources(sources: list[list[int]], tag_after_eos: bool = False) -> torch.Tensor:
    """The encoder's input of `sources` (encoder_input of each), right-padded: (batch, longest + 1)."""
    return pad([encoder_input(ids, tag_after_eos) for ids in sources])


def collate(
    src_ids: list[list[int]],
    tgt_ids: list[list[int]],
    tag_after_eos: bool = False,
    alignments=None,
    guided: GuidedTargets | None = None,
) -> Batch:
    """The padded tensors of pairs; with `alignments` (each pair's flat word pairs) and `guided`,
    the attention targets of train.guided_alignment."""
    batch = Batch(
        src=pad_sources(src_ids, tag_after_eos),
        tgt_in=pad(tgt_ids, prefix=[BOS_ID]),
        tgt_out=pad(tgt_ids, suffix=[EOS_ID]),
    )
    if alignments is not None:
        batch.alignment = guided.of(batch.src, batch.tgt_in, batch.tgt_out, alignments)
    return batch


class BatchedDataset(torch.utils.data.Dataset):
    """Item i is batch i, collated: lets a DataLoader prepare the next batches in workers.
    `dataset[rows]` gives the rows' src_ids and tgt_ids: an encoded split, or an epoch's drawn
    pairs (epoch_draw.DrawnPairs); with `guided`, also their `alignment` (train.guided_alignment)."""

    def __init__(
        self, dataset, batches: list[np.ndarray], tag_after_eos: bool = False, guided: GuidedTargets | None = None
    ):
        self.dataset, self.batches, self.tag_after_eos, self.guided = dataset, batches, tag_after_eos, guided

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> Batch:
        rows = self.dataset[self.batches[i].tolist()]
        if self.guided is None:
            return collate(rows["src_ids"], rows["tgt_ids"], self.tag_after_eos)
        return collate(rows["src_ids"], rows["tgt_ids"], self.tag_after_eos, rows["alignment"], self.guided)


def batch_loader(
    dataset,
    batches: list[np.ndarray],
    num_workers: int = 0,
    pin_memory: bool = False,
    tag_after_eos: bool = False,
    guided: GuidedTargets | None = None,
):
    # A loader of its own generator: every new iterator draws a base seed, and drawing it from
    # the global RNG would shift the dropout masks of a resumed run away from the original's.
    return torch.utils.data.DataLoader(
        BatchedDataset(dataset, batches, tag_after_eos, guided),
        batch_size=None,
        shuffle=False,
        num_workers=num_workers,
        pin_memory=pin_memory,
        persistent_workers=False,
        generator=torch.Generator().manual_seed(0),
    )
