"""An epoch's training pairs as data.augment and data.spm_alpha draw them, drawn before the epoch's
batches are formed so that batches are cut by the drawn lengths: a batch of drawn pairs fills
train.max_tokens as a batch of the usual ones does (capitals and sampled segmentations take more
pieces than the usual ones, and batches cut by the usual lengths would have to leave room for them).

The rows are drawn in windows of consecutive rows, each from a seed of (the run's seed, the epoch,
the window): the same pairs with any number of loader workers, and again when a run resumes.
"""

from __future__ import annotations

import time

import numpy as np
import torch

WINDOW = 2048  # rows drawn per seed and per loader item


class _Flat:
    """Lists of ints held as one flat int32 array and its offsets: no Python object per list."""

    def __init__(self, lists: list[np.ndarray]):
        self.lengths = np.array([len(values) for values in lists], dtype=np.int64)
        self.values = np.concatenate([np.zeros(0, np.int32), *lists])
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)])

    def __getitem__(self, positions: list[int]) -> list[list[int]]:
        return [self.values[self.starts[p] : self.starts[p + 1]].tolist() for p in positions]


class DrawnPairs:
    """Token ids of pairs (and their word alignments, train.guided_alignment) held flat, 8 bytes
    a token and a side. `pairs[positions]` gives {"src_ids", "tgt_ids"[, "alignment"]} lists, as
    an encoded dataset's rows do, so that the batch loader reads either."""

    def __init__(self, src: list[np.ndarray], tgt: list[np.ndarray], alignment: list[np.ndarray] | None = None):
        self.columns = {"src_ids": _Flat(src), "tgt_ids": _Flat(tgt)}
        if alignment is not None:
            self.columns["alignment"] = _Flat(alignment)
        self.src_lens, self.tgt_lens = self.columns["src_ids"].lengths, self.columns["tgt_ids"].lengths

    def __len__(self) -> int:
        return len(self.src_lens)

    def __getitem__(self, positions: list[int]) -> dict:
        return {name: column[positions] for name, column in self.columns.items()}


class _Windows(torch.utils.data.Dataset):
    """Item w: window w of `rows` drawn by `resample` (augment.PairAugmenter), a pair drawn longer
    than `longest` tokens keeping its usual ids; as (src arrays, tgt arrays[, alignment arrays])."""

    def __init__(self, dataset, rows: np.ndarray, resample, longest: int, seed: tuple[int, ...]):
        self.dataset, self.rows, self.resample, self.longest, self.seed = dataset, rows, resample, longest, seed

    def __len__(self) -> int:
        return -(-len(self.rows) // WINDOW)

    def __getitem__(self, w: int):
        indices = self.rows[w * WINDOW : (w + 1) * WINDOW]
        pairs = self.dataset[indices.tolist()]
        seed = np.random.SeedSequence([*self.seed, w]).generate_state(1)[0]
        drawn = self.resample(pairs, seed=int(seed), indices=indices)
        sides = []
        for key in ("src_ids", "tgt_ids"):
            kept = [new if len(new) <= self.longest else old for new, old in zip(drawn[key], pairs[key])]
            sides.append([np.asarray(ids, dtype=np.int32) for ids in kept])
        if "alignment" in drawn:
            sides.append([np.asarray(pairs, dtype=np.int32) for pairs in drawn["alignment"]])
        return sides


def _as_drawn(window):
    return window  # the loader's default would make tensors of the arrays


def draw_epoch(dataset, rows: np.ndarray, resample, longest: int, seed: tuple[int, ...], workers: int = 0):
    """The pairs of `rows` (row indices of `dataset`, columns src, tgt, src_ids, tgt_ids) as
    `resample` changes and segments them, in that order: DrawnPairs; `workers` processes draw the
    windows side by side. Returns (pairs, seconds taken)."""
    started = time.monotonic()
    loader = torch.utils.data.DataLoader(
        _Windows(dataset, np.asarray(rows, dtype=np.int64), resample, longest, seed),
        batch_size=None,
        num_workers=workers,
        collate_fn=_as_drawn,
        generator=torch.Generator().manual_seed(0),  # not the global RNG: a resumed run's dropout stays the same
    )
    columns: list[list] = []
    for window in loader:
        columns = columns or [[] for _ in window]
        for column, values in zip(columns, window):
            column.extend(values)
    return DrawnPairs(*columns) if columns else DrawnPairs([], []), time.monotonic() - started
